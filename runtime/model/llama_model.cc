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

// A 2-D weight with ne[0] == cols (input width) and ne[1] == rows (output width).
StatusOr<WeightMatrix> GetMatrix(const GgufFile& f, const std::string& name, int64_t cols,
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
  return WeightMatrix{t->type, t->data, rows, cols};
}

StatusOr<std::vector<float>> GetVector(const GgufFile& f, const std::string& name, int64_t n) {
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

}  // namespace

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

  KINFER_ASSIGN_OR_RETURN(m->tok_embd_, GetMatrix(f, "token_embd.weight", d, nv));
  if (f.FindTensor("output.weight")) {
    KINFER_ASSIGN_OR_RETURN(m->output_, GetMatrix(f, "output.weight", d, nv));
  } else {
    m->output_ = m->tok_embd_;  // tied embeddings
  }
  KINFER_ASSIGN_OR_RETURN(m->output_norm_, GetVector(f, "output_norm.weight", d));
  size_t bytes = RowBytesOf(m->output_.type, d) * nv;
  m->layers_.resize(hp.n_layer);
  for (int l = 0; l < hp.n_layer; ++l) {
    Layer& L = m->layers_[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    KINFER_ASSIGN_OR_RETURN(L.attn_norm, GetVector(f, p + "attn_norm.weight", d));
    KINFER_ASSIGN_OR_RETURN(L.ffn_norm, GetVector(f, p + "ffn_norm.weight", d));
    KINFER_ASSIGN_OR_RETURN(L.wq, GetMatrix(f, p + "attn_q.weight", d, dq));
    KINFER_ASSIGN_OR_RETURN(L.wk, GetMatrix(f, p + "attn_k.weight", d, dkv));
    KINFER_ASSIGN_OR_RETURN(L.wv, GetMatrix(f, p + "attn_v.weight", d, dkv));
    KINFER_ASSIGN_OR_RETURN(L.wo, GetMatrix(f, p + "attn_output.weight", dq, d));
    KINFER_ASSIGN_OR_RETURN(L.w_gate, GetMatrix(f, p + "ffn_gate.weight", d, ff));
    KINFER_ASSIGN_OR_RETURN(L.w_up, GetMatrix(f, p + "ffn_up.weight", d, ff));
    KINFER_ASSIGN_OR_RETURN(L.w_down, GetMatrix(f, p + "ffn_down.weight", ff, d));
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
  for (size_t start = 0; start < tokens.size(); start += kMaxBatch) {
    const size_t n = std::min<size_t>(kMaxBatch, tokens.size() - start);
    const bool last_chunk = start + n == tokens.size();
    float* out = nullptr;
    if (all_logits) {
      out = logits->data() + start * nv;
    } else if (last_chunk) {
      out = logits->data();
    }
    KINFER_RETURN_IF_ERROR(
        ForwardChunk(tokens.subspan(start, n), cache, all_logits, out, mode == ForwardMode::kDecode));
  }
  return Status::Ok();
}

Status LlamaModel::ForwardChunk(std::span<const int32_t> tokens, KvCache* cache, bool all_logits,
                                float* logits_out, bool decode_step) {
  const int n = static_cast<int>(tokens.size());
  const int d = hp_.n_embd;
  const int dkv = hp_.n_embd_kv();
  const int pos0 = cache->size();
  const size_t embd_row = RowBytesOf(tok_embd_.type, d);
  const auto* embd = static_cast<const uint8_t*>(tok_embd_.data);
  for (int t = 0; t < n; ++t) {
    DequantizeRow(tok_embd_.type, embd + embd_row * tokens[t], &x_[static_cast<size_t>(t) * d], d);
  }

  for (int l = 0; l < hp_.n_layer; ++l) {
    const Layer& L = layers_[l];
    RmsNorm(x_.data(), L.attn_norm.data(), n, d, hp_.rms_eps, xn_.data());
    MatMul(L.wq, xn_.data(), n, q_.data(), pool_);
    MatMul(L.wk, xn_.data(), n, k_.data(), pool_);
    MatMul(L.wv, xn_.data(), n, v_.data(), pool_);
    RopeNormal(q_.data(), n, hp_.n_head, hp_.head_dim, hp_.rope_dim, pos0, hp_.rope_freq_base,
               hp_.rope_freq_scale);
    RopeNormal(k_.data(), n, hp_.n_head_kv, hp_.head_dim, hp_.rope_dim, pos0, hp_.rope_freq_base,
               hp_.rope_freq_scale);
    for (int t = 0; t < n; ++t) {
      F32ToF16(&k_[static_cast<size_t>(t) * dkv], cache->k(l, pos0 + t), dkv);
      F32ToF16(&v_[static_cast<size_t>(t) * dkv], cache->v(l, pos0 + t), dkv);
    }
    Attention(l, n, pos0, cache, /*round_probs=*/n > 1 || !decode_step);
    MatMul(L.wo, attn_.data(), n, ffn_out_.data(), pool_);
    AddInPlace(x_.data(), ffn_out_.data(), static_cast<int64_t>(n) * d);

    RmsNorm(x_.data(), L.ffn_norm.data(), n, d, hp_.rms_eps, xn_.data());
    MatMul(L.w_gate, xn_.data(), n, gate_.data(), pool_);
    MatMul(L.w_up, xn_.data(), n, up_.data(), pool_);
    SwiGlu(gate_.data(), up_.data(), static_cast<int64_t>(n) * hp_.n_ff);
    MatMul(L.w_down, gate_.data(), n, ffn_out_.data(), pool_);
    AddInPlace(x_.data(), ffn_out_.data(), static_cast<int64_t>(n) * d);
  }
  cache->Advance(n);

  if (!logits_out) return Status::Ok();
  // Only the rows whose logits are wanted go through the output matrix.
  const int first = all_logits ? 0 : n - 1;
  const int rows = n - first;
  RmsNorm(&x_[static_cast<size_t>(first) * d], output_norm_.data(), rows, d, hp_.rms_eps,
          xn_.data());
  MatMul(output_, xn_.data(), rows, logits_out, pool_);
  return Status::Ok();
}

void LlamaModel::Attention(int layer, int n, int pos0, KvCache* cache, bool round_probs) {
  const int hd = hp_.head_dim;
  const int n_head = hp_.n_head;
  const int gqa = hp_.n_gqa();
  const int dq = n_head * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int max_pos = pos0 + n;
  const int nth = pool_.size();
  if (scores_.size() < static_cast<size_t>(nth) * (max_pos + 2 * hd)) {
    scores_.resize(static_cast<size_t>(nth) * (max_pos + 2 * hd));
  }
  const size_t per_thread = scores_.size() / nth;
  pool_.Run([&](int ith, int nthreads) {
    float* sc = scores_.data() + per_thread * ith;
    float* qr = sc + max_pos;  // the query rounded to FP16 precision, as llama.cpp does
    ggml_fp16_t* q16 = reinterpret_cast<ggml_fp16_t*>(qr + hd);
    for (int idx = ith; idx < n * n_head; idx += nthreads) {
      const int t = idx / n_head;
      const int h = idx % n_head;
      const int kv_off = (h / gqa) * hd;
      const float* q = &q_[static_cast<size_t>(t) * dq + h * hd];
      F32ToF16(q, q16, hd);
      F16ToF32(q16, qr, hd);
      const int npos = pos0 + t + 1;
      DotF16F32Rows(cache->k(layer, 0) + kv_off, cache->n_embd_kv(), npos, qr, hd, sc);
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
      for (int j = 0; round_probs && j < npos; j += hd) {
        const int m = std::min(hd, npos - j);
        F32ToF16(sc + j, q16, m);
        F16ToF32(q16, sc + j, m);
      }
      float* out = &attn_[static_cast<size_t>(t) * dq + h * hd];
      std::fill(out, out + hd, 0.0f);
      AxpyF16Rows(sc, cache->v(layer, 0) + kv_off, cache->n_embd_kv(), npos, out, hd);
    }
  });
}

}  // namespace kinfer
