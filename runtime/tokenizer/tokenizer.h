// Tokenizer: text <-> token ids for GGUF byte-level BPE vocabularies ("gpt2" tokenizer model),
// bit-exact with llama.cpp's llama_tokenize / llama_token_to_piece / llama_detokenize.
//
//   text --special partition--> fragments --pre-tokenizer--> words --BPE merges--> ids
//
// Thread safety: a Tokenizer is immutable after FromGguf/Create; all const methods may be called
// concurrently from any thread, and one instance is meant to be shared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/tokenizer/bpe.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/unicode.h"
#include "runtime/tokenizer/vocab.h"

namespace kinfer {

class GgufFile;

// Everything a tokenizer is built from, as stored in GGUF metadata (tokenizer.ggml.*).
struct TokenizerData {
  std::string model = "gpt2";         // tokenizer.ggml.model
  std::string pre = "default";        // tokenizer.ggml.pre
  std::vector<std::string> tokens;    // tokenizer.ggml.tokens
  std::vector<int64_t> token_types;   // tokenizer.ggml.token_type (empty: all normal)
  std::vector<std::string> merges;    // tokenizer.ggml.merges
  // Special ids from metadata; -1 when absent (bos/eos then take llama.cpp's GPT-2 default 11).
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, unk_id = -1, pad_id = -1;
  int32_t fim_pre_id = -1, fim_suf_id = -1, fim_mid_id = -1, fim_pad_id = -1, fim_rep_id = -1,
          fim_sep_id = -1;
  std::optional<bool> add_bos, add_eos;  // tokenizer.ggml.add_{bos,eos}_token
  std::optional<std::string> chat_template;
};

// Reads tokenizer.ggml.* from a GGUF file (errors as Tokenizer::FromGguf).
StatusOr<TokenizerData> ReadTokenizerData(const GgufFile& file);

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from `file`. Errors: NOT_FOUND / INVALID_ARGUMENT naming the key when
  // the vocab is missing or malformed; UNIMPLEMENTED naming the value for an unsupported
  // tokenizer.ggml.model or tokenizer.ggml.pre.
  static StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  // Same from already extracted data (tests, other containers).
  static StatusOr<std::unique_ptr<Tokenizer>> Create(TokenizerData data);

  // llama.cpp semantics: `add_special` adds BOS/EOS per add_bos_token/add_eos_token;
  // `parse_special` makes the text of control tokens (e.g. "<|im_start|>") become those tokens
  // (user-defined tokens always do). REQUIRES: text is valid UTF-8 (see IsValidUtf8).
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const;

  // The raw bytes of one token (byte-level decoded; may be part of a UTF-8 sequence). Control
  // and unknown tokens render their text only if `special`. Empty for an id out of range.
  std::string TokenToPiece(int32_t id, bool special) const;

  // Concatenated pieces (llama_detokenize with remove_special=false, unparse_special=special),
  // including llama.cpp's space clean-up for pre types that use it. The result may hold broken
  // UTF-8 when `ids` cut a character; StreamingDecoder handles streams.
  std::string Decode(std::span<const int32_t> ids, bool special) const;

  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return bos_id_; }  // -1 when absent
  int32_t eos_id() const { return eos_id_; }  // -1 when absent
  // End-of-generation: eos, eot, eom and tokens such as <|im_end|>, <|endoftext|>, <end_of_turn>
  // (llama_vocab_is_eog).
  bool IsEndOfGeneration(int32_t id) const;
  bool IsControl(int32_t id) const;
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // tokenizer.chat_template, when the file has one.
  std::optional<std::string> chat_template() const { return chat_template_; }
  // The token text as stored in the vocab (byte-level encoded for normal tokens).
  // REQUIRES: 0 <= id < vocab_size().
  const std::string& token_text(int32_t id) const { return vocab_.text(id); }
  // The id of the token whose stored text is exactly `token_text`, -1 when none.
  int32_t FindToken(std::string_view token_text) const { return vocab_.Find(token_text); }

 private:
  Tokenizer() = default;
  void DetectSpecialTokens(const TokenizerData& data);

  Vocab vocab_;
  BpeMerges merges_;
  PreTokenizerType pre_ = PreTokenizerType::kDefault;
  bool ignore_merges_ = false;
  bool clean_spaces_ = true;
  bool add_bos_ = false;
  bool add_eos_ = false;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  std::vector<int32_t> special_order_;  // partition priority
  std::vector<uint8_t> is_eog_;         // per id
  std::vector<std::string> pieces_;     // TokenToPiece(id, /*special=*/true)
  std::optional<std::string> chat_template_;
};

}  // namespace kinfer
