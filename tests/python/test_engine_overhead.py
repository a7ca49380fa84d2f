"""kinfer-engine-overhead (bench/engine/): the engine's own time per step over a backend that
computes nothing. A short run checks that every mode runs every request to its end and that the
steps it times held the whole batch."""
import json
import subprocess

from conftest import _model, binary


def test_engine_overhead_runs_every_mode_to_the_end(tmp_path):
    exe = binary("kinfer-engine-overhead")
    out = tmp_path / "overhead.json"
    proc = subprocess.run([str(exe), "--model", str(_model()), "--batch", "1,3", "--tokens", "12",
                           "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    runs = {(r["mode"], r["batch"]): r for r in doc["results"]}
    assert set(runs) == {(m, b) for m in ("device_greedy", "device_sampled", "host_sampled")
                         for b in (1, 3)}
    for (mode, batch), r in runs.items():
        assert r["tokens"] == batch * 12, (mode, batch)  # ignore_eos: exactly max_tokens each
        assert r["steps"] >= 12
        assert r["full_steps"] >= 10 and r["ms_per_full_step"] > 0
        assert r["events"] == batch * 12, (mode, batch)  # an event a token
    assert "ms/full step" in proc.stdout
    # --stream-interval 4: each request's 12 tokens come as 1 + 4 + 4 + 3.
    held = subprocess.run([str(exe), "--model", str(_model()), "--batch", "3", "--tokens", "12",
                           "--modes", "device_greedy", "--stream-interval", "4", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert held.returncode == 0, held.stderr
    doc = json.loads(out.read_text())
    assert doc["stream_interval"] == 4
    [r] = doc["results"]
    assert r["tokens"] == 3 * 12 and r["events"] == 3 * 4, r
    # The speculative modes: the backend's verification and the host's, prompt-lookup drafts of
    # 3 tokens that the null backend's cycling text makes always right, so both take the same
    # steps, of 4 rows a request once the cycle has shown itself.
    spec = subprocess.run([str(exe), "--model", str(_model()), "--batch", "3", "--tokens", "24",
                           "--modes", "device_spec,host_spec", "--json", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert spec.returncode == 0, spec.stderr
    runs = {r["mode"]: r for r in json.loads(out.read_text())["results"]}
    assert set(runs) == {"device_spec", "host_spec"}
    for r in runs.values():
        assert r["tokens"] == 3 * 24, r
        assert r["full_steps"] >= 3 and r["ms_per_full_step"] > 0, r
        assert r["steps"] < 24, r  # fewer steps than tokens: drafts were accepted
    assert runs["device_spec"]["steps"] == runs["host_spec"]["steps"]
    # Over CUDA without a device: exit 1 naming why (on a GPU machine it runs).
    cuda = subprocess.run([str(exe), "--model", str(_model()), "--backend", "cuda", "--batch", "1",
                           "--tokens", "2"], capture_output=True, text=True, timeout=120)
    assert cuda.returncode == 0 or (cuda.returncode == 1 and "no CUDA device" in cuda.stderr), cuda.stderr
    # Usage errors are exit 2 with a message, not a crash.
    bad = subprocess.run([str(exe), "--batch"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "usage" in bad.stderr
