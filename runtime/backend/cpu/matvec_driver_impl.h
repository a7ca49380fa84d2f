// Internal: the matrix-vector driver and the horizontal sum shared by the ISA-specific kernel
// files. Include it inside `namespace kinfer::cpu_internal { namespace { ... } }` of a translation
// unit compiled with at least AVX2: each includer then gets its own copy, compiled with its own ISA
// flags, and internal linkage keeps the copies apart (no ODR clash between ISAs).
//
// A Kernel for MatVecDriver provides
//   using View = ...;                                      // a token's activation row, viewed
//   static View MakeView(const void* act, int64_t cols);
//   template <int NT> static void Row(const uint8_t* wrow, const View* views, int64_t cols,
//                                     float* out);         // out[t] = dot(row, token t), t < NT
#ifndef KINFER_RUNTIME_BACKEND_CPU_MATVEC_DRIVER_IMPL_H_
#define KINFER_RUNTIME_BACKEND_CPU_MATVEC_DRIVER_IMPL_H_

// Tokens that share one pass over a weight row.
constexpr int kMaxTok = 4;

// Sum of the 8 lanes, in ggml's order (hsum_float_8): halves, then pairs, then the last two.
inline float Hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// y[t * ldy + r] for rows [r0, r1) and tokens [t0, t1), kMaxTok tokens per pass over a row.
template <typename Kernel>
void MatVecDriver(const MatArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t tb = t0; tb < t1; tb += kMaxTok) {
    const int nt = static_cast<int>(t1 - tb < kMaxTok ? t1 - tb : kMaxTok);
    typename Kernel::View views[kMaxTok];
    for (int t = 0; t < nt; ++t) views[t] = Kernel::MakeView(a.act[tb + t], a.cols);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wrow = a.w + r * a.w_row_bytes;
      float out[kMaxTok];
      switch (nt) {
        case 1: Kernel::template Row<1>(wrow, views, a.cols, out); break;
        case 2: Kernel::template Row<2>(wrow, views, a.cols, out); break;
        case 3: Kernel::template Row<3>(wrow, views, a.cols, out); break;
        default: Kernel::template Row<4>(wrow, views, a.cols, out); break;
      }
      for (int t = 0; t < nt; ++t) a.y[(tb + t) * a.ldy + r] = out[t];
    }
  }
}

#endif  // KINFER_RUNTIME_BACKEND_CPU_MATVEC_DRIVER_IMPL_H_
