"""kinfer-runtime's command line: --help, bad flags (exit 2), unloadable model (exit 1)."""
import socket
import subprocess

from conftest import _binary, _model


def run(*args, timeout=30):
    return subprocess.run([str(_binary()), *args], capture_output=True, text=True, timeout=timeout)


def _wait_ready(port, seconds=60):
    """Polls kinfer-runtime's /ready on `port` until it answers 200."""
    import time
    import requests
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not ready in {seconds} s")


def test_help_lists_flags():
    p = run("--help")
    assert p.returncode == 0
    for flag in ("--model", "--host", "--port", "--threads", "--ctx-size", "--model-name",
                 "--max-body-bytes", "--log-level", "--device", "--kv-cache-fraction",
                 "--spec-tokens", "--spec-default", "--draft-model", "--mmap", "--plan-ahead",
                 "--idle-timeout", "--write-timeout"):
        assert flag in p.stdout


def test_bad_flags_exit_2_with_a_message():
    for args, words in [(("--bogus",), "unknown flag"), (("--model",), "needs a value"),
                        (("--model", "m.gguf", "--port", "abc"), "--port"),
                        (("--model", "m.gguf", "--log-level", "loud"), "log level"),
                        (("--model", "m.gguf", "--device", "gpu"), "--device"),
                        (("--model", "m.gguf", "--plan-ahead", "yes"), "--plan-ahead"),
                        (("--model", "m.gguf", "--kv-cache-fraction", "1.5"), "--kv-cache-fraction"),
                        (("--model", "m.gguf", "--kv-cache-fraction", "x"), "--kv-cache-fraction"),
                        (("--model", "m.gguf", "--spec-tokens", "65"), "--spec-tokens"),
                        (("--model", "m.gguf", "--idle-timeout", "0"), "--idle-timeout"),
                        (("--model", "m.gguf", "--write-timeout", "x"), "--write-timeout"),
                        (("--model", "m.gguf", "--spec-ngram-min", "5", "--spec-ngram-max", "3"),
                         "--spec-ngram-min"),
                        ((), "--model")]:
        p = run(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert words in p.stderr, (args, p.stderr)


def test_missing_model_exits_1(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = run("--model", str(tmp_path / "missing.gguf"), "--port", str(port))
    assert p.returncode == 1
    assert "cannot load the model" in p.stderr
    assert "missing.gguf" in p.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    p = run("--model", str(bad), "--port", str(port))
    assert p.returncode == 1
    assert "cannot load the model" in p.stderr


def test_a_kv_cache_past_the_memory_exits_1_naming_the_reason():
    """A KV cache that cannot be allocated is a start-up error, as in vLLM and llama-server: the
    runtime exits 1 saying how much it wanted (CrashLoopBackOff shows it), never a pod that
    serves /health forever and never gets ready. 2^32 positions of this model's KV are ~24 TB."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = run("--model", str(_model()), "--device", "cpu", "--port", str(port),
            "--kv-cache-tokens", str(1 << 32), timeout=120)
    assert p.returncode == 1, p.stderr
    assert "cannot serve the model" in p.stderr, p.stderr
    assert "KV cache of" in p.stderr and "does not fit" in p.stderr, p.stderr
    assert "; ready" not in p.stderr, p.stderr


def test_sigterm_while_the_model_loads_exits_0_at_once(tmp_path):
    """A pod deleted while its model loads: SIGTERM ends the runtime at once with 0 (the signal
    was only read after the load, so the process lived until the grace period's SIGKILL). The
    model file is a FIFO that nothing writes, so the load never finishes."""
    import os
    import signal
    import requests
    fifo = tmp_path / "never.gguf"
    os.mkfifo(fifo)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(_binary()), "--model", str(fifo), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        import time
        deadline = time.time() + 30
        while True:
            try:
                r = requests.get(f"http://127.0.0.1:{port}/ready", timeout=1)
                assert r.json()["status"] == "loading", r.text
                break
            except requests.ConnectionError:
                assert time.time() < deadline, "never listened"
                time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.communicate(timeout=10)[0]
    assert "received SIGTERM while loading the model; exiting" in out, out


def test_busy_port_exits_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run("--model", str(_model()), "--port", str(port))
    assert p.returncode == 1
    assert "cannot listen" in p.stderr


def test_device_cuda_without_a_gpu_exits_1_naming_the_reason():
    """On a machine without a usable CUDA device, --device cuda refuses to start (and says why);
    --device auto (the default) falls back to the CPU with one log line."""
    import pytest
    import requests
    try:
        probe = run("--model", str(_model()), "--device", "cuda", "--port", "1", timeout=60)
    except subprocess.TimeoutExpired:  # it started serving: there is a GPU
        pytest.skip("this machine has a usable CUDA device")
    if probe.returncode != 1:
        pytest.skip("this machine has a usable CUDA device")
    assert "no CUDA device" in probe.stderr, probe.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(_binary()), "--model", str(_model()), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert "backend: cpu (auto: no CUDA device" in out, out
    assert " on cpu " in out, out


def _serve_once(*flags):
    """Starts kinfer-runtime with `flags`, asks one greedy completion, stops it; returns
    (completion text, log)."""
    import requests
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(_binary()), "--model", str(_model()), "--device", "cpu",
                             "--port", str(port), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port)
        r = requests.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                          json={"prompt": "The capital of France is", "max_tokens": 12,
                                "temperature": 0})
        assert r.status_code == 200, r.text
        text = r.json()["choices"][0]["text"]
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    return text, out


def test_weights_read_into_memory_by_default_and_mapped_with_mmap():
    """On the CPU the model file is read into (huge-page) memory unless --mmap. In memory, on an
    AVX2 CPU without AVX-512, the Q4 matrices are also regrouped for the kernels (the log counts
    them; a mapping is never rewritten): the same integer products, summed in another fp32 order,
    and this prompt's greedy answer is the same either way."""
    text_mem, log_mem = _serve_once()
    text_map, log_map = _serve_once("--mmap")
    assert "read into memory" in log_mem, log_mem
    assert "file mapped" in log_map, log_map
    assert "regrouped" not in log_map, log_map
    flags = open("/proc/cpuinfo").read().split()
    if "avx2" in flags and "avx512f" not in flags:
        assert "210 Q4 tensors regrouped for the CPU kernels" in log_mem, log_mem  # 30 layers x 7
    assert text_mem == text_map
    assert "Paris" in text_mem
    p = run("--model", "m.gguf", "--mmap=maybe")
    assert p.returncode == 2 and "--mmap" in p.stderr, p.stderr
