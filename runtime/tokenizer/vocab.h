// Vocab: the token table of a tokenizer (texts, llama.cpp token attributes, text -> id lookup)
// and the ids of its special tokens. Built once from GGUF metadata by Tokenizer::FromGguf.
//
// Thread safety: immutable after construction; const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kinfer {

// llama.cpp's llama_token_attr bits, derived from tokenizer.ggml.token_type.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
};

// Maps GGUF token types (llama_token_type: 1 normal, 2 unknown, 3 control, 4 user-defined,
// 5 unused, 6 byte) to attributes.
uint32_t TokenAttrFromType(int64_t token_type);

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class Vocab {
 public:
  Vocab() = default;
  // REQUIRES: attrs.size() == texts.size(). Later duplicates of a text win the lookup, as in
  // llama.cpp.
  Vocab(std::vector<std::string> texts, std::vector<uint32_t> attrs);

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  const std::string& text(int32_t id) const { return texts_[id]; }
  uint32_t attr(int32_t id) const { return attrs_[id]; }
  void set_attr(int32_t id, uint32_t attr) { attrs_[id] = attr; }
  // -1 when no token has exactly this text.
  int32_t Find(std::string_view text) const {
    auto it = index_.find(text);
    return it == index_.end() ? -1 : it->second;
  }

 private:
  std::vector<std::string> texts_;
  std::vector<uint32_t> attrs_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> index_;
};

}  // namespace kinfer
