"""kinfer-gpu-bench's own logic, run over the CUDA emulation (kinfer-gpu-bench-emu --tiny): the
benchmark a GPU run depends on records every result it measures, by name, with its tokens and
time, both plain and chained (each step launched behind the one before), chained also with one
stream (no copy stream), and once each. Its figures mean nothing here. (Its first emulated run
found every result recorded empty; a later one, a result recorded twice where --only left out
the second of two measurements sharing a result.)"""
import json
import os
import subprocess
import sys

from conftest import ROOT, _model
from sidecar_harness import binary


def test_the_benchmark_records_plain_and_chained_decode(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, KINFER_CUDA_FUSED_ACTIVATIONS="0")  # (fewer fiber switches emulated)
    proc = subprocess.run(
        [str(binary("kinfer-gpu-bench-emu")), "--model", str(_model()), "--tiny",
         "--only", "single_stream,single_stream_chained,single_stream_chained_one_stream",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    results = doc["results"]
    # The emulator is no card in the datasheet table: measured against the H200's, saying so;
    # the bandwidth its reported memory clock (3.201 GHz) and bus (6,144 bits) give, DDR.
    assert doc["peak_source"].startswith("H200 datasheet (this device is not"), doc
    assert doc["peak_bytes_per_s"] == 4.8e12 and doc["peak_flops"] == 989e12
    assert doc["reported_bytes_per_s"] == 2 * 3.201e9 * 6144 / 8
    assert "ceilings: 989 TFLOP/s, 4800 GB/s" in proc.stdout
    got = {(r["name"], r["batch"]): r for r in results}
    assert len(got) == len(results), results
    assert set(got) == {("single_stream", 1), ("single_stream_chained", 1),
                        ("single_stream_chained_one_stream", 1)}, results
    for (name, batch), r in got.items():
        assert r["tokens"] == 4 * batch, r  # --tiny: 4 steps
        assert r["seconds"] > 0 and r["tokens_per_s"] > 0, r


def _two_layer_model(src, dst, untied):
    """The bundled model cut to its first two layers; untied: with an output.weight of its own (a
    copy of the token embedding), as most larger models have."""
    sys.path.insert(0, str(ROOT / "bench" / "gpu"))
    import gguf_pieces
    buf = src.read_bytes()
    h = gguf_pieces.parse(buf)
    tensors = []
    for t in h["tensors"]:
        layer = gguf_pieces.layer_of(t["name"])
        if layer is not None and layer >= 2:
            continue
        data = buf[h["data"] + t["offset"]:h["data"] + t["offset"] + t["size"]]
        tensors.append((t, data))
        if t["name"] == "token_embd.weight" and untied:
            tensors.append((dict(t, name="output.weight"), data))
    gguf_pieces.write(str(dst), h, tensors, 2)


def _bench(model, out):
    proc = subprocess.run(
        [str(binary("kinfer-gpu-bench-emu")), "--model", str(model), "--tiny", "--only", "single_stream",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())


def test_an_untied_model_runs_and_its_embedding_gets_no_fp16_copy(tmp_path):
    """A model with its own output matrix decodes on the CUDA backend (its products read
    output.weight), and the token embedding, which only the lookup reads (quantized), gets no
    FP16 copy: the copies take what the tied model's take, where the embedding is the output."""
    tied, untied = tmp_path / "tied.gguf", tmp_path / "untied.gguf"
    _two_layer_model(_model(), tied, untied=False)
    _two_layer_model(_model(), untied, untied=True)
    a = _bench(tied, tmp_path / "a.json")
    b = _bench(untied, tmp_path / "b.json")
    for doc in (a, b):
        assert [(r["name"], r["batch"], r["tokens"]) for r in doc["results"]] == [("single_stream", 1, 4)], doc
        assert doc["fp16_copy_bytes"] > 0
    assert b["fp16_copy_bytes"] == a["fp16_copy_bytes"], (a, b)
    # Both read their output matrix (the same bytes) once a step.
    assert b["weight_bytes_per_step"] == a["weight_bytes_per_step"]
    assert b["weight_bytes_read_batch_256"] == a["weight_bytes_read_batch_256"]
