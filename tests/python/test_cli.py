"""kinfer-runtime's command line: --help, bad flags (exit 2), unloadable model (exit 1)."""
import socket
import subprocess

from conftest import _binary, _model


def run(*args, timeout=30):
    return subprocess.run([str(_binary()), *args], capture_output=True, text=True, timeout=timeout)


def test_help_lists_flags():
    p = run("--help")
    assert p.returncode == 0
    for flag in ("--model", "--host", "--port", "--threads", "--ctx-size", "--model-name",
                 "--max-body-bytes", "--log-level"):
        assert flag in p.stdout


def test_bad_flags_exit_2_with_a_message():
    for args, words in [(("--bogus",), "unknown flag"), (("--model",), "needs a value"),
                        (("--model", "m.gguf", "--port", "abc"), "--port"),
                        (("--model", "m.gguf", "--log-level", "loud"), "log level"),
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


def test_busy_port_exits_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = run("--model", str(_model()), "--port", str(port))
    assert p.returncode == 1
    assert "cannot listen" in p.stderr
