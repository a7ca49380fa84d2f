// Unicode helpers for the tokenizer: UTF-8 coding, code point categories (from the generated
// unicode_tables.cc) and GPT-2's byte <-> code point mapping used by byte-level BPE.
//
// Thread safety: every function is pure or reads tables built once (thread-safe static init).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer {

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool IsValidUtf8(std::string_view s);

namespace unicode {

// Category flags of a code point. Exactly one category bit is set for every code point below
// 0x110000 (kUndefined for unassigned ones); kWhitespace is added for White_Space code points.
// Matches the flag semantics of llama.cpp's unicode_cpt_flags.
enum CodepointFlag : uint16_t {
  kUndefined = 1 << 0,
  kNumber = 1 << 1,       // \p{N}
  kLetter = 1 << 2,       // \p{L}
  kSeparator = 1 << 3,    // \p{Z}
  kMark = 1 << 4,         // \p{M}
  kPunctuation = 1 << 5,  // \p{P}
  kSymbol = 1 << 6,       // \p{S}
  kControl = 1 << 7,      // \p{C} other than Cn
  kWhitespace = 1 << 8,   // \s (White_Space)
};

// Flags of `cp`; 0 for values past U+10FFFF.
uint16_t CodepointFlags(uint32_t cp);

// Unicode version the category table was generated from.
const char* TableVersion();

// Length of the UTF-8 sequence that starts with `lead` as llama.cpp counts it (by the top four
// bits; a stray continuation byte counts as 1).
inline size_t Utf8SequenceLength(uint8_t lead) {
  static constexpr uint8_t kLookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLookup[lead >> 4];
}

// Appends the UTF-8 encoding of `cp` (REQUIRES: cp <= 0x10FFFF).
void AppendUtf8(uint32_t cp, std::string* out);

// Decodes `s` into code points and, in `byte_offsets` (size n+1), where each one starts.
// Ill-formed bytes decode as U+FFFD one byte at a time (callers are expected to pass valid text).
void DecodeUtf8(std::string_view s, std::vector<uint32_t>* cpts, std::vector<uint32_t>* byte_offsets);

// Length of the longest prefix of `s` that is valid UTF-8 or an incomplete-but-valid start of a
// sequence cut off by the end of `s`: returns {valid_len, pending_len}; valid_len + pending_len
// == s.size() when nothing invalid follows, otherwise s[valid_len] starts an invalid sequence
// (pending_len is then 0) whose maximal ill-formed subpart is `invalid_len` bytes long.
struct Utf8Scan {
  size_t valid_len = 0;    // complete, well-formed bytes from the start
  size_t pending_len = 0;  // an incomplete sequence at the very end (only if nothing invalid)
  size_t invalid_len = 0;  // > 0 when s[valid_len] starts an ill-formed subpart of this length
};
Utf8Scan ScanUtf8(std::string_view s);

// Replaces every maximal ill-formed subpart with U+FFFD (as Python's errors="replace").
std::string SanitizeUtf8(std::string_view s);

// GPT-2 byte-level BPE: each byte maps to one printable code point (UTF-8 encoded here).
const std::string& ByteToUnicode(uint8_t b);
// Inverse: the byte of code point `cp`, or -1 when `cp` is not in the mapping.
int UnicodeToByte(uint32_t cp);

}  // namespace unicode

namespace unicode_internal {
struct CategoryRange {
  uint32_t first;
  uint16_t flags;
};
struct WhitespaceRange {
  uint32_t first;
  uint32_t last;
};
extern const char kUnicodeVersion[];
extern const CategoryRange kCategoryRanges[];
extern const size_t kCategoryRangeCount;
extern const WhitespaceRange kWhitespaceRanges[];
extern const size_t kWhitespaceRangeCount;
}  // namespace unicode_internal

}  // namespace kinfer
