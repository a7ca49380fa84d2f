// A small byte-level BPE tokenizer built in memory: the 256 byte tokens, a few merges and
// special tokens. Lets the unit tests run without the model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/tokenizer/tokenizer.h"

namespace kinfer::testing {

// Ids: 0 "<|endoftext|>" (control), 1 "<|im_start|>" (control), 2 "<|im_end|>" (control),
// 3 "<tool>" (user-defined), then 256 byte tokens (4 + byte value, in byte order), then the
// merged tokens listed in `merges` order.
inline TokenizerData TinyTokenizerData(std::vector<std::string> merges = {"h e", "l l", "he ll", "Ġ w"}) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "smollm";
  d.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool>"};
  d.token_types = {3, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(unicode::ByteToUnicode(static_cast<uint8_t>(b)));
    d.token_types.push_back(1);
  }
  for (const std::string& m : merges) {
    std::string joined = m;
    joined.erase(joined.find(' '), 1);
    d.tokens.push_back(joined);
    d.token_types.push_back(1);
  }
  d.merges = std::move(merges);
  d.bos_id = 1;
  d.eos_id = 2;
  return d;
}

inline std::unique_ptr<Tokenizer> TinyTokenizer() {
  auto t = Tokenizer::Create(TinyTokenizerData());
  return t.ok() ? std::move(*t) : nullptr;
}

inline int32_t ByteId(uint8_t b) { return 4 + b; }

}  // namespace kinfer::testing
