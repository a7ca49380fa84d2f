"""bench/gpu/goals.py: issue 7's goals read from a kinfer-gpu-bench document (the GPU check's
summary). A fabricated document checks the lookups by name and batch, the comparisons, the
kernels' ratio, and that a missing figure is reported as not measured, not as met."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOALS = ROOT / "bench" / "gpu" / "goals.py"


def run(tmp_path, results):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"device": "NVIDIA H200", "results": results}))
    out = tmp_path / "goals.json"
    proc = subprocess.run([sys.executable, str(GOALS), str(bench), "--json", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), proc.stdout


def test_goals_are_read_by_name_and_batch(tmp_path):
    ev, text = run(tmp_path, [
        {"name": "single_stream", "batch": 1, "tokens_per_s": 1600.0},
        {"name": "decode_batch", "batch": 1, "tokens_per_s": 999999.0},  # not batch 256
        {"name": "decode_batch", "batch": 256, "tokens_per_s": 150000.0},
        {"name": "decode_batch_per_head_attn", "batch": 256, "tokens_per_s": 100000.0},
        {"name": "single_stream_per_head_attn", "batch": 1, "tokens_per_s": 800.0},
        {"name": "single_stream_chained", "batch": 1, "tokens_per_s": 1400.0},
        {"name": "decode_batch_chained", "batch": 64, "tokens_per_s": 250000.0},  # not batch 256
    ])
    g = ev["goals"]
    assert g["single_stream_decode"]["met"] is True
    assert g["single_stream_decode_chained"]["measured_tokens_per_s"] == 1400.0
    assert g["single_stream_decode_chained"]["met"] is False
    assert g["decode_batch_256_chained"]["measured_tokens_per_s"] is None
    assert g["decode_batch_256"] == {**g["decode_batch_256"], "measured_tokens_per_s": 150000.0,
                                     "met": False}
    assert g["prefill_2048"]["measured_tokens_per_s"] is None and g["prefill_2048"]["met"] is False
    assert ev["decode_attention_speedup"] == {"single_stream": 2.0, "decode_batch_256": 1.5}
    assert "not measured" in text and "NOT met" in text


def test_an_unreadable_document_is_exit_1(tmp_path):
    bad = tmp_path / "bench.json"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, str(GOALS), str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "cannot read" in proc.stderr
