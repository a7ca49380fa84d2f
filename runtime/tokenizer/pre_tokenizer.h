// Pre-tokenizer for byte-level BPE: splits text into words before merges, exactly as llama.cpp's
// unicode_regex_split does for the regex list of each `tokenizer.ggml.pre` type. The regexes are
// implemented by hand (no std::regex); each stage splits every piece produced by the previous
// stage independently, so a later stage never joins text across an earlier split.
//
// Adding a pre type: add an enum value, map its GGUF name in ParsePreTokenizerType, and list its
// stages in StagesFor (pre_tokenizer.cc); add a stage kind when a regex needs one.
//
// Thread safety: stateless functions.
#pragma once

#include <string_view>
#include <vector>

#include "common/status.h"

namespace kinfer {

enum class PreTokenizerType {
  kDefault,  // "default": llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT regex list
  kGpt2,     // "gpt-2" (also accepted as "gpt2"): the GPT-2 regex alone
  kSmollm,   // "smollm": split every \p{N}, then GPT-2
  kStarcoder,  // "starcoder", "refact": same regexes as kSmollm, but spaces cleaned on decode
};

// Maps a `tokenizer.ggml.pre` value. UNIMPLEMENTED naming the value when it is not supported.
StatusOr<PreTokenizerType> ParsePreTokenizerType(std::string_view name);

// Whether llama.cpp cleans spaces around punctuation on detokenize for this type.
bool PreTokenizerCleansSpaces(PreTokenizerType type);

// Splits `text` into words; each word is a view into `text` and together they cover it in
// order. REQUIRES: text is valid UTF-8 (ill-formed bytes are treated as U+FFFD, one per byte).
void PreTokenize(PreTokenizerType type, std::string_view text, std::vector<std::string_view>* words);

}  // namespace kinfer
