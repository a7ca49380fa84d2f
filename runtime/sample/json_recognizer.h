// JsonRecognizer: a byte-at-a-time recognizer of one JSON object (RFC 8259), for constrained
// decoding (response_format {"type": "json_object"}): it says whether a byte may come next, so
// that every prefix it accepts can still be completed into a valid object.
//
// What it accepts: optional whitespace, then an object ({...}) whose values are any JSON values
// (objects, arrays, strings, numbers, true, false, null), nested at most kMaxDepth deep; after the
// closing brace, nothing (complete()). Strings take any byte >= 0x20 except an unescaped '"' or
// '\' (so UTF-8 passes through unchecked) and the escapes \" \\ \/ \b \f \n \r \t \uXXXX. At most
// kMaxWhitespaceRun whitespace bytes in a row (as llama.cpp's JSON grammar bounds its own), so a
// model cannot pad forever.
//
// The state is a small trivially copyable value: copy it to try bytes without committing.
//
// Thread safety: a value type; no shared state.
#pragma once

#include <cstdint>
#include <string_view>

namespace kinfer {

class JsonRecognizer {
 public:
  static constexpr int kMaxDepth = 64;
  static constexpr int kMaxWhitespaceRun = 32;

  // Feeds one byte. Returns false when it cannot come next; the state is then unspecified (feed
  // a copy when the answer is not known).
  bool Feed(uint8_t c);
  // Feeds every byte; false at the first that cannot come next.
  bool Feed(std::string_view bytes) {
    for (char c : bytes) {
      if (!Feed(static_cast<uint8_t>(c))) return false;
    }
    return true;
  }
  // True when `bytes` may come next (the state is not changed).
  bool Accepts(std::string_view bytes) const {
    JsonRecognizer copy = *this;
    return copy.Feed(bytes);
  }

  // Same state: the same bytes may come next (a mask cache's key).
  bool operator==(const JsonRecognizer&) const = default;

  // The top-level object is closed: nothing may follow.
  bool complete() const { return expect_ == Expect::kDone; }
  // Inside a string, past any escape: every byte >= 0x20 but '"' and '\\' keeps it there (the
  // state does not change), which lets a caller skip feeding such bytes one by one.
  bool in_plain_string() const { return lex_ == Lex::kString; }
  // True when every byte of `bytes` is such a byte.
  static bool PlainStringBytes(std::string_view bytes) {
    for (char ch : bytes) {
      const auto c = static_cast<uint8_t>(ch);
      if (c < 0x20 || c == '"' || c == '\\') return false;
    }
    return true;
  }

 private:
  // What the container grammar expects next (outside strings, numbers and literals).
  enum class Expect : uint8_t {
    kRoot,             // before the top-level '{'
    kKeyOrObjectEnd,   // after '{'
    kKey,              // after ',' in an object
    kColon,            // after a key
    kValue,            // after ':', or after ',' in an array
    kValueOrArrayEnd,  // after '['
    kCommaOrEnd,       // after a value inside a container
    kDone,             // the top-level object is closed
  };
  // The token being read, if any.
  enum class Lex : uint8_t {
    kNone,
    kString,   // inside a string
    kEscape,   // after a backslash
    kUnicode,  // inside \uXXXX (hex_left_ digits to go)
    kNumber,   // inside a number (num_ says where)
    kLiteral,  // inside true / false / null (literal_ and lit_pos_)
  };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExpMark, kExpSign, kExpDigits };

  bool FeedStructural(uint8_t c);
  bool FeedNumber(uint8_t c);
  bool StartValue(uint8_t c);
  bool Open(bool object);
  bool Close(bool object);
  void EndValue();
  bool InObject() const { return ((stack_ >> (depth_ - 1)) & 1u) != 0; }

  uint64_t stack_ = 0;  // bit d-1: the container at depth d is an object (1) or array (0)
  uint8_t depth_ = 0;
  Expect expect_ = Expect::kRoot;
  Lex lex_ = Lex::kNone;
  Num num_ = Num::kMinus;
  bool key_ = false;      // the string being read is an object key
  uint8_t ws_run_ = 0;    // whitespace bytes in a row
  uint8_t hex_left_ = 0;  // \u digits still to read
  uint8_t literal_ = 0;   // 0 true, 1 false, 2 null
  uint8_t lit_pos_ = 0;   // bytes of the literal read
};

}  // namespace kinfer
