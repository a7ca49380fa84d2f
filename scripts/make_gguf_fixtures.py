#!/usr/bin/env python3
"""Writes the GGUF reader's test fixtures and the fuzzer's seed corpus with gguf-py.

    python3 scripts/make_gguf_fixtures.py [--model models/smollm2-135m-instruct-q4_1.gguf]

Outputs (deterministic; rerun to regenerate, then commit):
  tests/fixtures/gguf/dequant_reference.gguf
      For each of Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F16, BF16: tensor "<TYPE>.q" (the encoded blocks)
      and "<TYPE>.expected" (F32, gguf.quants.dequantize of those blocks).
      Q4_0/Q4_1/Q8_0/F16/BF16 blocks come from gguf.quants.quantize of seeded normal floats (plus
      edge values for F16/BF16). gguf-py 0.19 cannot quantize Q4_K or Q6_K (NotImplementedError)
      and the bundled model holds no K-quant tensor, so their blocks are seeded random bytes with a
      finite fp16 scale: every bit of the packed scales / ql / qh is exercised, and gguf-py's
      dequantize (same order of float operations as ggml) gives the expected values.
      Also "fp32_to_fp16.in" (F32) and "fp32_to_fp16.out" (F16): numpy's round-to-nearest-even
      float32 -> float16 cast of edge and random values (NaN excluded: numpy keeps a signalling
      payload where F16C quiets it).
  tests/fixtures/gguf/model_rows_reference.gguf   (only with --model)
      Rows of the model's Q8_0 token_embd.weight and Q4_1 blk.0.ffn_down.weight dequantized by
      gguf-py, as F32 tensors "<tensor>#<row>", with the model's size recorded as metadata.
  fuzz/corpus/gguf/*.gguf
      Small valid files (<= 4 KB) written with GGUFWriter: every metadata value type, nested
      arrays, tensors of every supported type, a custom alignment, a v2 header.
"""
import argparse
import os
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gguf")
CORPUS = os.path.join(ROOT, "fuzz", "corpus", "gguf")


def write(writer: GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def random_k_blocks(rng, n_blocks, block_bytes, d_offsets):
    """Random bytes with a finite, modest fp16 at each of `d_offsets` (byte offsets in a block)."""
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in d_offsets:
        d = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
        d[0] = np.float16(6e-8)  # a subnormal scale in the first block
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def make_dequant_reference(path):
    rng = np.random.default_rng(20240601)
    w = GGUFWriter(path, "kinfer-fixture")
    w.add_string("kinfer.fixture", "dequant_reference: see scripts/make_gguf_fixtures.py")
    x = (rng.standard_normal((2, 512)) * 2.0).astype(np.float32)
    x[0, :32] = 0.0  # an all-zero block
    x[1, 32:64] = np.linspace(-1000.0, 1000.0, 32, dtype=np.float32)
    for t in (T.Q4_0, T.Q4_1, T.Q8_0):
        q = quantize(x, t)
        w.add_tensor(f"{t.name}.q", q, raw_dtype=t)
        w.add_tensor(f"{t.name}.expected", dequantize(q, t).astype(np.float32))

    # F16 / BF16: random bit patterns plus the edge values (zeros, subnormals, inf, nan).
    h = rng.integers(0, 1 << 16, size=1024, dtype=np.uint16)
    h[:16] = [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF,
              0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFFFF, 0x3C00, 0x0200, 0x83FF]
    f16 = h.view(np.float16).reshape(2, 512)
    w.add_tensor("F16.q", f16)
    w.add_tensor("F16.expected", dequantize(f16.view(np.uint8), T.F16).astype(np.float32))
    bq = quantize(x, T.BF16)
    w.add_tensor("BF16.q", bq, raw_dtype=T.BF16)
    w.add_tensor("BF16.expected", dequantize(bq, T.BF16).astype(np.float32))

    q4k = random_k_blocks(rng, 4, 144, d_offsets=(0, 2))  # d, dmin
    w.add_tensor("Q4_K.q", q4k.reshape(2, 2 * 144), raw_dtype=T.Q4_K)
    w.add_tensor("Q4_K.expected", dequantize(q4k.reshape(2, 2 * 144), T.Q4_K).astype(np.float32))
    q6k = random_k_blocks(rng, 4, 210, d_offsets=(208,))  # d is the last field
    w.add_tensor("Q6_K.q", q6k.reshape(2, 2 * 210), raw_dtype=T.Q6_K)
    w.add_tensor("Q6_K.expected", dequantize(q6k.reshape(2, 2 * 210), T.Q6_K).astype(np.float32))

    # float32 -> float16 rounding reference.
    edge = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.99, 65520.0, -65520.0, 1e9, np.inf, -np.inf,
            2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 3 * 2.0 ** -26, 2.0 ** -14,
            2.0 ** -14 - 2.0 ** -25, 1e-10, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
            1.0 + 2.0 ** -11 + 2.0 ** -20, 2049.0, 2051.0, 6.1e-5, 5.96e-8, np.float32(1.4e-45)]
    rnd = np.concatenate([
        rng.standard_normal(1024) * 100.0,
        np.exp2(rng.uniform(-30, 17, 1024)) * rng.choice([-1.0, 1.0], 1024),
        # halfway cases: a half plus exactly half an ulp, normal and subnormal
        (rng.integers(1, 0x7BFF, 512, dtype=np.uint16).view(np.float16).astype(np.float32)
         .view(np.uint32) | np.uint32(1 << 12)).view(np.float32),
    ]).astype(np.float32)
    fin = np.concatenate([np.array(edge, dtype=np.float32), rnd]).astype(np.float32)
    w.add_tensor("fp32_to_fp16.in", fin)
    with np.errstate(over="ignore"):  # 65520 and up round to inf, as intended
        w.add_tensor("fp32_to_fp16.out", fin.astype(np.float16))
    write(w)


MODEL_ROWS = {"token_embd.weight": [0, 1, 2, 1000, 49151], "blk.0.ffn_down.weight": [0, 7, 575]}


def make_model_rows(model, path):
    r = GGUFReader(model)
    w = GGUFWriter(path, "kinfer-fixture")
    w.add_string("kinfer.fixture", "model_rows_reference: see scripts/make_gguf_fixtures.py")
    w.add_uint64("kinfer.model_size", os.path.getsize(model))
    for t in r.tensors:
        if t.name not in MODEL_ROWS:
            continue
        rows = dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0]))
        w.add_array(f"kinfer.rows.{t.name}", MODEL_ROWS[t.name])
        w.add_string(f"kinfer.type.{t.name}", t.tensor_type.name)
        for row in MODEL_ROWS[t.name]:
            w.add_tensor(f"{t.name}#{row}", rows[row].astype(np.float32))
    write(w)


def make_corpus(out_dir):
    rng = np.random.default_rng(7)
    seeds = {}

    w = GGUFWriter(os.path.join(out_dir, "minimal.gguf"), "llama")
    seeds["minimal.gguf"] = w

    w = GGUFWriter(os.path.join(out_dir, "all_value_types.gguf"), "llama")
    w.add_uint8("t.u8", 200); w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000); w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000); w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5); w.add_bool("t.bool", True); w.add_string("t.str", "héllo")
    w.add_uint64("t.u64", 1 << 63); w.add_int64("t.i64", -(1 << 62)); w.add_float64("t.f64", -2.25)
    w.add_array("t.arr_str", ["a", "bc", ""]); w.add_array("t.arr_f32", [0.5, -1.0])
    w.add_array("t.arr_i32", [1, -2, 3]); w.add_array("t.nested", [[1, 2], [3]])
    w.add_array("t.nested_str", [["x"], ["y", "z"]])
    seeds["all_value_types.gguf"] = w

    w = GGUFWriter(os.path.join(out_dir, "tensors.gguf"), "llama")
    w.add_uint32("llama.block_count", 1)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    w.add_tensor("f32", x[0, :8].copy())
    w.add_tensor("f16", x[:, :4].astype(np.float16))
    w.add_tensor("bf16", quantize(x[:1, :8], T.BF16), raw_dtype=T.BF16)
    for t in (T.Q8_0, T.Q4_0, T.Q4_1):
        w.add_tensor(t.name.lower(), quantize(x, t), raw_dtype=t)
    seeds["tensors.gguf"] = w

    w = GGUFWriter(os.path.join(out_dir, "kquants.gguf"), "llama")
    w.add_tensor("q4_k", random_k_blocks(rng, 1, 144, (0, 2)), raw_dtype=T.Q4_K)
    w.add_tensor("q6_k", random_k_blocks(rng, 1, 210, (208,)), raw_dtype=T.Q6_K)
    w.add_tensor("i32", np.arange(4, dtype=np.int32))
    seeds["kquants.gguf"] = w

    w = GGUFWriter(os.path.join(out_dir, "align64.gguf"), "llama")
    w.add_custom_alignment(64)
    w.add_tensor("a", np.ones(3, dtype=np.float32))
    w.add_tensor("b", np.ones((2, 2), dtype=np.float32))
    seeds["align64.gguf"] = w

    for w in seeds.values():
        write(w)
    # A v2 header: same layout as v3 for little-endian files.
    src = os.path.join(out_dir, "tensors.gguf")
    data = bytearray(open(src, "rb").read())
    struct.pack_into("<I", data, 4, 2)
    open(os.path.join(out_dir, "tensors_v2.gguf"), "wb").write(bytes(data))
    for name in os.listdir(out_dir):
        size = os.path.getsize(os.path.join(out_dir, name))
        assert size <= 4096, f"seed {name} is {size} bytes"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf"))
    args = ap.parse_args()
    os.makedirs(FIXTURES, exist_ok=True)
    os.makedirs(CORPUS, exist_ok=True)
    make_dequant_reference(os.path.join(FIXTURES, "dequant_reference.gguf"))
    if os.path.exists(args.model):
        make_model_rows(args.model, os.path.join(FIXTURES, "model_rows_reference.gguf"))
    else:
        print(f"model {args.model} not found: model_rows_reference.gguf not regenerated", file=sys.stderr)
    make_corpus(CORPUS)


if __name__ == "__main__":
    main()
