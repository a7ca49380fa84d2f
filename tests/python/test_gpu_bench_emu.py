"""kinfer-gpu-bench's own logic, run over the CUDA emulation (kinfer-gpu-bench-emu --tiny): the
benchmark a GPU run depends on records every result it measures, by name, with its tokens and
time, both plain and chained (each step launched behind the one before). Its figures mean
nothing here. (Its first emulated run found every result recorded empty.)"""
import json
import os
import subprocess

from conftest import _model
from sidecar_harness import binary


def test_the_benchmark_records_plain_and_chained_decode(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, KINFER_CUDA_FUSED_ACTIVATIONS="0")  # (fewer fiber switches emulated)
    proc = subprocess.run(
        [str(binary("kinfer-gpu-bench-emu")), "--model", str(_model()), "--tiny",
         "--only", "single_stream,single_stream_chained", "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())["results"]
    got = {(r["name"], r["batch"]): r for r in results}
    assert set(got) == {("single_stream", 1), ("single_stream_chained", 1)}, results
    for (name, batch), r in got.items():
        assert r["tokens"] == 4 * batch, r  # --tiny: 4 steps
        assert r["seconds"] > 0 and r["tokens_per_s"] > 0, r
