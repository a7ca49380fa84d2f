// Regular expressions as grammar rules: JSON Schema's `pattern` (inside a JSON string) and vLLM's
// guided_regex (the whole output).
//
// The syntax (ECMA-262's, the subset that constrained decoding can hold to):
//   literals (UTF-8 passes through), `.` (any character but \n and \r), classes `[a-z_]`,
//   `[^...]` (ASCII members and ranges; a negated class also takes every non-ASCII character),
//   escapes \d \w \s \D \W \S \n \t \r \f \v \0 \xHH \uHHHH and escaped punctuation, groups
//   `( )`, `(?: )`, `(?<name> )`, alternation `|`, quantifiers * + ? {n} {n,} {n,m} (a lazy `?`
//   after one changes nothing here), `^` at the start and `$` at the end.
// Refused (INVALID_ARGUMENT naming it): backreferences, lookaround, \b \B, `^`/`$` elsewhere,
// non-ASCII characters inside a class, counts above kMaxRegexRepeat.
//
// Thread safety: stateless.
#pragma once

#include <string_view>

#include "common/status.h"
#include "runtime/sample/grammar.h"

namespace kinfer {

inline constexpr int kMaxRegexRepeat = 1000;

enum class RegexText {
  kRaw,         // the characters as they are (guided_regex: the output text)
  kJsonString,  // as a JSON string's contents: '"', '\' and control characters escaped
};

// A rule matching the texts that `pattern` matches: the whole text when `anchored` (guided_regex);
// otherwise, as JSON Schema's `pattern`, any text containing a match, unless the pattern starts
// with ^ (match from the start) or ends with $ (match to the end).
StatusOr<int32_t> RegexRule(std::string_view pattern, RegexText mode, bool anchored,
                            GrammarBuilder* b);

}  // namespace kinfer
