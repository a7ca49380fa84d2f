// Byte-level BPE merging of one pre-tokenized word, the algorithm of llama.cpp's
// llm_tokenizer_bpe_session: map bytes to GPT-2 code points, start from one symbol per code
// point, repeatedly merge the adjacent pair of lowest merge rank (leftmost on ties), then look
// each symbol up in the vocab, falling back to its single bytes when a symbol is not a token.
//
// Thread safety: immutable after construction; EncodeWord may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/tokenizer/vocab.h"

namespace kinfer {

class BpeMerges {
 public:
  BpeMerges() = default;
  // `merges` as in tokenizer.ggml.merges ("left right", split at the first space after the first
  // byte); the index is the rank; the first of duplicate pairs wins.
  explicit BpeMerges(const std::vector<std::string>& merges);

  // Rank of merging `left` with `right`, -1 when they do not merge.
  int32_t Rank(std::string_view left, std::string_view right) const;
  size_t size() const { return ranks_.size(); }

  // Encodes `word` (raw bytes; a whole pre-tokenizer word) and appends its tokens to `out`.
  // When `ignore_merges` and the byte-mapped word is itself a token, that token is used as is.
  void EncodeWord(std::string_view word, const Vocab& vocab, bool ignore_merges,
                  std::vector<int32_t>* out) const;

 private:
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ranks_;
};

}  // namespace kinfer
