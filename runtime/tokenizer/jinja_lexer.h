// Jinja lexer: splits a template into text and tag tokens and lexes the expressions inside tags.
// Whitespace handling follows jinja2's lexer: newlines normalized to "\n", a single trailing
// newline dropped (keep_trailing_newline=False), "-" modifiers strip whitespace next to a tag,
// trim_blocks drops the first newline after a block or comment tag, lstrip_blocks strips spaces
// and tabs before a block or comment tag that starts a line ("+" disables either).
//
// Thread safety: stateless function.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace kinfer::jinja {

struct LexOptions {
  bool trim_blocks = true;    // as llama-cpp-python's Jinja2ChatFormatter (and transformers)
  bool lstrip_blocks = true;
};

enum class TokenKind {
  kText,        // literal template data (already whitespace-processed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // string literal, escapes already decoded
  kInt,
  kFloat,
  kOp,          // operator or punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  TokenKind kind;
  std::string text;  // text, name, decoded string value, number spelling or operator
  int line = 1;
  int col = 1;
};

// Lexes `source`. INVALID_ARGUMENT "line L, column C: ..." for an unterminated tag, comment or
// string, or a character that cannot start a token.
StatusOr<std::vector<Token>> Lex(const std::string& source, const LexOptions& options);

}  // namespace kinfer::jinja
