// Tokenizer construction and llama.cpp's special-token detection.
#include <algorithm>
#include <array>
#include <span>

#include "runtime/tokenizer/special_partition.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {

std::string TokenPieceForCache(const std::string& text, uint32_t attr);  // tokenizer.cc

namespace {

bool TextIn(const std::string& text, std::span<const std::string_view> list) {
  return std::find(list.begin(), list.end(), text) != list.end();
}

// Token texts llama.cpp (llama_vocab::impl::load) recognizes when the metadata does not name
// the id; keep in step with it.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "<end_of_utterance>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>"};
constexpr std::string_view kFimPreTexts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
    "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>"};
constexpr std::string_view kFimSufTexts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>",
    "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>"};
constexpr std::string_view kFimMidTexts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
    "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                                                  "<PAD>"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                                                  "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};

}  // namespace

void Tokenizer::DetectSpecialTokens(const TokenizerData& data) {
  const int32_t n = vocab_.size();
  auto valid = [n](int32_t id) { return id >= 0 && id < n ? id : -1; };
  // GPT-2 vocabularies default BOS/EOS to id 11 (llama.cpp), overridden by metadata.
  bos_id_ = data.bos_id >= 0 ? valid(data.bos_id) : valid(11);
  eos_id_ = data.eos_id >= 0 ? valid(data.eos_id) : valid(11);
  int32_t eot = valid(data.eot_id), eom = valid(data.eom_id);
  int32_t fim_pre = valid(data.fim_pre_id), fim_suf = valid(data.fim_suf_id), fim_mid = valid(data.fim_mid_id);
  int32_t fim_pad = valid(data.fim_pad_id), fim_rep = valid(data.fim_rep_id), fim_sep = valid(data.fim_sep_id);

  auto mark_control = [&](int32_t id) {
    if (!(vocab_.attr(id) & kAttrControl)) vocab_.set_attr(id, kAttrControl);
  };
  auto detect = [&](int32_t* slot, std::span<const std::string_view> texts, int32_t id) {
    if (*slot < 0 && TextIn(vocab_.text(id), texts)) {
      *slot = id;
      mark_control(id);
    }
  };
  for (int32_t id = 0; id < n; ++id) {
    detect(&eot, kEotTexts, id);
    detect(&eom, kEomTexts, id);
    detect(&fim_pre, kFimPreTexts, id);
    detect(&fim_suf, kFimSufTexts, id);
    detect(&fim_mid, kFimMidTexts, id);
    detect(&fim_pad, kFimPadTexts, id);
    detect(&fim_rep, kFimRepTexts, id);
    detect(&fim_sep, kFimSepTexts, id);
  }

  is_eog_.assign(n, 0);
  for (int32_t id : {fim_pad, fim_rep, fim_sep}) {
    if (id >= 0) is_eog_[id] = 1;
  }
  bool has_return = false, has_call = false, has_calls = false, has_flush = false;
  int32_t end_id = -1;
  for (int32_t id = 0; id < n; ++id) {
    const std::string& t = vocab_.text(id);
    if (TextIn(t, kEogTexts)) {
      is_eog_[id] = 1;
      mark_control(id);
    }
    has_return |= t == "<|return|>";
    has_call |= t == "<|call|>";
    has_calls |= t == "<|calls|>";
    has_flush |= t == "<|flush|>";
    if (t == "<|end|>") end_id = id;
  }
  // llama.cpp: with <|return|> and <|call|> (gpt-oss) or <|calls|> and <|flush|>, "<|end|>" is
  // not end-of-generation.
  if (((has_return && has_call) || (has_calls && has_flush)) && end_id >= 0) is_eog_[end_id] = 0;
  for (int32_t id : {eos_id_, eot, eom}) {
    if (id >= 0) is_eog_[id] = 1;
  }
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerData data) {
  if (data.model != "gpt2") {
    return Unimplemented("unsupported tokenizer.ggml.model '" + data.model +
                         "' (supported: gpt2, byte-level BPE)");
  }
  if (data.tokens.empty()) return InvalidArgument("tokenizer.ggml.tokens is empty");
  if (!data.token_types.empty() && data.token_types.size() != data.tokens.size()) {
    return InvalidArgument("tokenizer.ggml.token_type has " + std::to_string(data.token_types.size()) +
                           " entries for " + std::to_string(data.tokens.size()) + " tokens");
  }
  if (data.tokens.size() > static_cast<size_t>(INT32_MAX)) return InvalidArgument("too many tokens");
  KINFER_ASSIGN_OR_RETURN(PreTokenizerType pre, ParsePreTokenizerType(data.pre));

  auto tok = std::unique_ptr<Tokenizer>(new Tokenizer());
  tok->pre_ = pre;
  tok->clean_spaces_ = PreTokenizerCleansSpaces(pre);
  tok->ignore_merges_ = false;
  tok->add_bos_ = data.add_bos.value_or(false);
  tok->add_eos_ = data.add_eos.value_or(false);
  tok->chat_template_ = data.chat_template;

  std::vector<uint32_t> attrs(data.tokens.size(), kAttrNormal);
  for (size_t i = 0; i < data.token_types.size(); ++i) attrs[i] = TokenAttrFromType(data.token_types[i]);
  tok->vocab_ = Vocab(std::move(data.tokens), std::move(attrs));
  tok->merges_ = BpeMerges(data.merges);
  tok->DetectSpecialTokens(data);
  tok->special_order_ = SpecialTokensByPriority(tok->vocab_);

  const int32_t n = tok->vocab_.size();
  tok->pieces_.resize(n);
  for (int32_t id = 0; id < n; ++id) tok->pieces_[id] = TokenPieceForCache(tok->vocab_.text(id), tok->vocab_.attr(id));
  return tok;
}

}  // namespace kinfer
