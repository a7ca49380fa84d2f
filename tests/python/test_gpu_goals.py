"""bench/gpu/goals.py: issue 7's goals read from a kinfer-gpu-bench document (the GPU check's
summary). A fabricated document checks the lookups by name and batch, the comparisons, the
kernels' ratio, and that a missing figure is reported as not measured, not as met."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOALS = ROOT / "bench" / "gpu" / "goals.py"


def run(tmp_path, results, device="NVIDIA H200"):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"device": device, "results": results}))
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
        {"name": "prefill_2048_tc_attention", "batch": 1, "tokens_per_s": 1200000.0},
    ])
    g = ev["goals"]
    assert g["single_stream_decode"]["met"] is True
    assert g["single_stream_decode_chained"]["measured_tokens_per_s"] == 1400.0
    assert g["single_stream_decode_chained"]["met"] is False
    assert g["decode_batch_256_chained"]["measured_tokens_per_s"] is None
    assert g["decode_batch_256"] == {**g["decode_batch_256"], "measured_tokens_per_s": 150000.0,
                                     "met": False}
    assert g["prefill_2048"]["measured_tokens_per_s"] is None and g["prefill_2048"]["met"] is False
    assert g["prefill_2048_tc_attention"]["met"] is True
    assert ev["decode_attention_speedup"] == {"single_stream": 2.0, "decode_batch_256": 1.5}
    assert "not measured" in text and "NOT met" in text
    assert ev["device_is_goals_device"] is True and "note:" not in text


def test_another_card_is_named_beside_the_goals(tmp_path):
    # An H100 may be lent instead: its figures are compared with the H200 goals all the same,
    # and both the document and the printout say whose they are.
    ev, text = run(tmp_path, [{"name": "single_stream", "batch": 1, "tokens_per_s": 1600.0}],
                   device="NVIDIA H100 80GB HBM3")
    assert ev["device_is_goals_device"] is False and ev["goals_stated_for"] == "NVIDIA H200"
    assert ev["goals"]["single_stream_decode"]["met"] is True
    assert "stated for an H200" in text and "NVIDIA H100 80GB HBM3" in text


def test_an_unreadable_document_is_exit_1(tmp_path):
    bad = tmp_path / "bench.json"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, str(GOALS), str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 1 and "cannot read" in proc.stderr
