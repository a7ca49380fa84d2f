#include "runtime/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "runtime/backend/cpu/vec_ops.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/ops.h"

namespace kinfer {
namespace {

size_t RowBytesOf(GgmlType type, int64_t cols) {
  return static_cast<size_t>(cols / GgmlBlockSize(type)) * GgmlTypeSize(type);
}

std::string DimsToString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace

StatusOr<WeightMatrix> ReadWeightMatrix(const GgufFile& f, const std::string& name, int64_t cols,
                                        int64_t rows) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (!t) return InvalidArgument("model is missing tensor '" + name + "'");
  if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
    return InvalidArgument("tensor '" + name + "' has shape " + DimsToString(t->dims) +
                           ", expected [" + std::to_string(cols) + ", " + std::to_string(rows) +
                           "]");
  }
  if (!GgmlTypeSupported(t->type)) {
    return Unimplemented("tensor '" + name + "' has type " + std::string(GgmlTypeName(t->type)) +
                         ", which this runtime cannot read");
  }
  if (cols % GgmlBlockSize(t->type) != 0) {
    return InvalidArgument("tensor '" + name + "': row width is not a multiple of its block size");
  }
  WeightMatrix w{t->type, t->data, rows, cols};
  if (t->layout != static_cast<uint32_t>(WeightLayout::kGguf)) {
    if (t->layout != static_cast<uint32_t>(WeightLayout::kQ4Grouped8) || !Q4Groupable(t->type)) {
      return InvalidArgument("tensor '" + name + "' has weight layout " +
                             std::to_string(t->layout) + ", which this runtime does not read");
    }
    w.layout = WeightLayout::kQ4Grouped8;
  }
  return w;
}

StatusOr<std::vector<float>> ReadNormVector(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (!t) return InvalidArgument("model is missing tensor '" + name + "'");
  if (t->num_elements() != n) {
    return InvalidArgument("tensor '" + name + "' has shape " + DimsToString(t->dims) +
                           ", expected [" + std::to_string(n) + "]");
  }
  if (t->type != GgmlType::kF32 && t->type != GgmlType::kF16 && t->type != GgmlType::kBF16) {
    return Unimplemented("norm tensor '" + name + "' must be F32, F16 or BF16");
  }
  std::vector<float> v(n);
  DequantizeRow(t->type, t->data, v.data(), n);
  return v;
}

LlamaModel::LlamaModel(std::shared_ptr<const GgufFile> file, LlamaHParams hp, int n_threads)
    : file_(std::move(file)), hp_(std::move(hp)), pool_(std::max(1, n_threads)) {}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(std::shared_ptr<const GgufFile> file,
                                                       int n_threads) {
  if (!file) return InvalidArgument("no model file");
  KINFER_ASSIGN_OR_RETURN(LlamaHParams hp, ReadLlamaHParams(*file));
  std::unique_ptr<LlamaModel> m(new LlamaModel(file, hp, n_threads));
  const GgufFile& f = *file;
  const int64_t d = hp.n_embd, dq = static_cast<int64_t>(hp.n_head) * hp.head_dim,
                dkv = hp.n_embd_kv(), ff = hp.n_ff, nv = hp.n_vocab;

  KINFER_ASSIGN_OR_RETURN(m->tok_embd_, ReadWeightMatrix(f, "token_embd.weight", d, nv));
  if (f.FindTensor("output.weight")) {
    KINFER_ASSIGN_OR_RETURN(m->output_, ReadWeightMatrix(f, "output.weight", d, nv));
  } else {
    m->output_ = m->tok_embd_;  // tied embeddings
  }
  KINFER_ASSIGN_OR_RETURN(m->output_norm_, ReadNormVector(f, "output_norm.weight", d));
  size_t bytes = RowBytesOf(m->output_.type, d) * nv;
  m->layers_.resize(hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    Layer& L = m->layers_[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    KINFER_ASSIGN_OR_RETURN(L.attn_norm, ReadNormVector(f, p + "attn_norm.weight", d));
    KINFER_ASSIGN_OR_RETURN(L.ffn_norm, ReadNormVector(f, p + "ffn_norm.weight", d));
    KINFER_ASSIGN_OR_RETURN(L.wq, ReadWeightMatrix(f, p + "attn_q.weight", d, dq));
    KINFER_ASSIGN_OR_RETURN(L.wk, ReadWeightMatrix(f, p + "attn_k.weight", d, dkv));
    KINFER_ASSIGN_OR_RETURN(L.wv, ReadWeightMatrix(f, p + "attn_v.weight", d, dkv));
    KINFER_ASSIGN_OR_RETURN(L.wo, ReadWeightMatrix(f, p + "attn_output.weight", dq, d));
    KINFER_ASSIGN_OR_RETURN(L.w_gate, ReadWeightMatrix(f, p + "ffn_gate.weight", d, ff));
    KINFER_ASSIGN_OR_RETURN(L.w_up, ReadWeightMatrix(f, p + "ffn_up.weight", d, ff));
    KINFER_ASSIGN_OR_RETURN(L.w_down, ReadWeightMatrix(f, p + "ffn_down.weight", ff, d));
    for (const WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      bytes += RowBytesOf(w->type, w->cols) * w->rows;
    }
  }
  m->weight_bytes_per_token_ = bytes;

  const size_t B = kMaxBatch;
  m->x_.resize(B * d);
  m->xn_.resize(B * std::max(d, dq));
  m->q_.resize(B * dq);
  m->k_.resize(B * dkv);
  m->v_.resize(B * dkv);
  m->attn_.resize(B * dq);
  m->gate_.resize(B * ff);
  m->up_.resize(B * ff);
  m->ffn_out_.resize(B * std::max(d, dq));
  m->rope_cos_.resize(kMaxMatVecTokens * (hp.rope_dim / 2));
  m->rope_sin_.resize(kMaxMatVecTokens * (hp.rope_dim / 2));
  m->worker_vectors_.resize(m->pool_.size());
  for (WorkerVectors& w : m->worker_vectors_) {
    w.x.resize(kMaxMatVecTokens * d);
    w.xn.resize(kMaxMatVecTokens * d);
  }
  return m;
}

std::unique_ptr<KvCache> LlamaModel::NewKvCache(int capacity) const {
  return std::make_unique<KvCache>(hp_.n_layer, hp_.n_embd_kv(), capacity);
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, KvCache* cache, bool all_logits,
                           std::vector<float>* logits, ForwardMode mode) {
  if (tokens.empty()) return InvalidArgument("empty batch");
  for (int32_t id : tokens) {
    if (id < 0 || id >= hp_.n_vocab) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                             std::to_string(hp_.n_vocab) + ")");
    }
  }
  if (cache->size() + static_cast<int64_t>(tokens.size()) > cache->capacity()) {
    return OutOfRange("sequence of " + std::to_string(cache->size() + tokens.size()) +
                      " tokens exceeds the KV cache capacity of " +
                      std::to_string(cache->capacity()));
  }
  const size_t nv = hp_.n_vocab;
  logits->resize(all_logits ? tokens.size() * nv : nv);
  static const int32_t kOneBlock[1] = {0};
  for (size_t start = 0; start < tokens.size(); start += kMaxBatch) {
    const int n = static_cast<int>(std::min<size_t>(kMaxBatch, tokens.size() - start));
    const bool last_chunk = start + n == tokens.size();
    Segment seg;
    seg.tokens = tokens.data() + start;
    seg.n = n;
    seg.pos0 = cache->size();
    seg.blocks = kOneBlock;
    seg.logits_from = all_logits ? 0 : (last_chunk ? n - 1 : n);
    seg.round_probs_all(n > 1 || mode != ForwardMode::kDecode);
    float* out = all_logits ? logits->data() + start * nv : logits->data();
    RunSegments(std::span<const Segment>(&seg, 1), cache->layout(), out);
    cache->Advance(n);
  }
  return Status::Ok();
}

std::unique_ptr<PagedKvCache> LlamaModel::NewPagedKvCache(int block_size, int num_blocks) const {
  return std::make_unique<PagedKvCache>(hp_.n_layer, hp_.n_embd_kv(), block_size, num_blocks);
}

Status ValidateSequenceBatches(std::span<const SequenceBatch> seqs, int n_vocab, int block_size,
                               int num_blocks, int64_t max_tokens, size_t* rows) {
  if (seqs.empty()) return InvalidArgument("empty step");
  int64_t total = 0;
  *rows = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SequenceBatch& s = seqs[i];
    const std::string which = "sequence " + std::to_string(i) + ": ";
    if (s.tokens.empty()) return InvalidArgument(which + "no tokens");
    if (s.pos0 < 0) return InvalidArgument(which + "negative position");
    for (int32_t id : s.tokens) {
      if (id < 0 || id >= n_vocab) {
        return InvalidArgument(which + "token id " + std::to_string(id) +
                               " is outside the vocabulary (" + std::to_string(n_vocab) + ")");
      }
    }
    const int64_t end = s.pos0 + static_cast<int64_t>(s.tokens.size());
    if (static_cast<int64_t>(s.blocks.size()) * block_size < end) {
      return InvalidArgument(which + "block table of " + std::to_string(s.blocks.size()) +
                             " blocks cannot hold " + std::to_string(end) + " positions");
    }
    for (int32_t b : s.blocks) {
      if (b < 0 || b >= num_blocks) {
        return InvalidArgument(which + "block " + std::to_string(b) + " is outside the cache");
      }
    }
    if (s.want_logits && (s.num_logits < 1 || s.num_logits > static_cast<int>(s.tokens.size()))) {
      return InvalidArgument(which + "num_logits " + std::to_string(s.num_logits) +
                             " is outside 1.." + std::to_string(s.tokens.size()));
    }
    total += static_cast<int64_t>(s.tokens.size());
    *rows += s.want_logits ? static_cast<size_t>(s.num_logits) : 0;
  }
  if (total > max_tokens) {
    return InvalidArgument("a step of " + std::to_string(total) + " tokens exceeds " +
                           std::to_string(max_tokens));
  }
  return Status::Ok();
}

Status LlamaModel::ForwardBatch(std::span<const SequenceBatch> seqs, PagedKvCache* cache,
                                std::vector<float>* logits) {
  if (seqs.empty()) return InvalidArgument("empty step");
  if (cache->n_layer() != hp_.n_layer || cache->n_embd_kv() != hp_.n_embd_kv()) {
    return InvalidArgument("the paged KV cache is not shaped for this model");
  }
  size_t rows = 0;
  KINFER_RETURN_IF_ERROR(ValidateSequenceBatches(seqs, hp_.n_vocab, cache->block_size(),
                                                 cache->num_blocks(), kMaxBatch, &rows));
  std::vector<Segment> segs;
  segs.reserve(seqs.size());
  for (const SequenceBatch& s : seqs) {
    Segment seg;
    seg.tokens = s.tokens.data();
    seg.n = static_cast<int>(s.tokens.size());
    seg.pos0 = s.pos0;
    seg.blocks = s.blocks.data();
    seg.logits_from = s.want_logits ? seg.n - s.num_logits : seg.n;
    if (s.prompt_len >= 0) {
      seg.round_below = s.prompt_len;
    } else {
      seg.round_probs_all(seg.n > 1 || s.mode != ForwardMode::kDecode);
    }
    segs.push_back(seg);
  }
  logits->resize(rows * hp_.n_vocab);
  RunSegments(segs, cache->layout(), logits->data());
  return Status::Ok();
}

namespace {

// The one-token step's parallel phases in a layer, each handed out by its own ChunkQueue.
enum Phase { kQkv, kHeads, kAttnOut, kGateUp, kDown, kPhases };

// Rows per chunk of a matrix-vector phase: about 32 KB of weights (long enough a stream for the
// prefetchers, short enough to even out two workers), a multiple of 4 rows (MatMulInPool's unit;
// a row's result does not depend on it) and so even (RoPE pairs stay in one chunk).
int64_t ChunkRows(const WeightMatrix& w) {
  const int64_t rows = static_cast<int64_t>(32 << 10) / static_cast<int64_t>(w.RowBytes());
  return std::max<int64_t>(4, rows / 4 * 4);
}

int64_t Chunks(int64_t rows, int64_t chunk) { return (rows + chunk - 1) / chunk; }

}  // namespace

bool LlamaModel::TakesOneTokenStep(std::span<const Segment> segs) const {
  if (!one_token_step_ || segs.size() > static_cast<size_t>(kMaxMatVecTokens)) return false;
  for (const Segment& sg : segs) {
    if (sg.n != 1) return false;
  }
  // The same kernels as the general path: the matrix-vector ones for this many tokens.
  const int64_t ntok = static_cast<int64_t>(segs.size());
  for (const Layer& L : layers_) {
    for (const WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      if (!MatVecServes(*w, ntok)) return false;
    }
  }
  int emit = 0;
  for (const Segment& sg : segs) emit += sg.logits_from < 1;
  return emit == 0 || MatVecServes(output_, emit);
}

void LlamaModel::RunOneTokenStep(std::span<const Segment> segs, const KvLayout& kv,
                                 float* logits_out) {
  const int d = hp_.n_embd;
  const int dkv = hp_.n_embd_kv();
  const int dq = hp_.n_head * hp_.head_dim;
  const int ff = hp_.n_ff;
  const int half = hp_.rope_dim / 2;
  const int nth = pool_.size();
  const int n = static_cast<int>(segs.size());
  tok_seg_.resize(n);
  tok_local_.assign(n, 0);
  const size_t embd_row = RowBytesOf(tok_embd_.type, d);
  int max_pos = 0;
  std::vector<int> emit_rows;  // the tokens whose logits are wanted, in order
  for (int g = 0; g < n; ++g) {
    const Segment& sg = segs[g];
    tok_seg_[g] = g;
    DequantizeRow(tok_embd_.type,
                  static_cast<const uint8_t*>(tok_embd_.data) + embd_row * sg.tokens[0],
                  &x_[static_cast<size_t>(g) * d], d);
    RopeAngles(sg.pos0, hp_.rope_dim, hp_.rope_freq_base, hp_.rope_freq_scale,
               &rope_cos_[static_cast<size_t>(g) * half],
               &rope_sin_[static_cast<size_t>(g) * half]);
    max_pos = std::max(max_pos, sg.pos0 + 1);
    if (sg.logits_from < 1 && logits_out != nullptr) emit_rows.push_back(g);
  }
  ReserveScores(max_pos);
  const int64_t qkv_rows = static_cast<int64_t>(dq) + 2 * dkv;
  const int emit = static_cast<int>(emit_rows.size());
  const int64_t out_rows = emit > 0 ? output_.rows : 0;
  const size_t nq = static_cast<size_t>(hp_.n_layer) * kPhases + 1;
  if (chunk_queues_.size() < nq) chunk_queues_ = std::vector<ChunkQueue>(nq);
  for (int l = 0; l < hp_.n_layer; ++l) {
    const Layer& L = layers_[l];
    ChunkQueue* q = &chunk_queues_[static_cast<size_t>(l) * kPhases];
    q[kQkv].Reset(Chunks(qkv_rows, ChunkRows(L.wq)), nth);
    q[kHeads].Reset(static_cast<int64_t>(n) * hp_.n_head, nth);
    q[kAttnOut].Reset(Chunks(d, ChunkRows(L.wo)), nth);
    q[kGateUp].Reset(Chunks(ff, ChunkRows(L.w_gate)), nth);
    q[kDown].Reset(Chunks(d, ChunkRows(L.w_down)), nth);
  }
  chunk_queues_[nq - 1].Reset(Chunks(out_rows, ChunkRows(output_)), nth);

  pool_.Run([&](int ith, int /*nth: the same*/) {
    WorkerVectors& w = worker_vectors_[ith];
    float* x = w.x.data();
    float* xn = w.xn.data();
    std::copy_n(x_.data(), static_cast<size_t>(n) * d, x);
    // Runs body(r0, r1) over the chunks of rows that `queue` hands this worker.
    auto for_chunks = [ith](ChunkQueue& queue, int64_t rows, int64_t chunk, auto&& body) {
      for (int64_t c; (c = queue.Next(ith)) >= 0;) body(c * chunk, std::min(rows, (c + 1) * chunk));
    };
    auto norm = [&](const std::vector<float>& weight) {
      RmsNorm(x, weight.data(), n, d, hp_.rms_eps, xn);
    };
    auto add = [&](const float* y) { AddInPlace(x, y, static_cast<int64_t>(n) * d); };

    for (int l = 0; l < hp_.n_layer; ++l) {
      const Layer& L = layers_[l];
      ChunkQueue* q = &chunk_queues_[static_cast<size_t>(l) * kPhases];
      // Every worker keeps its own copy of the residual stream and computes the norms and the
      // activations' quantization itself: a few hundred floats a token, cheaper than a barrier.
      norm(L.attn_norm);
      const MatVecInput in_q = PrepareMatVecInput(L.wq, xn, n, &w.act[0]);
      const MatVecInput in_k =
          SameMatVecInput(L.wq, L.wk, n) ? in_q : PrepareMatVecInput(L.wk, xn, n, &w.act[1]);
      const MatVecInput in_v = SameMatVecInput(L.wq, L.wv, n) ? in_q
                               : SameMatVecInput(L.wk, L.wv, n)
                                   ? in_k
                                   : PrepareMatVecInput(L.wv, xn, n, &w.act[2]);
      // Rows of the fused Q|K|V space, each with its RoPE and cache writes (chunks start at even
      // rows: RoPE pairs stay together).
      for_chunks(q[kQkv], qkv_rows, ChunkRows(L.wq), [&](int64_t a, int64_t b) {
        const int64_t q0 = std::min<int64_t>(a, dq), q1 = std::min<int64_t>(b, dq);
        const int64_t k0 = std::clamp<int64_t>(a - dq, 0, dkv),
                      k1 = std::clamp<int64_t>(b - dq, 0, dkv);
        const int64_t v0 = std::clamp<int64_t>(a - dq - dkv, 0, dkv),
                      v1 = std::clamp<int64_t>(b - dq - dkv, 0, dkv);
        if (q0 < q1) MatVecRows(L.wq, in_q, n, q_.data(), q0, q1);
        if (k0 < k1) MatVecRows(L.wk, in_k, n, k_.data(), k0, k1);
        if (v0 < v1) MatVecRows(L.wv, in_v, n, v_.data(), v0, v1);
        for (int g = 0; g < n; ++g) {
          const Segment& sg = segs[g];
          const float* c = &rope_cos_[static_cast<size_t>(g) * half];
          const float* s = &rope_sin_[static_cast<size_t>(g) * half];
          const int block = sg.blocks[sg.pos0 / kv.block_size];
          const int slot = sg.pos0 % kv.block_size;
          float* qg = &q_[static_cast<size_t>(g) * dq];
          float* kg = &k_[static_cast<size_t>(g) * dkv];
          const float* vg = &v_[static_cast<size_t>(g) * dkv];
          RopeNormalRange(qg, hp_.head_dim, hp_.rope_dim, c, s, q0, q1);
          RopeNormalRange(kg, hp_.head_dim, hp_.rope_dim, c, s, k0, k1);
          F32ToF16(kg + k0, kv.KRow(l, block, slot) + k0, k1 - k0);
          F32ToF16(vg + v0, kv.VRow(l, block, slot) + v0, v1 - v0);
        }
      });
      pool_.Barrier();
      for (int64_t idx; (idx = q[kHeads].Next(ith)) >= 0;) {
        const int g = static_cast<int>(idx / hp_.n_head);
        AttendHead(l, g, static_cast<int>(idx % hp_.n_head), segs[g], kv, ith);
      }
      pool_.Barrier();
      const MatVecInput in_o = PrepareMatVecInput(L.wo, attn_.data(), n, &w.act[0]);
      for_chunks(q[kAttnOut], d, ChunkRows(L.wo),
                 [&](int64_t a, int64_t b) { MatVecRows(L.wo, in_o, n, ffn_out_.data(), a, b); });
      pool_.Barrier();
      add(ffn_out_.data());
      norm(L.ffn_norm);
      // Gate and up over the same rows, so that SwiGLU of a chunk needs nobody else's.
      const MatVecInput in_g = PrepareMatVecInput(L.w_gate, xn, n, &w.act[0]);
      const MatVecInput in_u = SameMatVecInput(L.w_gate, L.w_up, n)
                                   ? in_g
                                   : PrepareMatVecInput(L.w_up, xn, n, &w.act[1]);
      for_chunks(q[kGateUp], ff, ChunkRows(L.w_gate), [&](int64_t a, int64_t b) {
        MatVecRows(L.w_gate, in_g, n, gate_.data(), a, b);
        MatVecRows(L.w_up, in_u, n, up_.data(), a, b);
        for (int g = 0; g < n; ++g) {
          const size_t o = static_cast<size_t>(g) * ff;
          SwiGlu(&gate_[o + a], &up_[o + a], b - a);
        }
      });
      pool_.Barrier();
      const MatVecInput in_d = PrepareMatVecInput(L.w_down, gate_.data(), n, &w.act[0]);
      for_chunks(q[kDown], d, ChunkRows(L.w_down), [&](int64_t a, int64_t b) {
        MatVecRows(L.w_down, in_d, n, ffn_out_.data(), a, b);
      });
      pool_.Barrier();
      add(ffn_out_.data());
    }
    if (emit == 0) return;
    // The wanted tokens' rows, gathered in order, as the general path gathers them.
    for (int r = 0; r < emit; ++r) {
      if (emit_rows[r] != r) {
        std::copy_n(&x[static_cast<size_t>(emit_rows[r]) * d], d, &x[static_cast<size_t>(r) * d]);
      }
    }
    RmsNorm(x, output_norm_.data(), emit, d, hp_.rms_eps, xn);
    const MatVecInput in = PrepareMatVecInput(output_, xn, emit, &w.act[0]);
    for_chunks(chunk_queues_[nq - 1], out_rows, ChunkRows(output_),
               [&](int64_t a, int64_t b) { MatVecRows(output_, in, emit, logits_out, a, b); });
  });
}

void LlamaModel::RunSegments(std::span<const Segment> segs, const KvLayout& kv, float* logits_out) {
  if (TakesOneTokenStep(segs)) {
    RunOneTokenStep(segs, kv, logits_out);
    return;
  }
  const int d = hp_.n_embd;
  const int dkv = hp_.n_embd_kv();
  const int dq = hp_.n_head * hp_.head_dim;
  int n = 0;
  tok_seg_.clear();
  tok_local_.clear();
  for (size_t s = 0; s < segs.size(); ++s) {
    for (int t = 0; t < segs[s].n; ++t) {
      tok_seg_.push_back(static_cast<int>(s));
      tok_local_.push_back(t);
    }
    n += segs[s].n;
  }
  const size_t embd_row = RowBytesOf(tok_embd_.type, d);
  const auto* embd = static_cast<const uint8_t*>(tok_embd_.data);
  for (int g = 0; g < n; ++g) {
    const Segment& sg = segs[tok_seg_[g]];
    DequantizeRow(tok_embd_.type, embd + embd_row * sg.tokens[tok_local_[g]],
                  &x_[static_cast<size_t>(g) * d], d);
  }

  for (int l = 0; l < hp_.n_layer; ++l) {
    const Layer& L = layers_[l];
    RmsNorm(x_.data(), L.attn_norm.data(), n, d, hp_.rms_eps, xn_.data());
    // Q, K and V in one job: the pool is woken once instead of three times (a decode step is
    // mostly such hand-offs between small products). Same kernels, same results.
    pool_.Run([&](int ith, int nth) {
      MatMulInPool(L.wq, xn_.data(), n, q_.data(), ith, nth, pool_);
      MatMulInPool(L.wk, xn_.data(), n, k_.data(), ith, nth, pool_);
      MatMulInPool(L.wv, xn_.data(), n, v_.data(), ith, nth, pool_);
      pool_.Barrier();
    });
    int g0 = 0;
    for (const Segment& sg : segs) {
      RopeNormal(&q_[static_cast<size_t>(g0) * dq], sg.n, hp_.n_head, hp_.head_dim, hp_.rope_dim,
                 sg.pos0, hp_.rope_freq_base, hp_.rope_freq_scale);
      RopeNormal(&k_[static_cast<size_t>(g0) * dkv], sg.n, hp_.n_head_kv, hp_.head_dim,
                 hp_.rope_dim, sg.pos0, hp_.rope_freq_base, hp_.rope_freq_scale);
      for (int t = 0; t < sg.n; ++t) {
        const int p = sg.pos0 + t;
        const int block = sg.blocks[p / kv.block_size];
        const int slot = p % kv.block_size;
        F32ToF16(&k_[static_cast<size_t>(g0 + t) * dkv], kv.KRow(l, block, slot), dkv);
        F32ToF16(&v_[static_cast<size_t>(g0 + t) * dkv], kv.VRow(l, block, slot), dkv);
      }
      g0 += sg.n;
    }
    Attention(l, segs, kv);
    MatMul(L.wo, attn_.data(), n, ffn_out_.data(), pool_);
    AddInPlace(x_.data(), ffn_out_.data(), static_cast<int64_t>(n) * d);

    RmsNorm(x_.data(), L.ffn_norm.data(), n, d, hp_.rms_eps, xn_.data());
    // The feed-forward block in one job: gate and up, SwiGLU split across the workers, down.
    pool_.Run([&](int ith, int nth) {
      MatMulInPool(L.w_gate, xn_.data(), n, gate_.data(), ith, nth, pool_);
      MatMulInPool(L.w_up, xn_.data(), n, up_.data(), ith, nth, pool_);
      pool_.Barrier();
      const int64_t total = static_cast<int64_t>(n) * hp_.n_ff;
      const int64_t i0 = total * ith / nth, i1 = total * (ith + 1) / nth;
      SwiGlu(gate_.data() + i0, up_.data() + i0, i1 - i0);
      pool_.Barrier();
      MatMulInPool(L.w_down, gate_.data(), n, ffn_out_.data(), ith, nth, pool_);
      pool_.Barrier();
    });
    AddInPlace(x_.data(), ffn_out_.data(), static_cast<int64_t>(n) * d);
  }

  // Only the rows whose logits are wanted go through the output matrix, gathered in order.
  int rows = 0;
  int g0 = 0;
  for (const Segment& sg : segs) {
    for (int t = sg.logits_from; t < sg.n; ++t) {
      if (rows != g0 + t) {
        std::copy_n(&x_[static_cast<size_t>(g0 + t) * d], d, &x_[static_cast<size_t>(rows) * d]);
      }
      ++rows;
    }
    g0 += sg.n;
  }
  if (rows == 0 || logits_out == nullptr) return;
  RmsNorm(x_.data(), output_norm_.data(), rows, d, hp_.rms_eps, xn_.data());
  MatMul(output_, xn_.data(), rows, logits_out, pool_);
}

void LlamaModel::ReserveScores(int max_pos) {
  const size_t need = static_cast<size_t>(pool_.size()) * (max_pos + 2 * hp_.head_dim);
  if (scores_.size() < need) scores_.resize(need);
}

void LlamaModel::AttendHead(int layer, int g, int h, const Segment& sg, const KvLayout& kv,
                            int ith) {
  const int hd = hp_.head_dim;
  const int dq = hp_.n_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const size_t per_thread = scores_.size() / pool_.size();
  const int max_pos = static_cast<int>(per_thread) - 2 * hd;
  float* sc = scores_.data() + per_thread * ith;
  float* qr = sc + max_pos;  // the query rounded to FP16 precision, as llama.cpp does
  ggml_fp16_t* q16 = reinterpret_cast<ggml_fp16_t*>(qr + hd);
  const int bs = kv.block_size;
  const int kv_off = (h / hp_.n_gqa()) * hd;
  const float* q = &q_[static_cast<size_t>(g) * dq + h * hd];
  F32ToF16(q, q16, hd);
  F16ToF32(q16, qr, hd);
  const int npos = sg.pos0 + tok_local_[g] + 1;
  // Scores block by block: rows are contiguous within a block (a KvCache is one block).
  for (int j0 = 0; j0 < npos; j0 += bs) {
    DotF16F32Rows(kv.KRow(layer, sg.blocks[j0 / bs], 0) + kv_off, kv.n_embd_kv,
                  std::min(bs, npos - j0), qr, hd, sc + j0);
  }
  float max_s = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < npos; ++j) {
    sc[j] *= scale;
    max_s = std::max(max_s, sc[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < npos; ++j) {
    const float e = std::exp(sc[j] - max_s);
    sc[j] = e;
    sum += e;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int j = 0; j < npos; ++j) sc[j] *= inv;
  // llama.cpp's batch path multiplies FP16 V by the probabilities rounded to FP16, its
  // single-token path keeps them in FP32 (measured against its outputs; see
  // docs/architecture.md). Prompt chunks take the first, decode steps the second.
  const bool round_probs = sg.pos0 + tok_local_[g] < sg.round_below;
  for (int j = 0; round_probs && j < npos; j += hd) {
    const int m = std::min(hd, npos - j);
    F32ToF16(sc + j, q16, m);
    F16ToF32(q16, sc + j, m);
  }
  float* out = &attn_[static_cast<size_t>(g) * dq + h * hd];
  std::fill(out, out + hd, 0.0f);
  for (int j0 = 0; j0 < npos; j0 += bs) {
    AxpyF16Rows(sc + j0, kv.VRow(layer, sg.blocks[j0 / bs], 0) + kv_off, kv.n_embd_kv,
                std::min(bs, npos - j0), out, hd);
  }
}

void LlamaModel::Attention(int layer, std::span<const Segment> segs, const KvLayout& kv) {
  const int n_head = hp_.n_head;
  const int n = static_cast<int>(tok_seg_.size());
  int max_pos = 0;
  for (const Segment& sg : segs) max_pos = std::max(max_pos, sg.pos0 + sg.n);
  ReserveScores(max_pos);
  pool_.Run([&](int ith, int nthreads) {
    for (int idx = ith; idx < n * n_head; idx += nthreads) {
      const int g = idx / n_head;
      AttendHead(layer, g, idx % n_head, segs[tok_seg_[g]], kv, ith);
    }
  });
}

}  // namespace kinfer
