// StreamingDecoder: turns a stream of token ids into text chunks that are always valid UTF-8.
// A token may end in the middle of a multi-byte character (byte-level BPE splits emoji and CJK
// across tokens); Push holds such an incomplete trailing sequence back until the next token
// completes it. Bytes that can never become valid UTF-8 are replaced by U+FFFD as soon as they
// are known to be invalid (maximal ill-formed subparts, as Python's errors="replace").
//
// Thread safety: not thread-safe; one decoder per sequence, used by one thread at a time. The
// Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {

class StreamingDecoder {
 public:
  // `special`: whether control tokens render their text (as Tokenizer::TokenToPiece).
  StreamingDecoder(const Tokenizer& tok, bool special);

  // Appends the token's bytes; returns the newly complete text (possibly empty), valid UTF-8.
  std::string Push(int32_t id);
  // Returns what is held back, an incomplete sequence rendered as U+FFFD; resets the decoder.
  std::string Flush();

  // Bytes currently held back (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace kinfer
