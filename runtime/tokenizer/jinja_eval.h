// Jinja evaluator: renders a parsed template (jinja_ast.h) with the given global variables,
// following jinja2's semantics for the supported subset: undefined values print as "" and are
// false, attribute access on an undefined value is an error, {% set %} inside a for loop lasts
// one iteration, loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem.
//
// Thread safety: Render only reads the AST and globals; concurrent renders are safe.
#pragma once

#include <string>

#include "common/status.h"
#include "runtime/tokenizer/jinja_ast.h"
#include "runtime/tokenizer/jinja_value.h"

namespace kinfer::jinja {

// Renders `nodes`. Globals may include functions created with Value::Function:
// "raise_exception" (fails the render with its message) is always available, as are "range"
// and "namespace". Errors: INVALID_ARGUMENT "line L, column C: ..." for type errors, undefined
// attribute access and raise_exception (whose message is passed through).
StatusOr<std::string> Render(const NodeList& nodes, const ValueDict& globals);

// Internal to the evaluator and its builtins (jinja_builtins.cc).
struct EvalError {
  Status status;
};
[[noreturn]] void ThrowEval(int line, int col, const std::string& what);

// Filters, tests and methods (jinja_builtins.cc). `args` excludes the subject.
Value ApplyFilter(const Expr& at, const std::string& name, const Value& subject, const std::vector<Value>& args,
                  const std::vector<std::pair<std::string, Value>>& kwargs);
bool ApplyTest(const Expr& at, const std::string& name, const Value& subject, const std::vector<Value>& args);
// Returns true and sets *result when `name` is a method of `subject`'s type.
bool CallMethod(const Expr& at, const Value& subject, const std::string& name, const std::vector<Value>& args,
                const std::vector<std::pair<std::string, Value>>& kwargs, Value* result);
// The collection filters (jinja_list_filters.cc): select, reject, selectattr, rejectattr, map,
// unique, sort. Returns false when `name` is not one of them.
bool ApplyListFilter(const Expr& at, const std::string& name, const Value& subject, const std::vector<Value>& args,
                     const std::vector<std::pair<std::string, Value>>& kwargs, Value* result);
// Keyword argument `name`, else nullptr.
const Value* Kwarg(const std::vector<std::pair<std::string, Value>>& kwargs, const char* name);
// Positional argument `i`, else keyword `name`, else nullptr.
const Value* Arg(const std::vector<Value>& args, const std::vector<std::pair<std::string, Value>>& kwargs, size_t i,
                 const char* name);
// The items a for loop visits: a list's items, a dict's keys, a string's characters; none for
// undefined. Errors on other types.
ValueList AsList(const Expr& at, const Value& v);
// Python str.upper() / str.lower() (for the scripts jinja_builtins.cc maps).
std::string MapCase(const std::string& s, bool upper);
// Python str.strip family on UTF-8; `chars` empty means whitespace.
std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right);
// Number of code points.
size_t CodepointCount(const std::string& s);
// Splits into code points (as one-character strings).
std::vector<std::string> Codepoints(const std::string& s);

}  // namespace kinfer::jinja
