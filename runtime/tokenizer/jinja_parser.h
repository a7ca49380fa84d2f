// Jinja parser: tokens (jinja_lexer) to an AST (jinja_ast.h) for the subset chat templates use:
// {{ }}, {% if/elif/else %}, {% for x[, y] in xs [if c] %}...{% else %}, {% set %} (also
// "ns.attr" targets and block form), {% break %}/{% continue %}, {% generation %} (ignored),
// comments, and expressions with jinja2's precedence: conditional "a if c else b", or, and,
// not, comparisons (== != < <= > >= in, not in), + -, ~, * / // %, **, unary - +, filters
// (x | f(args)), tests (x is [not] t), attribute/subscript/slice/call postfixes, literals.
//
// Anything else (macros, includes, call blocks, unknown filters or tests...) is rejected with
// INVALID_ARGUMENT "line L, column C: ..." at parse time, as jinja2 rejects unknown filters.
//
// Thread safety: stateless function.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/tokenizer/jinja_ast.h"
#include "runtime/tokenizer/jinja_lexer.h"

namespace kinfer::jinja {

StatusOr<NodeList> Parse(const std::vector<Token>& tokens);

// Filters and tests the evaluator implements (jinja_builtins.cc).
bool IsSupportedFilter(const std::string& name);
bool IsSupportedTest(const std::string& name);

}  // namespace kinfer::jinja
