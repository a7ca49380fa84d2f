#include "runtime/model/llama_hparams.h"

#include <string>

#include "runtime/gguf/gguf_file.h"

namespace kinfer {
namespace {

StatusOr<int> ReadPositiveInt(const GgufFile& f, const std::string& key) {
  auto v = f.GetInt(key);
  if (!v.ok()) return v.status().WithContext("model metadata");
  if (*v <= 0 || *v > (1 << 24)) {
    return InvalidArgument("model metadata: " + key + " = " + std::to_string(*v) +
                           " is out of range");
  }
  return static_cast<int>(*v);
}

}  // namespace

StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& f) {
  LlamaHParams hp;
  KINFER_ASSIGN_OR_RETURN(hp.architecture, f.GetString("general.architecture"));
  if (hp.architecture != "llama") {
    return Unimplemented("model architecture '" + hp.architecture +
                         "' is not supported (supported: llama)");
  }
  const std::string a = "llama.";
  KINFER_ASSIGN_OR_RETURN(hp.n_layer, ReadPositiveInt(f, a + "block_count"));
  KINFER_ASSIGN_OR_RETURN(hp.n_embd, ReadPositiveInt(f, a + "embedding_length"));
  KINFER_ASSIGN_OR_RETURN(hp.n_head, ReadPositiveInt(f, a + "attention.head_count"));
  KINFER_ASSIGN_OR_RETURN(hp.n_ff, ReadPositiveInt(f, a + "feed_forward_length"));
  KINFER_ASSIGN_OR_RETURN(hp.n_ctx_train, ReadPositiveInt(f, a + "context_length"));
  hp.n_head_kv = hp.n_head;
  if (f.Find(a + "attention.head_count_kv")) {
    KINFER_ASSIGN_OR_RETURN(hp.n_head_kv, ReadPositiveInt(f, a + "attention.head_count_kv"));
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return InvalidArgument("model metadata: attention.head_count (" + std::to_string(hp.n_head) +
                           ") is not a multiple of head_count_kv (" +
                           std::to_string(hp.n_head_kv) + ")");
  }
  if (hp.n_embd % hp.n_head != 0) {
    return InvalidArgument("model metadata: embedding_length is not a multiple of head_count");
  }
  hp.head_dim = hp.n_embd / hp.n_head;
  if (f.Find(a + "attention.key_length")) {
    KINFER_ASSIGN_OR_RETURN(hp.head_dim, ReadPositiveInt(f, a + "attention.key_length"));
  }
  hp.rope_dim = hp.head_dim;
  if (f.Find(a + "rope.dimension_count")) {
    KINFER_ASSIGN_OR_RETURN(hp.rope_dim, ReadPositiveInt(f, a + "rope.dimension_count"));
  }
  if (hp.rope_dim > hp.head_dim || hp.rope_dim % 2 != 0) {
    return InvalidArgument("model metadata: rope.dimension_count must be even and <= head dim");
  }
  if (f.Find(a + "rope.freq_base")) {
    KINFER_ASSIGN_OR_RETURN(double base, f.GetFloat(a + "rope.freq_base"));
    hp.rope_freq_base = static_cast<float>(base);
  }
  if (f.Find(a + "rope.scaling.type")) {
    KINFER_ASSIGN_OR_RETURN(std::string type, f.GetString(a + "rope.scaling.type"));
    if (type == "linear") {
      KINFER_ASSIGN_OR_RETURN(double factor, f.GetFloat(a + "rope.scaling.factor"));
      if (factor <= 0) return InvalidArgument("model metadata: rope.scaling.factor <= 0");
      hp.rope_freq_scale = static_cast<float>(1.0 / factor);
    } else if (type != "none") {
      return Unimplemented("rope scaling type '" + type + "' is not supported");
    }
  }
  if (f.Find(a + "attention.layer_norm_rms_epsilon")) {
    KINFER_ASSIGN_OR_RETURN(double eps, f.GetFloat(a + "attention.layer_norm_rms_epsilon"));
    hp.rms_eps = static_cast<float>(eps);
  }
  if (f.Find(a + "vocab_size")) {
    KINFER_ASSIGN_OR_RETURN(hp.n_vocab, ReadPositiveInt(f, a + "vocab_size"));
  } else {
    KINFER_ASSIGN_OR_RETURN(auto tokens, f.GetStringArray("tokenizer.ggml.tokens"));
    hp.n_vocab = static_cast<int>(tokens.size());
  }
  return hp;
}

}  // namespace kinfer
