// Internal: the interleaved-layout GEMM (block-per-lane, see kernels_avx512.cc for the idea),
// shared by the ISA files that instantiate it. Include it only inside an anonymous namespace in
// namespace kinfer::cpu_internal, after <immintrin.h>, <cstring>, kernels.h and thread_pool.h,
// and after defining:
//   __m256i DotAcc(__m256i acc, __m256i w_u8, __m256i x_s8)  // acc + per-lane 4-byte dot
//   constexpr int kTokTile;                                  // tokens per micro-kernel, 1..3
// Each including file is compiled with its own ISA flags; the anonymous namespace keeps the
// instantiations apart, so none leaks into a file compiled for a lower ISA.
//
// The weights of a panel of 4 rows are repacked into the activations' interleaved order once per
// token chunk, as unsigned bytes: Q4 nibbles as they are, Q8_0 as w + 128. Eight DotAcc steps
// leave 8 complete block dots in 8 lanes; the zero-point (8 for Q4_0, 128 for Q8_0) times
// sum(q_x) is subtracted in integers, so each block's dot is exact, and one cvt + fma scales all 8
// by d_w * d_x (+ m_w * s_x for Q4_1), as ggml does per block.

constexpr int kPanelRows = 4;
constexpr int64_t kTokChunk = 96;  // tokens whose activations stay in L2 while panels rotate

enum class QKind { kQ4_0, kQ4_1, kQ8_0 };

template <QKind K>
struct Traits;
template <>
struct Traits<QKind::kQ4_0> {
  static constexpr int kBlockBytes = sizeof(BlockQ4_0);
  static constexpr int kQsOffset = 2;
  static constexpr int kZeroShift = 3;  // zero point 8
};
template <>
struct Traits<QKind::kQ4_1> {
  static constexpr int kBlockBytes = sizeof(BlockQ4_1);
  static constexpr int kQsOffset = 4;
  static constexpr int kZeroShift = -1;  // no zero point
};
template <>
struct Traits<QKind::kQ8_0> {
  static constexpr int kBlockBytes = sizeof(BlockQ8_0);
  static constexpr int kQsOffset = 2;
  static constexpr int kZeroShift = 7;  // w + 128
};

// A panel of kPanelRows weight rows in the interleaved order, with per-block scales.
//
// When the last group holds only 1 or 2 blocks (cols = 576 = 2 groups + 2 blocks is the common
// case), padding it to 8 lanes per row would waste most of its work. Instead that tail is packed
// across rows: lane r * ntail + b holds row r's block b, so one vector covers all 4 rows, and the
// activation side is a broadcast of the tail's 1-2 lanes. Each lane is still one block's dot.
struct Panel {
  uint8_t* q;   // [row][nbp * 32]
  float* d;     // [row][nbp]
  float* m;     // [row][nbp] (Q4_1 only)
  int ntail;    // blocks in the cross-row tail group (1 or 2), or 0 when there is none
  uint8_t* tq;  // tail: 8 steps x 32 bytes
  float* td;    // tail: 8 lane scales
  float* tm;    // tail: 8 lane mins (Q4_1)
};

// Builds the cross-row tail from the per-row repacked last group.
void PackTail(Panel& p, int64_t nbp) {
  const int64_t gt = nbp / 8 - 1;
  std::memset(p.tq, 0, 256);
  for (int lane = 0; lane < 8; ++lane) p.td[lane] = p.tm[lane] = 0.0f;
  for (int r = 0; r < kPanelRows; ++r) {
    for (int b = 0; b < p.ntail; ++b) {
      const int lane = r * p.ntail + b;
      for (int k = 0; k < 8; ++k) {
        std::memcpy(p.tq + k * 32 + lane * 4, p.q + r * nbp * 32 + gt * 256 + k * 32 + b * 4, 4);
      }
      p.td[lane] = p.d[r * nbp + gt * 8 + b];
      p.tm[lane] = p.m[r * nbp + gt * 8 + b];
    }
  }
}

// 4x4 transposes of 32-bit words inside each 128-bit half: out[k] = word k of a0..a3.
inline void Transpose4x4(__m256i a0, __m256i a1, __m256i a2, __m256i a3, __m256i* out) {
  const __m256i t0 = _mm256_unpacklo_epi32(a0, a1), t1 = _mm256_unpackhi_epi32(a0, a1);
  const __m256i t2 = _mm256_unpacklo_epi32(a2, a3), t3 = _mm256_unpackhi_epi32(a2, a3);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

inline __m256i Load2x128(const uint8_t* lo, const uint8_t* hi) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
}

// One full group of 8 blocks (all inside the row) into 8 interleaved steps, with shuffles.
template <QKind K>
inline void RepackFullGroup(const uint8_t* blocks, __m256i* out) {
  using Tr = Traits<K>;
  const uint8_t* q = blocks + Tr::kQsOffset;
  constexpr int bb = Tr::kBlockBytes;
  if constexpr (K == QKind::kQ8_0) {
    // Words 0..3 and 4..7 of the 8 blocks: two 4x4 transposes per half-block.
    __m256i lo[4], hi[4];
    Transpose4x4(Load2x128(q + 0 * bb, q + 4 * bb), Load2x128(q + 1 * bb, q + 5 * bb),
                 Load2x128(q + 2 * bb, q + 6 * bb), Load2x128(q + 3 * bb, q + 7 * bb), lo);
    Transpose4x4(Load2x128(q + 0 * bb + 16, q + 4 * bb + 16), Load2x128(q + 1 * bb + 16, q + 5 * bb + 16),
                 Load2x128(q + 2 * bb + 16, q + 6 * bb + 16), Load2x128(q + 3 * bb + 16, q + 7 * bb + 16), hi);
    const __m256i bias = _mm256_set1_epi8(-128);
    for (int k = 0; k < 4; ++k) {
      _mm256_store_si256(out + k, _mm256_xor_si256(lo[k], bias));
      _mm256_store_si256(out + k + 4, _mm256_xor_si256(hi[k], bias));
    }
  } else {
    __m256i v[4];
    Transpose4x4(Load2x128(q + 0 * bb, q + 4 * bb), Load2x128(q + 1 * bb, q + 5 * bb),
                 Load2x128(q + 2 * bb, q + 6 * bb), Load2x128(q + 3 * bb, q + 7 * bb), v);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
      _mm256_store_si256(out + k, _mm256_and_si256(v[k], low4));
      _mm256_store_si256(out + k + 4, _mm256_and_si256(_mm256_srli_epi16(v[k], 4), low4));
    }
  }
}

template <QKind K>
void RepackRow(const uint8_t* wrow, int64_t nb, int64_t nbp, uint8_t* q, float* d, float* m) {
  using Tr = Traits<K>;
  const __m256i vindex = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32(Tr::kBlockBytes));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t g = 0; g < nbp / 8; ++g) {
    const int64_t valid = nb - g * 8;
    __m256i* out = reinterpret_cast<__m256i*>(q + g * 256);
    if (valid >= 8) {
      RepackFullGroup<K>(wrow + g * 8 * Tr::kBlockBytes, out);
      continue;
    }
    // The last, partial group: masked gathers never touch the missing blocks.
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const uint8_t* gbase = wrow + g * 8 * Tr::kBlockBytes + Tr::kQsOffset;
    if constexpr (K == QKind::kQ8_0) {
      for (int k = 0; k < 8; ++k) {
        const __m256i v = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(gbase + 4 * k),
                                                      vindex, mask, 1);
        // w + 128 as unsigned; padding lanes stay 0 (their activation bytes are 0 too).
        _mm256_store_si256(out + k, _mm256_and_si256(_mm256_xor_si256(v, _mm256_set1_epi8(-128)), mask));
      }
    } else {
      for (int k = 0; k < 4; ++k) {
        const __m256i v = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), reinterpret_cast<const int*>(gbase + 4 * k),
                                                      vindex, mask, 1);
        _mm256_store_si256(out + k, _mm256_and_si256(v, low4));
        _mm256_store_si256(out + k + 4, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
      }
    }
  }
  for (int64_t b = 0; b < nbp; ++b) {
    if (b < nb) {
      const uint8_t* blk = wrow + b * Tr::kBlockBytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      d[b] = _cvtsh_ss(h);
      if constexpr (K == QKind::kQ4_1) {
        std::memcpy(&h, blk + 2, 2);
        m[b] = _cvtsh_ss(h);
      }
    } else {
      d[b] = 0.0f;
      if constexpr (K == QKind::kQ4_1) m[b] = 0.0f;
    }
  }
}

// The same panel row from kQ4Grouped8 weights (weight_layout.h): each 32-byte chunk of a full
// group already holds 4 bytes of each of its 8 blocks, so its nibbles are steps k and k + 4 as
// they are; the row's last, partial group is GGUF blocks, repacked as RepackRow does.
template <QKind K>
void RepackRowGrouped(const uint8_t* wrow, int64_t nb, int64_t nbp, uint8_t* q, float* d, float* m) {
  static_assert(K != QKind::kQ8_0, "kQ4Grouped8 holds Q4_0 and Q4_1 only");
  constexpr int bb = Traits<K>::kBlockBytes;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const int64_t full = nb / 8;
  for (int64_t g = 0; g < full; ++g) {
    const uint8_t* grp = wrow + g * 8 * bb;
    __m256i* out = reinterpret_cast<__m256i*>(q + g * 256);
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + k * 32));
      _mm256_store_si256(out + k, _mm256_and_si256(v, low4));
      _mm256_store_si256(out + k + 4, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
    }
    _mm256_storeu_ps(d + g * 8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 128))));
    if constexpr (K == QKind::kQ4_1) {
      _mm256_storeu_ps(m + g * 8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp + 144))));
    }
  }
  if (full * 8 < nbp) {
    RepackRow<K>(wrow + full * 8 * bb, nb - full * 8, nbp - full * 8, q + full * 256, d + full * 8, m + full * 8);
  }
}

// Sums of each of 4 vectors: [sum(a), sum(b), sum(c), sum(d)].
inline __m128 Reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// out[t] = dot(panel row r, token t) in lane r, for 4 rows and T tokens.
template <QKind K, int T>
void MicroKernel(const Panel& p, int64_t nbp, const Q8Row* x, __m128* out) {
  constexpr int R = kPanelRows;
  __m256 facc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) facc[r][t] = _mm256_setzero_ps();
  const int64_t full_groups = nbp / 8 - (p.ntail > 0 ? 1 : 0);
  for (int64_t g = 0; g < full_groups; ++g) {
    __m256i iacc[R][T];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) iacc[r][t] = _mm256_setzero_si256();
    const int64_t off = g * 256;
    for (int k = 0; k < 8; ++k) {
      __m256i w[R];
      for (int r = 0; r < R; ++r) w[r] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p.q + r * nbp * 32 + off + k * 32));
      for (int t = 0; t < T; ++t) {
        const __m256i xv = _mm256_load_si256(reinterpret_cast<const __m256i*>(x[t].qs + off + k * 32));
        for (int r = 0; r < R; ++r) iacc[r][t] = DotAcc(iacc[r][t], w[r], xv);
      }
    }
    for (int t = 0; t < T; ++t) {
      const __m256 dx = _mm256_loadu_ps(x[t].d + g * 8);
      __m256i zero_term = _mm256_setzero_si256();
      if constexpr (Traits<K>::kZeroShift >= 0) {
        zero_term = _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t].isum + g * 8)),
                                      Traits<K>::kZeroShift);
      }
      for (int r = 0; r < R; ++r) {
        __m256i dot = iacc[r][t];
        if constexpr (Traits<K>::kZeroShift >= 0) dot = _mm256_sub_epi32(dot, zero_term);
        const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(p.d + r * nbp + g * 8), dx);
        facc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, facc[r][t]);
        if constexpr (K == QKind::kQ4_1) {
          facc[r][t] = _mm256_fmadd_ps(_mm256_loadu_ps(p.m + r * nbp + g * 8), _mm256_loadu_ps(x[t].s + g * 8),
                                       facc[r][t]);
        }
      }
    }
  }
  static_assert(R == 4, "Reduce4 packs 4 rows");
  for (int t = 0; t < T; ++t) out[t] = Reduce4(facc[0][t], facc[1][t], facc[2][t], facc[3][t]);
  if (p.ntail == 0) return;

  // Cross-row tail (see Panel): one vector per token covers the 4 rows.
  const int64_t off = full_groups * 256;
  const __m256 td = _mm256_load_ps(p.td);
  for (int t = 0; t < T; ++t) {
    __m256i iacc = _mm256_setzero_si256();
    __m256 dx, sx = _mm256_setzero_ps();
    __m256i isum = _mm256_setzero_si256();
    const int8_t* xq = x[t].qs + off;
    if (p.ntail == 2) {
      for (int k = 0; k < 8; ++k) {
        int64_t v;
        std::memcpy(&v, xq + k * 32, 8);
        iacc = DotAcc(iacc, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.tq + k * 32)),
                                   _mm256_set1_epi64x(v));
      }
      dx = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(x[t].d + full_groups * 8)));
      if constexpr (K == QKind::kQ4_1) {
        sx = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(x[t].s + full_groups * 8)));
      }
      isum = _mm256_castpd_si256(_mm256_broadcast_sd(reinterpret_cast<const double*>(x[t].isum + full_groups * 8)));
    } else {
      for (int k = 0; k < 8; ++k) {
        int32_t v;
        std::memcpy(&v, xq + k * 32, 4);
        iacc = DotAcc(iacc, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.tq + k * 32)),
                                   _mm256_set1_epi32(v));
      }
      dx = _mm256_set1_ps(x[t].d[full_groups * 8]);
      if constexpr (K == QKind::kQ4_1) sx = _mm256_set1_ps(x[t].s[full_groups * 8]);
      isum = _mm256_set1_epi32(x[t].isum[full_groups * 8]);
    }
    if constexpr (Traits<K>::kZeroShift >= 0) {
      iacc = _mm256_sub_epi32(iacc, _mm256_slli_epi32(isum, Traits<K>::kZeroShift));
    }
    __m256 acc = _mm256_mul_ps(_mm256_cvtepi32_ps(iacc), _mm256_mul_ps(td, dx));
    if constexpr (K == QKind::kQ4_1) acc = _mm256_fmadd_ps(_mm256_load_ps(p.tm), sx, acc);
    __m128 rows;
    if (p.ntail == 2) {  // lanes (r, b) = 2r + b: add pairs, then gather rows 0,1 | 2,3
      const __m256 h = _mm256_hadd_ps(acc, acc);
      rows = _mm_shuffle_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1), _MM_SHUFFLE(1, 0, 1, 0));
    } else {
      rows = _mm256_castps256_ps128(acc);
    }
    out[t] = _mm_add_ps(out[t], rows);
  }
}

// kGrouped: the weights are in kQ4Grouped8 (Q4_0 / Q4_1), not in the GGUF layout.
template <QKind K, bool kGrouped = false>
void Gemm(const MatArgs& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  const int64_t nb = a.cols / 32;
  const int64_t nbp = PaddedBlocks(a.cols);
  // Panel storage, reused across calls by this thread.
  thread_local AlignedBuffer storage;
  const size_t main_bytes = kPanelRows * nbp * (32 + 8);
  uint8_t* mem = storage.Reserve(main_bytes + 256 + 64);
  const int64_t last = nb - (nbp - 8);  // blocks in the last group
  Panel p{mem,
          reinterpret_cast<float*>(mem + kPanelRows * nbp * 32),
          reinterpret_cast<float*>(mem + kPanelRows * nbp * 36),
          static_cast<int>(last <= 2 ? last : 0),
          mem + main_bytes,
          reinterpret_cast<float*>(mem + main_bytes + 256),
          reinterpret_cast<float*>(mem + main_bytes + 288)};
  for (int64_t tc = t0; tc < t1; tc += kTokChunk) {
    const int64_t tc_end = tc + kTokChunk < t1 ? tc + kTokChunk : t1;
    for (int64_t rp = r0; rp < r1; rp += kPanelRows) {
      const int rows = static_cast<int>(r1 - rp < kPanelRows ? r1 - rp : kPanelRows);
      for (int r = 0; r < kPanelRows; ++r) {
        if (r < rows) {
          const uint8_t* wrow = a.w + (rp + r) * a.w_row_bytes;
          if constexpr (kGrouped) {
            RepackRowGrouped<K>(wrow, nb, nbp, p.q + r * nbp * 32, p.d + r * nbp, p.m + r * nbp);
          } else {
            RepackRow<K>(wrow, nb, nbp, p.q + r * nbp * 32, p.d + r * nbp, p.m + r * nbp);
          }
        } else {  // missing rows of the last panel: zero scales, results discarded
          std::memset(p.q + r * nbp * 32, 0, nbp * 32);
          std::memset(p.d + r * nbp, 0, nbp * 4);
          std::memset(p.m + r * nbp, 0, nbp * 4);
        }
      }
      if (p.ntail > 0) PackTail(p, nbp);
      for (int64_t t = tc; t < tc_end; t += kTokTile) {
        const int nt = static_cast<int>(tc_end - t < kTokTile ? tc_end - t : kTokTile);
        Q8Row x[kTokTile];
        for (int i = 0; i < nt; ++i) x[i] = ViewQ8(a.act[t + i], a.cols);
        __m128 out[kTokTile];
        switch (nt) {
          case 1: MicroKernel<K, 1>(p, nbp, x, out); break;
          case 2:
            if constexpr (kTokTile >= 2) MicroKernel<K, 2>(p, nbp, x, out);
            break;
          default:
            if constexpr (kTokTile >= 3) MicroKernel<K, 3>(p, nbp, x, out);
            break;
        }
        for (int i = 0; i < nt; ++i) {
          float* dst = a.y + (t + i) * a.ldy + rp;
          if (rows == kPanelRows) {
            _mm_storeu_ps(dst, out[i]);
          } else {
            alignas(16) float v[4];
            _mm_store_ps(v, out[i]);
            for (int r = 0; r < rows; ++r) dst[r] = v[r];
          }
        }
      }
    }
  }
}

