// Portable scalar kernels for every supported weight type: the fallback on CPUs without AVX2 and
// the baseline the faster paths are compared with. Per block they follow ggml's order: an exact
// integer dot product, then one fp32 scaling (d_w * d_x), plus m * s for Q4_1.
#include <cstring>

#include "runtime/backend/cpu/kernels.h"

namespace kinfer::cpu_internal {
namespace {

float DotQ4_1(const void* wrow, const void* act, int64_t cols) {
  const auto* w = static_cast<const BlockQ4_1*>(wrow);
  const Q8Row a = ViewQ8(act, cols);
  float sumf = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const int8_t* y = a.qs + b * 32;
    int sumi = 0;
    for (int i = 0; i < 16; ++i) {
      sumi += (w[b].qs[i] & 0x0F) * y[i] + (w[b].qs[i] >> 4) * y[i + 16];
    }
    sumf += (HalfToFloat(w[b].d) * a.d[b]) * static_cast<float>(sumi) + HalfToFloat(w[b].m) * a.s[b];
  }
  return sumf;
}

float DotQ4_0(const void* wrow, const void* act, int64_t cols) {
  const auto* w = static_cast<const BlockQ4_0*>(wrow);
  const Q8Row a = ViewQ8(act, cols);
  float sumf = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const int8_t* y = a.qs + b * 32;
    int sumi = 0;
    for (int i = 0; i < 16; ++i) {
      sumi += ((w[b].qs[i] & 0x0F) - 8) * y[i] + ((w[b].qs[i] >> 4) - 8) * y[i + 16];
    }
    sumf += static_cast<float>(sumi) * (HalfToFloat(w[b].d) * a.d[b]);
  }
  return sumf;
}

// Q4_0 / Q4_1 in the kQ4Grouped8 layout (weight_layout.h) against the interleaved kQ8 row: the
// same integer dots and the same fp32 operations, in the same order, as DotQ4_0 / DotQ4_1.
template <bool kQ41>
float DotQ4Grouped8(const void* wrow, const void* act, int64_t cols) {
  constexpr int kBlockBytes = kQ41 ? 20 : 18;
  constexpr int kZero = kQ41 ? 0 : 8;
  const auto* w = static_cast<const uint8_t*>(wrow);
  const Q8Row a = ViewQ8(act, cols);
  const int64_t nb = cols / 32;
  float sumf = 0.0f;
  for (int64_t g = 0; g * 8 < nb; ++g) {
    const int n = static_cast<int>(nb - g * 8 < 8 ? nb - g * 8 : 8);
    const uint8_t* grp = w + g * 8 * kBlockBytes;
    const int8_t* xg = a.qs + g * 256;
    // A full group is regrouped: quant byte i of chunk k at 32k + 4b + i, then 8 d, then 8 m; the
    // last, partial group's blocks are GGUF blocks (d, [m,] 16 quant bytes).
    const bool grouped = n == 8;
    for (int b = 0; b < n; ++b) {
      const uint8_t* gguf = grp + b * kBlockBytes;
      int sumi = 0;
      for (int k = 0; k < 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          const uint8_t q = grouped ? grp[k * 32 + b * 4 + i] : gguf[(kQ41 ? 4 : 2) + 4 * k + i];
          sumi += ((q & 0x0F) - kZero) * xg[k * 32 + b * 4 + i] +
                  ((q >> 4) - kZero) * xg[(k + 4) * 32 + b * 4 + i];
        }
      }
      uint16_t h;
      std::memcpy(&h, grouped ? grp + 128 + 2 * b : gguf, 2);
      const int64_t blk = g * 8 + b;
      if constexpr (kQ41) {
        uint16_t hm;
        std::memcpy(&hm, grouped ? grp + 144 + 2 * b : gguf + 2, 2);
        sumf += (HalfToFloat(h) * a.d[blk]) * static_cast<float>(sumi) + HalfToFloat(hm) * a.s[blk];
      } else {
        sumf += static_cast<float>(sumi) * (HalfToFloat(h) * a.d[blk]);
      }
    }
  }
  return sumf;
}

float DotQ8_0(const void* wrow, const void* act, int64_t cols) {
  const auto* w = static_cast<const BlockQ8_0*>(wrow);
  const Q8Row a = ViewQ8(act, cols);
  float sumf = 0.0f;
  for (int64_t b = 0; b < cols / 32; ++b) {
    const int8_t* y = a.qs + b * 32;
    int sumi = 0;
    for (int i = 0; i < 32; ++i) sumi += w[b].qs[i] * y[i];
    sumf += static_cast<float>(sumi) * (HalfToFloat(w[b].d) * a.d[b]);
  }
  return sumf;
}

// Q4_K's 6-bit scale and min of sub-block j (ggml's get_scale_min_k4).
inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

float DotQ4_K(const void* wrow, const void* act, int64_t cols) {
  const auto* w = static_cast<const BlockQ4_K*>(wrow);
  const Q8KRow a = ViewQ8K(act, cols);
  float sumf = 0.0f;
  for (int64_t b = 0; b < cols / 256; ++b) {
    const int8_t* y = a.qs + b * 256;
    int sum_sc = 0, sum_m = 0;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      ScaleMinK4(j, w[b].scales, &sc, &m);
      const uint8_t* q = w[b].qs + (j / 2) * 32;
      const int shift = (j % 2) * 4;
      int dot = 0;
      for (int i = 0; i < 32; ++i) dot += ((q[i] >> shift) & 0xF) * y[j * 32 + i];
      sum_sc += sc * dot;
      sum_m += m * (a.bsums[b * 16 + 2 * j] + a.bsums[b * 16 + 2 * j + 1]);
    }
    const float d = a.d[b] * HalfToFloat(w[b].d);
    const float dmin = -a.d[b] * HalfToFloat(w[b].dmin);
    sumf += d * static_cast<float>(sum_sc) + dmin * static_cast<float>(sum_m);
  }
  return sumf;
}

// Q6_K values of one super-block, q - 32 in [-32, 32), in element order.
void UnpackQ6_K(const BlockQ6_K& blk, int8_t* q) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = blk.ql + half * 64;
    const uint8_t* qh = blk.qh + half * 32;
    int8_t* o = q + half * 128;
    for (int l = 0; l < 32; ++l) {
      o[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
      o[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      o[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      o[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

float DotQ6_K(const void* wrow, const void* act, int64_t cols) {
  const auto* w = static_cast<const BlockQ6_K*>(wrow);
  const Q8KRow a = ViewQ8K(act, cols);
  float sumf = 0.0f;
  for (int64_t b = 0; b < cols / 256; ++b) {
    int8_t q[256];
    UnpackQ6_K(w[b], q);
    const int8_t* y = a.qs + b * 256;
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int dot = 0;
      for (int i = 0; i < 16; ++i) dot += q[g * 16 + i] * y[g * 16 + i];
      sumi += w[b].scales[g] * dot;
    }
    sumf += (HalfToFloat(w[b].d) * a.d[b]) * static_cast<float>(sumi);
  }
  return sumf;
}

template <typename ToFloat>
float DotHalves(const uint16_t* w, const uint16_t* x, int64_t n, ToFloat cvt) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += cvt(w[i + k]) * cvt(x[i + k]);
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += cvt(w[i]) * cvt(x[i]);
  for (float v : acc) sum += v;
  return sum;
}

float DotF16(const void* wrow, const void* act, int64_t cols) {
  return DotHalves(static_cast<const uint16_t*>(wrow), static_cast<const uint16_t*>(act), cols,
                   HalfToFloat);
}

float DotBF16(const void* wrow, const void* act, int64_t cols) {
  return DotHalves(static_cast<const uint16_t*>(wrow), static_cast<const uint16_t*>(act), cols,
                   Bf16ToFloat);
}

float DotF32(const void* wrow, const void* act, int64_t cols) {
  const auto* w = static_cast<const float*>(wrow);
  const auto* x = static_cast<const float*>(act);
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += w[i + k] * x[i + k];
  }
  float sum = 0.0f;
  for (; i < cols; ++i) sum += w[i] * x[i];
  for (float v : acc) sum += v;
  return sum;
}

template <float (*Dot)(const void*, const void*, int64_t)>
void MatVec(const MatArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wrow = a.w + r * a.w_row_bytes;
    for (int64_t t = t0; t < t1; ++t) a.y[t * a.ldy + r] = Dot(wrow, a.act[t], a.cols);
  }
}

}  // namespace

void RegisterScalarKernels(KernelTable* t) {
  RegisterScalarQuantizers(t);
  auto set = [t](GgmlType type, MatKernelFn fn) { t->matvec[static_cast<int>(type)] = fn; };
  set(GgmlType::kF32, MatVec<DotF32>);
  set(GgmlType::kF16, MatVec<DotF16>);
  set(GgmlType::kBF16, MatVec<DotBF16>);
  set(GgmlType::kQ4_0, MatVec<DotQ4_0>);
  set(GgmlType::kQ4_1, MatVec<DotQ4_1>);
  set(GgmlType::kQ8_0, MatVec<DotQ8_0>);
  set(GgmlType::kQ4_K, MatVec<DotQ4_K>);
  set(GgmlType::kQ6_K, MatVec<DotQ6_K>);
  t->matvec_q4g8[static_cast<int>(GgmlType::kQ4_0)] = MatVec<DotQ4Grouped8<false>>;
  t->matvec_q4g8[static_cast<int>(GgmlType::kQ4_1)] = MatVec<DotQ4Grouped8<true>>;
}

}  // namespace kinfer::cpu_internal
