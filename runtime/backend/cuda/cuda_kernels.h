// The CUDA backend's kernels, as host functions that enqueue them on a stream. Every pointer is
// device memory; nothing here synchronizes or allocates. Each function names the CPU op it
// mirrors (tests/runtime/backend/cuda/ check each against it within a stated tolerance).
//
// Activation formats (ggml's vec_dot_type, as the CPU's MatMul quantizes them):
//
//   weight type        activation           ActBuffers fields used, per token row t
//   Q4_0, Q8_0         Q8_0 (32-blocks)     qs[t*cols + i], d[t*cols/32 + b]
//   Q4_1               Q8_1 (32-blocks)     qs, d, s (= fp16(d * sum q) as a float, ggml's s)
//   Q4_K, Q6_K         Q8_K (256-blocks)    qs, d per 32-unit (its super-block's d, repeated),
//                                           s per 32-unit = integer sum of its 32 q (as float)
//   F16 / BF16 / F32   x rounded to fp16 /  xr[t*cols + i] (the rounded value, as a float)
//                      bf16 / kept
//
// The quantizers are bit-exact with the CPU's (same amax, same IEEE division and round-half-even),
// so a matrix-vector product differs from the CPU's only by fp32 summation order.
//
// Sizes: a call with nothing to compute (zero rows, tokens or elements) launches nothing and is
// not an error.
//
// Thread safety: the functions are stateless; callers serialize work through their stream.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "runtime/gguf/ggml_types.h"

namespace kinfer::cuda {

// A weight matrix in device memory, in its GGUF layout: row r at data + r * row_bytes.
// f16: an optional dequantized FP16 copy [rows][cols] for the cuBLAS path (null: none).
struct DevMatrix {
  GgmlType type = GgmlType::kF32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const uint16_t* f16 = nullptr;
};

enum class ActFormat { kF32, kF16, kBF16, kQ8_0, kQ8_1, kQ8K };
ActFormat ActFormatFor(GgmlType weight_type);
bool CudaMatMulSupports(GgmlType type);

// Scratch for quantized activations of up to max_tokens rows of max_cols.
struct ActBuffers {
  int8_t* qs = nullptr;  // [max_tokens][max_cols]
  float* d = nullptr;    // [max_tokens][max_cols / 32]
  float* s = nullptr;    // [max_tokens][max_cols / 32]
  float* xr = nullptr;   // [max_tokens][max_cols]
};

// x: [ntok][cols] floats -> act in `fmt`. REQUIRES: cols a multiple of 32 (256 for kQ8K).
void QuantizeActivations(ActFormat fmt, const float* x, int64_t ntok, int64_t cols,
                         const ActBuffers& act, cudaStream_t stream);

// Where a product's rows go: rows [begin[i], begin[i+1]) (the last part to w.rows) of token t
// land at y[i][t * part_rows + (r - begin[i])]. One part is the plain y[t * w.rows + r]; three
// parts split a fused Q|K|V (or two a gate|up) matrix into separate buffers. accumulate: y += dot
// (the residual add fused into the product).
struct MatOut {
  float* y[3] = {nullptr, nullptr, nullptr};
  int64_t begin[3] = {0, 0, 0};
  int parts = 1;
  bool accumulate = false;
};
inline MatOut PlainOut(float* y, bool accumulate = false) {
  MatOut o;
  o.y[0] = y;
  o.accumulate = accumulate;
  return o;
}

// dot(row r of W, activation row t) for t < ntok (any ntok >= 1; rows of 8 tokens share each
// weight read), written as `out` says. act must hold the activations in ActFormatFor(w.type).
// Mirrors the CPU's matrix-vector kernels (MatMul with the GEMM off).
void MatVec(const DevMatrix& w, const ActBuffers& act, int64_t ntok, const MatOut& out,
            cudaStream_t stream);

// Fused producers of quantized activations (one launch instead of two):
//   RmsNormQuantize: act = fmt(RmsNorm(x) * weight) for n rows of d (the same floats as RmsNorm)
//   SwiGluQuantize:  act = fmt(silu(gate) * up) for n rows of ff (the same floats as SwiGlu)
void RmsNormQuantize(ActFormat fmt, const float* x, const float* weight, int n, int d, float eps,
                     const ActBuffers& act, cudaStream_t stream);
void SwiGluQuantize(ActFormat fmt, const float* gate, const float* up, int n, int ff,
                    const ActBuffers& act, cudaStream_t stream);

// Products that compute their own activations: one launch instead of a quantizer launch and a
// product. With CUDA graphs a decode step at small batch is bound by its number of kernels, not
// by its bytes (SmolLM2-135M reads 96 MB a token: 20 us at 4.8 TB/s, against about 2 us a
// kernel), so every block of the product first computes the step's activations itself into
// shared memory (a few rows of n_embd or n_ff: cheap to compute many times over) and then takes
// its weight rows. The activations are computed by the quantizer kernels' own device code, so
// the result is bit for bit RmsNormQuantize (or SwiGluQuantize) followed by MatVec.
//
//   kRmsNorm: token t's activations are fmt(RmsNorm(row rows[t] of x, weight)) (rows null: row
//             t), rows of w.cols floats, with eps.
//   kSwiGlu:  fmt(silu(row t of x) * row t of up), rows of w.cols floats (x is the gate).
struct ActSource {
  enum class Kind { kRmsNorm, kSwiGlu };
  Kind kind = Kind::kRmsNorm;
  const float* x = nullptr;
  const float* weight = nullptr;  // kRmsNorm
  const float* up = nullptr;      // kSwiGlu
  const int32_t* rows = nullptr;  // kRmsNorm, optional
  float eps = 0.0f;               // kRmsNorm
};
inline ActSource RmsNormSource(const float* x, const float* weight, float eps,
                               const int32_t* rows = nullptr) {
  ActSource s;
  s.x = x;
  s.weight = weight;
  s.eps = eps;
  s.rows = rows;
  return s;
}
inline ActSource SwiGluSource(const float* gate, const float* up) {
  ActSource s;
  s.kind = ActSource::Kind::kSwiGlu;
  s.x = gate;
  s.up = up;
  return s;
}
// Shared memory a block may use for its activations (below the 48 KB every device gives
// without opting in): 8 tokens of up to 4,096 columns (the largest launch holds 8 tokens).
constexpr size_t kMaxFromActBytes = 40 * 1024;
// Whether MatVecFrom takes w at ntok tokens: a weight type with 8-bit activations (Q4_0, Q4_1,
// Q8_0, Q4_K, Q6_K) and activations that fit kMaxFromActBytes.
bool MatVecFromApplies(const DevMatrix& w, int64_t ntok);
// MatVec(w, activations of src, ntok, out) in one launch; the activations never reach global
// memory. max_blocks caps the grid (its blocks then loop over the weight rows; 0: one block per
// 8 rows); about 8 x the multiprocessor count keeps every multiprocessor full while bounding
// the times the activations are computed. REQUIRES MatVecFromApplies(w, ntok) (or nothing to
// compute); out does not overlap src's rows.
void MatVecFrom(const DevMatrix& w, const ActSource& src, int64_t ntok, const MatOut& out,
                int max_blocks, cudaStream_t stream);

// out[r][c] = dequantized W (FP16, round to nearest), for the cuBLAS path.
void DequantizeToF16(const DevMatrix& w, uint16_t* out, cudaStream_t stream);

// out[i][c] = dequantized row row_ids[i] of a matrix (embedding lookup). Mirrors DequantizeRow.
// With chained_from: a negative row_ids[i] names the row chained_from[-1 - row_ids[i]] (a chained
// step's token, drawn by the step before it; ModelBackend::LaunchSampleChained). With ids_out:
// ids_out[i] = the id row i read (so later kernels of the step see a chained token).
void DequantizeRows(GgmlType type, const void* data, size_t row_bytes, int64_t cols,
                    const int32_t* row_ids, int n, float* out, cudaStream_t stream,
                    const int32_t* chained_from = nullptr, int32_t* ids_out = nullptr);

// cuBLAS's FP16 activations: y = x saturated to FP16's range (+-65504) and rounded to nearest
// even (an outlier of a larger model loses precision instead of becoming inf, then NaN logits).
void F32ToF16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream);
// The same straight from the op that makes them, in one launch instead of two, and without the
// float rows' round trip through memory (the cuBLAS path's largest activation traffic at
// prefill): bit for bit F32ToF16 of RmsNorm (n rows of d) or of SwiGlu. SwiGluF16 reads n rows
// of ff, row t of gate at gate + t * row_stride (and of up likewise: row_stride 2 ff reads the
// fused gate|up product's [n][2 ff] output with up = gate + ff), leaves them as they are, and
// writes y16 [n][ff].
void RmsNormF16(const float* x, const float* weight, int n, int d, float eps, uint16_t* y16,
                cudaStream_t stream);
void SwiGluF16(const float* gate, const float* up, int n, int ff, int64_t row_stride, uint16_t* y16,
               cudaStream_t stream);

// Mirrors runtime/model/ops.h: RmsNorm (sum of squares in double), RopeNormal (ggml's angle
// recurrence; theta_scale = powf(base, -2/rope_dim) computed by the caller on the host, pos[t] the
// position of row t), SwiGlu, AddInPlace.
void RmsNorm(const float* x, const float* weight, int n, int d, float eps, float* y,
             cudaStream_t stream);
void RopeNormal(float* x, const int32_t* pos, int n, int n_heads, int head_dim, int rope_dim,
                float theta_scale, float freq_scale, cudaStream_t stream);
void SwiGlu(float* gate, const float* up, int64_t n, cudaStream_t stream);
void AddInPlace(float* y, const float* x, int64_t n, cudaStream_t stream);

// RoPE of q (n_head heads) and k (n_head_kv heads) and the K/V write into the cache, in one
// launch: the same floats as RopeNormal on each, then WriteKv.
// row_stride > 0: token t's rows of q, k and v start t * row_stride floats apart (a fused Q|K|V
// product's output); 0: dense rows.
void RopeWriteKv(float* q, float* k, const float* v, const int32_t* pos, const int32_t* slot_rows,
                 int n, int n_head, int n_head_kv, int head_dim, int rope_dim, float theta_scale,
                 float freq_scale, uint16_t* k_layer, uint16_t* v_layer, cudaStream_t stream,
                 int64_t row_stride = 0);

// Keys and values of n tokens (rows of n_embd_kv floats) into one layer of the paged FP16 cache:
// row t goes to cache row slot_rows[t] (= block * block_size + slot).
void WriteKv(const float* k, const float* v, const int32_t* slot_rows, int n, int n_embd_kv,
             uint16_t* k_layer, uint16_t* v_layer, cudaStream_t stream);

// out[i] = x[rows[i]] for rows of d floats.
void GatherRows(const float* x, const int32_t* rows, int n, int d, float* out,
                cudaStream_t stream);

// out[r] = the index of the largest of logits[r][0..n_vocab) (the first on ties). REQUIRES: no
// NaN (DrawToken's and ArgmaxLowestId's precondition too; which index a NaN row gives is unstated).
void ArgmaxRows(const float* logits, int rows, int n_vocab, int32_t* out, cudaStream_t stream);

// One row's draw on the device: DrawToken's rule (runtime/sample/draw.h) for any settings (the
// penalties and logit biases are applied to the logits before, or the step samples on the host).
// Filled by the host. top_k up to kMaxTopK gathers the k best in three passes over the row (or,
// with many ties at the top, k rounds of a block argmax); larger top_k, and top-p over the whole
// vocabulary, bisect the row's logits (SampleRows' kernel says how).
constexpr int kMaxTopK = 64;
struct DeviceDraw {
  uint64_t noise_key = 0;  // DrawParams::noise_key
  float temperature = 0.0f;
  float top_p = 1.0f;      // >= 1: off
  float min_p = 0.0f;      // > 0: on
  float log_min_p = 0.0f;  // std::log(min_p) in float, as DrawToken computes it
  int top_k = 0;           // 1..n_vocab - 1, or 0: the whole vocabulary
  // The row's logit bias and penalties (AdjustLogitsRows): adjust_n entries of three int32s
  // (id, bias's float bits, count) from index adjust_begin of the step's metadata, distinct ids
  // in ascending order; input: the row's input token's index among the step's tokens, counted
  // once more (-1: none). All zero and -1: the row is not adjusted.
  int adjust_begin = 0;
  int adjust_n = 0;
  int input = -1;
  float repetition = 1.0f;
  float frequency = 0.0f;
  float presence = 0.0f;
  int logprobs = -1;  // LogprobRows: -1 none; else the drawn token's and the top `logprobs`
  // The row's token mask (DrawParams::mask), applied by AdjustLogitsRows after the entries: from
  // index mask_begin of the metadata, ceil(n_vocab / 64) 64-bit words as int32 pairs (-1: no
  // mask), and fallback_n ids from fallback_begin.
  int mask_begin = -1;
  int fallback_begin = 0;
  int fallback_n = 0;
};
constexpr int kAdjustInts = 3;  // int32s per entry

// Applies each row's logit bias and penalties to logits row r in place, as the host's
// ApplyLogitAdjustments (runtime/sample/penalties.h) does, bit for bit (a zero's sign aside),
// then its token mask as ApplyTokenMask (runtime/sample/draw.h) does:
// entries in meta (DeviceDraw's adjust fields), the input token from input_ids (the step's
// tokens as the embedding read them: DequantizeRows' ids_out). Rows without entries are left.
// Before SampleRows, in its own kernel, so that the sampler reads the row through the
// read-only path.
void AdjustLogitsRows(float* logits, int rows, int n_vocab, const DeviceDraw* draws,
                      const int32_t* meta, const int32_t* input_ids, cudaStream_t stream);

// out[r] = the token draws[r] picks from logits row r (one block per row). With the same logits,
// the host's DrawToken gives the same token, unless top_p x the total falls within rounding of a
// boundary between two tokens (probabilities are summed in a different grouping), or two
// survivors' scores are within the device's last bit of each other (its double log may differ
// from the host's by one ulp). The same row and settings always give the same token.
void SampleRows(const float* logits, int rows, int n_vocab, const DeviceDraw* draws, int32_t* out,
                cudaStream_t stream);

// What LogprobRows reports for a row: DrawnLogprobs' layout (runtime/sample/draw.h).
constexpr int kMaxDeviceLogprobs = 20;
struct DeviceLogprobs {
  int32_t token;
  float logprob;
  int32_t rank;
  int32_t n_top;
  int32_t top_ids[kMaxDeviceLogprobs];
  float top_logprobs[kMaxDeviceLogprobs];
};

// For every row r with draws[r].logprobs >= 0 (others are left alone), after SampleRows:
// out[r] = TokenLogprobOf's figures (runtime/sample/sampler.h) for tokens[r] on logits row r
// (the row after AdjustLogitsRows, which the host's logprobs read too): the log-softmax at the
// token, its rank (ties to the lower id), and the top min(logprobs, n_vocab, 20) tokens best
// first with theirs. Ranks and top ids are the host's exactly; the logprobs differ from the
// host's only by the rounding of the softmax total, summed in double in another order. One
// block per row.
void LogprobRows(const float* logits, int rows, int n_vocab, const DeviceDraw* draws,
                 const int32_t* tokens, DeviceLogprobs* out, cudaStream_t stream);

// ---- attention over the paged cache ------------------------------------------------------
//
//   token g of the step: seq = tok_seq[g], position = tok_pos[g]; it attends positions
//   [0, tok_pos[g]] of its sequence; position p lives at cache row
//   tables[seq_table_off[seq] + p / block_size] * block_size + p % block_size.
//
//   k/v layer: [num_blocks][block_size][n_embd_kv] FP16; query head h reads kv head h / n_gqa.
struct AttnParams {
  const float* q = nullptr;          // [n_tok][n_head * head_dim] (rows qkv_row apart if set)
  const uint16_t* k = nullptr;       // this layer's keys
  const uint16_t* v = nullptr;       // this layer's values
  float* out = nullptr;              // [n_tok][n_head * head_dim]
  // out16 (non-null): the output goes here instead of `out`, as cuBLAS's FP16 activations
  // (F32ToF16 of what `out` would hold, bit for bit), so the output product needs no
  // conversion launch and the float rows never reach memory. Every attention kernel.
  uint16_t* out16 = nullptr;         // [n_tok][n_head * head_dim]
  const int32_t* tok_seq = nullptr;  // [n_tok]
  const int32_t* tok_pos = nullptr;  // [n_tok]
  const int32_t* seq_table_off = nullptr;
  const int32_t* tables = nullptr;
  // AttentionDecode: block i computes token tok_index[i] (null: token i); n_tok blocks.
  const int32_t* tok_index = nullptr;
  int n_tok = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int block_size = 0;
  float scale = 0.0f;  // 1 / sqrt(head_dim)
  // AttentionDecode only. split_partial / split_counters: scratch for splitting a token's
  // positions over several blocks (DecodeSplits); null = never split. split_counters must be
  // zero before the first launch; every launch leaves them zero.
  float* split_partial = nullptr;     // DecodeSplitScratchFloats(...) floats
  int32_t* split_counters = nullptr;  // max_split_blocks ints
  int max_split_blocks = 0;           // blocks the scratch holds (DecodeSplitBlocks)
  int sm_count = 0;                   // the device's multiprocessors (sizes the split)
  // AttentionDecode only. Batch invariance (CudaBackendOptions::batch_invariant), > 0: the
  // largest position count of the launch's tokens. Each token's positions are then split at
  // InvariantSplitChunk(its own count), so its partial states and their merge are its own,
  // whatever else is in the launch; the launch takes InvariantSplits(invariant_max_pos) splits
  // (a token that needs fewer leaves the rest empty, which add nothing to its merge) and is cut
  // into launches of as many tokens as max_split_blocks holds. Needs the split scratch.
  int invariant_max_pos = 0;
  int tok_base = 0;  // (a cut launch's first token: block i computes token tok_base + i)
  bool per_head_decode = false;       // force the per-(token, head) kernel (a fallback)
  // AttentionDecode only, REQUIRES SharedKvDecodeApplies(p): each token's output row (n_head *
  // head_dim) is also quantized into q8_out in QuantizeActivations' kQ8_0 / kQ8_1 layout, bit
  // for bit, so that the output product needs no quantizer launch.
  bool q8_out_on = false;
  ActBuffers q8_out;
  // AttentionDecode only, REQUIRES SharedKvDecodeApplies(p) and one token per sequence in the
  // launch (no token reads another's new K/V): q holds the step's queries before RoPE, and the
  // kernel does RopeWriteKv's work itself, bit for bit: RoPE on each token's query heads and on its
  // k row (k_new, [n_tok][n_head_kv * head_dim] floats), and k / v_new written as FP16 into the
  // cache row slot_rows[g] of k_cache / v_cache (the layer's cache, as k and v).
  bool rope_on = false;
  const float* k_new = nullptr;
  const float* v_new = nullptr;
  // qkv_row > 0: token rows of q (and of k_new / v_new) are qkv_row floats apart, as a fused
  // Q|K|V product writes them ([n_tok][n_head * head_dim + 2 n_head_kv * head_dim], q at the row's
  // start, k_new and v_new after it). 0: dense rows.
  int64_t qkv_row = 0;
  const int32_t* slot_rows = nullptr;
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
  int rope_dim = 0;
  float theta_scale = 1.0f;
  float freq_scale = 1.0f;
};

// Decode attention. Two kernels:
//  * shared K/V (head_dim 64 or 128, n_head / n_head_kv <= kMaxGqaGroup): one block of 4 warps
//    per (token, KV head) computes all the query heads that share that KV head, so each K/V row
//    is read once per group instead of once per head; a K/V row is read as 16-byte vectors by
//    head_dim / 8 lanes, several positions per warp at once. When the step has few tokens
//    (n_tok * n_head_kv blocks leave most multiprocessors idle) each token's positions are split
//    over up to kMaxDecodeSplit blocks (split-K, as flash-decoding), whose partial softmax
//    states the last block to finish merges; no second launch.
//  * per head (any other shape, or per_head_decode): one block of 4 warps per (token, head),
//    online softmax over all its positions. Any head_dim <= 256 (a multiple of 32).
constexpr int kMaxGqaGroup = 8;
constexpr int kMaxDecodeSplit = 32;
constexpr int kDecodeSplitMinPositions = 64;  // a split covers at least this many positions
// Batch invariance: the positions per split of a token with npos positions (a function of npos
// alone: kInvariantSplitChunk, or more where that would take over kMaxDecodeSplit splits), and
// the splits it takes.
constexpr int kInvariantSplitChunk = 256;
__host__ __device__ inline int InvariantSplitChunk(int npos) {
  const int c = (npos + kMaxDecodeSplit - 1) / kMaxDecodeSplit;
  return c > kInvariantSplitChunk ? c : kInvariantSplitChunk;
}
inline int InvariantSplits(int npos) {
  const int c = InvariantSplitChunk(npos);
  return npos <= c ? 1 : (npos + c - 1) / c;
}
// Split scratch blocks for batch invariance (each a (token, KV head, split)): more than the
// default mode's, since every token with a long context splits however many share the launch.
inline int InvariantSplitBlocks(int sm_count) {
  return 2 * sm_count > 4096 ? 2 * sm_count : 4096;
}
// Splits per token for a step of n_tok decode tokens: enough blocks to fill 2 x sm_count, at most
// kMaxDecodeSplit, 1 when the scratch is absent or the shared-K/V kernel does not apply.
int DecodeSplits(const AttnParams& p);
// Scratch for split decode: blocks = 2 x sm_count, each with a partial state per query head.
inline int DecodeSplitBlocks(int sm_count) { return 2 * sm_count; }
inline size_t DecodeSplitScratchFloats(int sm_count, int n_head, int n_head_kv, int head_dim) {
  return static_cast<size_t>(DecodeSplitBlocks(sm_count)) * (n_head / n_head_kv) * (head_dim + 2);
}
// Whether AttentionDecode takes the shared-K/V kernel for p's shape (and per_head_decode is off):
// only then can it split, quantize its output (q8_out_on) and apply RoPE and write the KV cache
// itself (rope_on).
bool SharedKvDecodeApplies(const AttnParams& p);
void AttentionDecode(const AttnParams& p, cudaStream_t stream);

// Tiled (flash-style) causal attention: one block per (tile of kPrefillTile query tokens of one
// sequence, head); K/V tiles staged in shared memory. tiles[i] = first token g of tile i; a tile
// never crosses a sequence (the caller cuts tiles per sequence; tile_len[i] tokens). head_dim 64
// or 128; anything else falls back to AttentionDecode.
//
// tensor_cores: the WMMA variant (FP16 Q.K^T and P.V on the tensor cores, fp32 accumulation,
// tiles of kPrefillTileTc queries and 64 positions; P rounded to FP16 before it meets V); else
// the fp32 FMA variant (tiles of kPrefillTile).
constexpr int kPrefillTile = 32;
constexpr int kPrefillTileTc = 64;
inline int PrefillTileSize(bool tensor_cores) { return tensor_cores ? kPrefillTileTc : kPrefillTile; }
void AttentionPrefill(const AttnParams& p, const int32_t* tiles, const int32_t* tile_len,
                      int n_tiles, bool tensor_cores, cudaStream_t stream);
bool AttentionPrefillSupports(int head_dim);

}  // namespace kinfer::cuda
