// Special-token partitioning (llama.cpp's tokenizer_st_partition): before BPE, the text of
// control, user-defined and unknown tokens is cut out of the input and becomes those tokens.
// Tokens are tried in the order given (longest text first), each one splitting every raw-text
// fragment left by the previous ones at all of its non-overlapping occurrences.
//
// Thread safety: stateless function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/vocab.h"

namespace kinfer {

struct TextFragment {
  int32_t token = -1;  // >= 0: a special token; -1: raw text [offset, offset + length)
  size_t offset = 0;
  size_t length = 0;
};

// Special tokens of `vocab` (control, user-defined, unknown) in matching order: longer text
// first, then lower id.
std::vector<int32_t> SpecialTokensByPriority(const Vocab& vocab);

// Splits `text` into fragments. Without `parse_special`, control and unknown tokens are left
// as text; user-defined tokens are always cut out (as llama.cpp and HF tokenizers do).
void PartitionSpecialTokens(std::string_view text, const Vocab& vocab, const std::vector<int32_t>& special_tokens,
                            bool parse_special, std::vector<TextFragment>* fragments);

}  // namespace kinfer
