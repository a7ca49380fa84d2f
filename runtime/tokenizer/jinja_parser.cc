#include "runtime/tokenizer/jinja_parser.h"

#include <cstdlib>
#include <stdexcept>

namespace kinfer::jinja {
namespace {

// Internal: parse errors unwind with this and become a Status in Parse().
struct ParseError {
  Status status;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : t_(t) {}

  NodeList ParseTemplate() {
    NodeList nodes = ParseBody({});
    if (Peek().kind != TokenKind::kEof) Fail(Peek(), "unexpected '" + Peek().text + "'");
    return nodes;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(pos_++, t_.size() - 1)]; }

  [[noreturn]] void Fail(const Token& at, const std::string& what) const {
    throw ParseError{InvalidArgument("chat template line " + std::to_string(at.line) + ", column " +
                                     std::to_string(at.col) + ": " + what)};
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kOp && Peek(ahead).text == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).kind == TokenKind::kName && Peek(ahead).text == name;
  }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Fail(Peek(), std::string("expected '") + op + "', found '" + Peek().text + "'");
    ++pos_;
  }
  std::string ExpectName() {
    if (Peek().kind != TokenKind::kName) Fail(Peek(), "expected a name, found '" + Peek().text + "'");
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Peek().kind != TokenKind::kBlockEnd) Fail(Peek(), "expected '%}', found '" + Peek().text + "'");
    ++pos_;
  }

  // Parses nodes until a block tag whose keyword is in `stops` (left unconsumed, pos_ at its
  // keyword) or the end.
  NodeList ParseBody(const std::vector<std::string>& stops) {
    NodeList nodes;
    while (true) {
      const Token& tok = Peek();
      if (tok.kind == TokenKind::kEof) {
        if (!stops.empty()) Fail(tok, "missing {% " + stops.back() + " %}");
        return nodes;
      }
      if (tok.kind == TokenKind::kText) {
        auto n = MakeNode(Node::Kind::kText, tok);
        n->text = tok.text;
        nodes.push_back(std::move(n));
        ++pos_;
        continue;
      }
      if (tok.kind == TokenKind::kVarBegin) {
        ++pos_;
        auto n = MakeNode(Node::Kind::kOutput, tok);
        n->expr = ParseExpression();
        if (Peek().kind != TokenKind::kVarEnd) Fail(Peek(), "expected '}}', found '" + Peek().text + "'");
        ++pos_;
        nodes.push_back(std::move(n));
        continue;
      }
      if (tok.kind != TokenKind::kBlockBegin) Fail(tok, "unexpected '" + tok.text + "'");
      const Token& kw = Peek(1);
      if (kw.kind != TokenKind::kName) Fail(kw, "expected a tag name");
      for (const std::string& s : stops) {
        if (kw.text == s) {
          ++pos_;  // at the keyword
          return nodes;
        }
      }
      pos_ += 2;
      if (kw.text == "if") {
        nodes.push_back(ParseIf(kw));
      } else if (kw.text == "for") {
        nodes.push_back(ParseFor(kw));
      } else if (kw.text == "set") {
        nodes.push_back(ParseSet(kw));
      } else if (kw.text == "break" || kw.text == "continue") {
        ExpectBlockEnd();
        nodes.push_back(MakeNode(kw.text == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, kw));
      } else if (kw.text == "generation") {
        // llama-cpp-python ignores {% generation %} markers and renders their body.
        ExpectBlockEnd();
        NodeList body = ParseBody({"endgeneration"});
        ++pos_;
        ExpectBlockEnd();
        for (auto& n : body) nodes.push_back(std::move(n));
      } else {
        Fail(kw, "unsupported tag '" + kw.text + "'");
      }
    }
  }

  std::unique_ptr<Node> MakeNode(Node::Kind kind, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = at.line;
    n->col = at.col;
    return n;
  }

  std::unique_ptr<Node> ParseIf(const Token& at) {
    auto n = MakeNode(Node::Kind::kIf, at);
    ExprPtr cond = ParseExpression();
    ExpectBlockEnd();
    while (true) {
      NodeList body = ParseBody({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      const std::string kw = Next().text;
      if (kw == "elif") {
        cond = ParseExpression();
        ExpectBlockEnd();
        continue;
      }
      ExpectBlockEnd();
      if (kw == "else") {
        n->else_body = ParseBody({"endif"});
        ++pos_;
        ExpectBlockEnd();
      }
      return n;
    }
  }

  std::unique_ptr<Node> ParseFor(const Token& at) {
    auto n = MakeNode(Node::Kind::kFor, at);
    n->targets.push_back(ExpectName());
    while (IsOp(",")) {
      ++pos_;
      n->targets.push_back(ExpectName());
    }
    if (!IsName("in")) Fail(Peek(), "expected 'in' in for loop");
    ++pos_;
    n->expr = ParseCondless();
    if (IsName("if")) {
      ++pos_;
      n->filter = ParseCondless();
    }
    if (IsName("recursive")) Fail(Peek(), "unsupported: recursive loops");
    ExpectBlockEnd();
    n->body = ParseBody({"else", "endfor"});
    if (Next().text == "else") {
      ExpectBlockEnd();
      n->else_body = ParseBody({"endfor"});
      ++pos_;
    }
    ExpectBlockEnd();
    return n;
  }

  std::unique_ptr<Node> ParseSet(const Token& at) {
    auto n = MakeNode(Node::Kind::kSet, at);
    n->targets.push_back(ExpectName());
    if (IsOp(".")) {
      ++pos_;
      n->attr = ExpectName();
    } else {
      while (IsOp(",")) {
        ++pos_;
        n->targets.push_back(ExpectName());
      }
    }
    if (Peek().kind == TokenKind::kBlockEnd) {  // {% set x %}...{% endset %}
      if (n->targets.size() != 1 || !n->attr.empty()) Fail(at, "block set needs a single name");
      ++pos_;
      n->body = ParseBody({"endset"});
      ++pos_;
      ExpectBlockEnd();
      return n;
    }
    ExpectOp("=");
    n->expr = ParseExpression();
    ExpectBlockEnd();
    return n;
  }

  ExprPtr Make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  ExprPtr Binary(const Token& at, const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = Make(Expr::Kind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  // expression := or_expr ["if" or_expr ["else" expression]]
  ExprPtr ParseExpression() {
    ExprPtr e = ParseOr();
    while (IsName("if")) {
      const Token& at = Next();
      auto c = Make(Expr::Kind::kCond, at);
      ExprPtr cond = ParseOr();
      ExprPtr other;
      if (IsName("else")) {
        ++pos_;
        other = ParseExpression();
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }
  // The iterable of a for loop may not contain a bare conditional ("for x in xs if c").
  ExprPtr ParseCondless() { return ParseOr(); }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (IsName("or")) {
      const Token& at = Next();
      e = Binary(at, "or", std::move(e), ParseAnd());
    }
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (IsName("and")) {
      const Token& at = Next();
      e = Binary(at, "and", std::move(e), ParseNot());
    }
    return e;
  }
  ExprPtr ParseNot() {
    if (IsName("not")) {
      const Token& at = Next();
      auto e = Make(Expr::Kind::kUnary, at);
      e->name = "not";
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr e = ParseMath1();
    while (true) {
      const Token& at = Peek();
      std::string op;
      if (at.kind == TokenKind::kOp &&
          (at.text == "==" || at.text == "!=" || at.text == "<" || at.text == "<=" || at.text == ">" || at.text == ">=")) {
        op = at.text;
        ++pos_;
      } else if (IsName("in")) {
        op = "in";
        ++pos_;
      } else if (IsName("not") && IsName("in", 1)) {
        op = "notin";
        pos_ += 2;
      } else {
        return e;
      }
      e = Binary(at, op, std::move(e), ParseMath1());
    }
  }
  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& at = Next();
      e = Binary(at, at.text, std::move(e), ParseConcat());
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (IsOp("~")) {
      const Token& at = Next();
      e = Binary(at, "~", std::move(e), ParseMath2());
    }
    return e;
  }
  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& at = Next();
      e = Binary(at, at.text, std::move(e), ParsePow());
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary();
    while (IsOp("**")) {
      const Token& at = Next();
      e = Binary(at, "**", std::move(e), ParseUnary());
    }
    return e;
  }
  // As jinja2: filters bind to the whole unary expression ("-x | abs" is "(-x) | abs").
  ExprPtr ParseUnary(bool with_filter = true) {
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token& at = Next();
      e = Make(Expr::Kind::kUnary, at);
      e->name = at.text;
      e->args.push_back(ParseUnary(false));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    return with_filter ? ParseFilters(std::move(e)) : std::move(e);
  }

  ExprPtr ParsePrimary() {
    const Token& tok = Next();
    switch (tok.kind) {
      case TokenKind::kName: {
        if (tok.text == "true" || tok.text == "True") return Literal(tok, Value::Bool(true));
        if (tok.text == "false" || tok.text == "False") return Literal(tok, Value::Bool(false));
        if (tok.text == "none" || tok.text == "None") return Literal(tok, Value::None());
        auto e = Make(Expr::Kind::kName, tok);
        e->name = tok.text;
        return e;
      }
      case TokenKind::kString: {
        std::string s = tok.text;
        while (Peek().kind == TokenKind::kString) s += Next().text;  // adjacent literals concatenate
        return Literal(tok, Value::String(std::move(s)));
      }
      case TokenKind::kInt: {
        errno = 0;
        const long long v = std::strtoll(tok.text.c_str(), nullptr, 10);
        if (errno != 0) Fail(tok, "integer literal out of range");
        return Literal(tok, Value::Int(v));
      }
      case TokenKind::kFloat:
        return Literal(tok, Value::Float(std::strtod(tok.text.c_str(), nullptr)));
      case TokenKind::kOp:
        if (tok.text == "(") {
          if (IsOp(")")) Fail(tok, "unsupported: tuples");
          ExprPtr e = ParseExpression();
          if (IsOp(",")) Fail(Peek(), "unsupported: tuples");
          ExpectOp(")");
          return e;
        }
        if (tok.text == "[") {
          auto e = Make(Expr::Kind::kList, tok);
          while (!IsOp("]")) {
            e->args.push_back(ParseExpression());
            if (!IsOp(",")) break;
            ++pos_;
          }
          ExpectOp("]");
          return e;
        }
        if (tok.text == "{") {
          auto e = Make(Expr::Kind::kDict, tok);
          while (!IsOp("}")) {
            e->keys.push_back(ParseExpression());
            ExpectOp(":");
            e->args.push_back(ParseExpression());
            if (!IsOp(",")) break;
            ++pos_;
          }
          ExpectOp("}");
          return e;
        }
        break;
      default:
        break;
    }
    Fail(tok, "unexpected '" + tok.text + "' in expression");
  }

  ExprPtr Literal(const Token& at, Value v) {
    auto e = Make(Expr::Kind::kLiteral, at);
    e->value = std::move(v);
    return e;
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (IsOp(".")) {
        const Token& at = Next();
        auto g = Make(Expr::Kind::kGetAttr, at);
        if (Peek().kind == TokenKind::kInt) {  // x.0 is x[0] in jinja2
          auto idx = Literal(Peek(), Value::Int(std::strtoll(Next().text.c_str(), nullptr, 10)));
          g->kind = Expr::Kind::kGetItem;
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(idx));
        } else {
          g->name = ExpectName();
          g->args.push_back(std::move(e));
        }
        e = std::move(g);
      } else if (IsOp("[")) {
        const Token& at = Next();
        ExprPtr parts[3];
        int colons = 0;
        while (!IsOp("]")) {
          if (IsOp(":")) {
            if (++colons > 2) Fail(Peek(), "bad slice");
            ++pos_;
            continue;
          }
          if (parts[colons]) Fail(Peek(), "expected ']'");
          parts[colons] = ParseExpression();
        }
        ExpectOp("]");
        if (colons == 0) {
          if (!parts[0]) Fail(at, "empty subscript");
          auto g = Make(Expr::Kind::kGetItem, at);
          g->args.push_back(std::move(e));
          g->args.push_back(std::move(parts[0]));
          e = std::move(g);
        } else {
          auto g = Make(Expr::Kind::kSlice, at);
          g->args.push_back(std::move(e));
          for (int k = 0; k < 3; ++k) g->slice[k] = std::move(parts[k]);
          e = std::move(g);
        }
      } else if (IsOp("(")) {
        const Token& at = Next();
        auto c = Make(Expr::Kind::kCall, at);
        c->args.push_back(std::move(e));
        ParseArgs(c.get());
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  // After "(": positional and keyword arguments up to ")".
  void ParseArgs(Expr* call) {
    while (!IsOp(")")) {
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        ++pos_;
        call->kwargs.emplace_back(std::move(key), ParseExpression());
      } else {
        if (!call->kwargs.empty()) Fail(Peek(), "positional argument after keyword argument");
        call->args.push_back(ParseExpression());
      }
      if (!IsOp(",")) break;
      ++pos_;
    }
    ExpectOp(")");
  }

  ExprPtr ParseFilters(ExprPtr e) {
    while (true) {
      if (IsOp("|")) {
        ++pos_;
        const Token& at = Peek();
        auto f = Make(Expr::Kind::kFilter, at);
        f->name = ExpectName();
        if (!IsSupportedFilter(f->name)) Fail(at, "unsupported filter '" + f->name + "'");
        f->args.push_back(std::move(e));
        if (IsOp("(")) {
          ++pos_;
          ParseArgs(f.get());
        }
        e = std::move(f);
      } else if (IsName("is")) {
        ++pos_;
        const Token& at = Peek();
        auto t = Make(Expr::Kind::kTest, at);
        if (IsName("not")) {
          ++pos_;
          t->negate = true;
        }
        const Token& name_tok = Peek();
        // "none", "true", "false" are names of tests here, not literals.
        t->name = ExpectName();
        if (!IsSupportedTest(t->name)) Fail(name_tok, "unsupported test '" + t->name + "'");
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          ++pos_;
          ParseArgs(t.get());
        } else if (Peek().kind == TokenKind::kString || Peek().kind == TokenKind::kInt ||
                   Peek().kind == TokenKind::kFloat || IsOp("[") || IsOp("{") ||
                   (Peek().kind == TokenKind::kName && !IsName("else") && !IsName("or") && !IsName("and"))) {
          // One argument without parentheses, as jinja2 takes it: "x is divisibleby 3",
          // "x is eq 'a'", "x is sameas none", "x is in ['a', 'b']".
          t->args.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<NodeList> Parse(const std::vector<Token>& tokens) {
  try {
    return Parser(tokens).ParseTemplate();
  } catch (const ParseError& e) {
    return e.status;
  }
}

}  // namespace kinfer::jinja
