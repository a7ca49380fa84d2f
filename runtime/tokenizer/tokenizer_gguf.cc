// Tokenizer::FromGguf: extracts tokenizer.ggml.* metadata (kept apart so that the core builds
// and tests without the GGUF reader).
#include <algorithm>

#include "runtime/gguf/gguf_file.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {
namespace {

// Optional integer id key: -1 when absent or out of range.
int32_t ReadId(const GgufFile& file, std::string_view key, int32_t n_tokens) {
  auto v = file.GetInt(key);
  if (!v.ok() || *v < 0 || *v >= n_tokens) return -1;
  return static_cast<int32_t>(*v);
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  KINFER_ASSIGN_OR_RETURN(TokenizerData data, ReadTokenizerData(file));
  return Create(std::move(data));
}

StatusOr<TokenizerData> ReadTokenizerData(const GgufFile& file) {
  TokenizerData data;
  auto model = file.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status().WithContext("tokenizer: reading tokenizer.ggml.model");
  data.model = std::move(*model);
  if (data.model != "gpt2") {
    return Unimplemented("unsupported tokenizer.ggml.model '" + data.model + "' (supported: gpt2, byte-level BPE)");
  }

  auto tokens = file.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status().WithContext("tokenizer: reading tokenizer.ggml.tokens");
  data.tokens = std::move(*tokens);
  if (file.Find("tokenizer.ggml.token_type") != nullptr) {
    auto types = file.GetIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status().WithContext("tokenizer: reading tokenizer.ggml.token_type");
    data.token_types = std::move(*types);
  }
  auto merges = file.GetStringArray("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status().WithContext("tokenizer: reading tokenizer.ggml.merges");
  data.merges = std::move(*merges);
  if (file.Find("tokenizer.ggml.pre") != nullptr) {
    auto pre = file.GetString("tokenizer.ggml.pre");
    if (!pre.ok()) return pre.status().WithContext("tokenizer: reading tokenizer.ggml.pre");
    data.pre = std::move(*pre);
  }
  const int32_t n = static_cast<int32_t>(std::min<size_t>(data.tokens.size(), INT32_MAX));
  data.bos_id = ReadId(file, "tokenizer.ggml.bos_token_id", n);
  data.eos_id = ReadId(file, "tokenizer.ggml.eos_token_id", n);
  data.eot_id = ReadId(file, "tokenizer.ggml.eot_token_id", n);
  data.eom_id = ReadId(file, "tokenizer.ggml.eom_token_id", n);
  data.unk_id = ReadId(file, "tokenizer.ggml.unknown_token_id", n);
  data.pad_id = ReadId(file, "tokenizer.ggml.padding_token_id", n);
  data.fim_pre_id = ReadId(file, "tokenizer.ggml.fim_pre_token_id", n);
  data.fim_suf_id = ReadId(file, "tokenizer.ggml.fim_suf_token_id", n);
  data.fim_mid_id = ReadId(file, "tokenizer.ggml.fim_mid_token_id", n);
  data.fim_pad_id = ReadId(file, "tokenizer.ggml.fim_pad_token_id", n);
  data.fim_rep_id = ReadId(file, "tokenizer.ggml.fim_rep_token_id", n);
  data.fim_sep_id = ReadId(file, "tokenizer.ggml.fim_sep_token_id", n);
  if (auto v = file.GetBool("tokenizer.ggml.add_bos_token"); v.ok()) data.add_bos = *v;
  if (auto v = file.GetBool("tokenizer.ggml.add_eos_token"); v.ok()) data.add_eos = *v;
  if (auto v = file.GetString("tokenizer.chat_template"); v.ok()) data.chat_template = std::move(*v);
  return data;
}

}  // namespace kinfer
