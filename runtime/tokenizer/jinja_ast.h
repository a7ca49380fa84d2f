// AST of the Jinja subset: expressions and statements, as produced by jinja_parser.
//
// Thread safety: immutable after parsing; evaluation only reads it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tokenizer/jinja_value.h"

namespace kinfer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args
    kDict,     // keys[i] -> args[i]
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][a:b:c]; slice[k] may be null
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kUnary,    // op args[0]: "not", "-", "+"
    kBinary,   // args[0] op args[1]: or and == != < <= > >= in notin + - * / // % ** ~
    kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0, col = 0;
  Value value;
  std::string name;  // name, attribute, filter, test, or operator
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<ExprPtr> keys;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr slice[3];
};

struct Node;
using NodeList = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body)...; else_body
    kFor,       // targets in expr [if filter]: body; else_body
    kSet,       // targets (one name, or name.attr) = expr; or block set: body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0, col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, NodeList>> branches;
  NodeList body;
  NodeList else_body;
  std::vector<std::string> targets;
  std::string attr;  // kSet: "ns.attr" assignment when non-empty
};

}  // namespace kinfer::jinja
