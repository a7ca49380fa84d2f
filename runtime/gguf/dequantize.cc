// Scalar reference dequantization, bit-exact with ggml's dequantize_row_* (ggml-quants.c).
//
// The float expressions keep ggml's order of operations (e.g. Q4_K: (d*sc)*q - (dmin*m)), and the
// library is compiled with -ffp-contract=off so no FMA fuses them: every product and sum rounds
// exactly as in ggml's reference and gguf-py's numpy code.
#include <cassert>
#include <cstring>

#include "runtime/gguf/gguf_file.h"

namespace kinfer {
namespace {

// Tensor data is only as aligned as the file's general.alignment (which may be 1), so blocks are
// copied out with memcpy instead of being read through a misaligned struct pointer.
template <typename Block>
Block LoadBlock(const uint8_t* src, int64_t i) {
  Block b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

void DequantQ4_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK4_0) {
    const BlockQ4_0 x = LoadBlock<BlockQ4_0>(src, i);
    const float d = Fp16ToFp32(x.d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const int x0 = (x.qs[j] & 0x0F) - 8;
      const int x1 = (x.qs[j] >> 4) - 8;
      y[j] = static_cast<float>(x0) * d;
      y[j + kQK4_0 / 2] = static_cast<float>(x1) * d;
    }
  }
}

void DequantQ4_1(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK4_1) {
    const BlockQ4_1 x = LoadBlock<BlockQ4_1>(src, i);
    const float d = Fp16ToFp32(x.d);
    const float m = Fp16ToFp32(x.m);
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      const int x0 = x.qs[j] & 0x0F;
      const int x1 = x.qs[j] >> 4;
      y[j] = static_cast<float>(x0) * d + m;
      y[j + kQK4_1 / 2] = static_cast<float>(x1) * d + m;
    }
  }
}

void DequantQ8_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK8_0) {
    const BlockQ8_0 x = LoadBlock<BlockQ8_0>(src, i);
    const float d = Fp16ToFp32(x.d);
    for (int j = 0; j < kQK8_0; ++j) y[j] = static_cast<float>(x.qs[j]) * d;
  }
}

// Scale and min of sub-block j (0..7) from the 12 packed bytes of Q4_K/Q5_K:
//   bytes 0..3:  sc[0..3] (low 6 bits), top 2 bits = high bits of sc[4..7]
//   bytes 4..7:  m[0..3]  (low 6 bits), top 2 bits = high bits of m[4..7]
//   bytes 8..11: low nibble = low 4 bits of sc[4..7], high nibble = low 4 bits of m[4..7]
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void DequantQ4_K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ4_K x = LoadBlock<BlockQ4_K>(src, i);
    const uint8_t* q = x.qs;
    const float d = Fp16ToFp32(x.d);
    const float dmin = Fp16ToFp32(x.dmin);
    int is = 0;
    // Each 64-element group uses 32 bytes of qs: low nibbles first, then high nibbles.
    for (int j = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      uint8_t sc, m;
      ScaleMinK4(is + 0, x.scales, &sc, &m);
      const float d1 = d * sc;
      const float m1 = dmin * m;
      ScaleMinK4(is + 1, x.scales, &sc, &m);
      const float d2 = d * sc;
      const float m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Q6_K: per 128-element half, ql holds 64 bytes (low nibbles: elements 0..63, high: 64..127,
// each in two runs of 32), qh holds 32 bytes of four 2-bit fields (elements l, l+32, l+64, l+96),
// and 8 signed scales cover 16 elements each.
void DequantQ6_K(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ6_K x = LoadBlock<BlockQ6_K>(src, i);
    const float d = Fp16ToFp32(x.d);
    const uint8_t* ql = x.ql;
    const uint8_t* qh = x.qh;
    const int8_t* sc = x.scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const int64_t bs = GgmlBlockSize(type);
  if (bs <= 0 || n <= 0) return;
  const int64_t nb = n / bs;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16: {
      const auto* s = static_cast<const uint8_t*>(src);  // may be only 2-byte aligned
      for (int64_t i = 0; i < n; ++i) {
        ggml_fp16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Fp16ToFp32(h);
      }
      return;
    }
    case GgmlType::kBF16: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        ggml_bf16_t h;
        std::memcpy(&h, s + 2 * i, 2);
        dst[i] = Bf16ToFp32(h);
      }
      return;
    }
    case GgmlType::kQ4_0:
      return DequantQ4_0(static_cast<const uint8_t*>(src), dst, nb);
    case GgmlType::kQ4_1:
      return DequantQ4_1(static_cast<const uint8_t*>(src), dst, nb);
    case GgmlType::kQ8_0:
      return DequantQ8_0(static_cast<const uint8_t*>(src), dst, nb);
    case GgmlType::kQ4_K:
      return DequantQ4_K(static_cast<const uint8_t*>(src), dst, nb);
    case GgmlType::kQ6_K:
      return DequantQ6_K(static_cast<const uint8_t*>(src), dst, nb);
    default:
      assert(false && "DequantizeRow: unsupported type");
      return;
  }
}

}  // namespace kinfer
