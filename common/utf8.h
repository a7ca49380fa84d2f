// UTF-8 helpers: the encoding of one code point (shared by the tokenizer and the grammar
// compilers) and character counting (the completions API's text_offset).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kinfer::utf8 {

// Appends the UTF-8 encoding of `cp` (REQUIRES: cp <= 0x10FFFF).
inline void Append(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Counts the characters (code points) of UTF-8 text fed in pieces that may split a character,
// such as the byte pieces of tokens: a character counts when its last byte arrives, so a count
// taken between pieces is where the split character starts. A byte that belongs to no
// well-formed sequence counts as one character, as a decoder's U+FFFD would.
class CharCounter {
 public:
  void Feed(std::string_view bytes) {
    for (unsigned char c : bytes) {
      if ((c & 0xC0) == 0x80) {  // a continuation byte
        if (pending_ == 0) {
          ++count_;
        } else if (--pending_ == 0) {
          ++count_;
        }
        continue;
      }
      if (pending_ != 0) {  // a sequence cut short
        ++count_;
        pending_ = 0;
      }
      if (c < 0xC2 || c > 0xF4) {
        ++count_;  // ASCII, or a byte no sequence starts with
      } else {
        pending_ = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
      }
    }
  }
  size_t count() const { return count_; }

 private:
  size_t count_ = 0;
  int pending_ = 0;  // continuation bytes still expected
};

// The characters of `s` (CharCounter over one piece; an unfinished last sequence is not counted).
inline size_t CharCount(std::string_view s) {
  CharCounter c;
  c.Feed(s);
  return c.count();
}

}  // namespace kinfer::utf8
