#include "runtime/tokenizer/jinja_eval.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

namespace kinfer::jinja {

void ThrowEval(int line, int col, const std::string& what) {
  throw EvalError{InvalidArgument("chat template line " + std::to_string(line) + ", column " +
                                  std::to_string(col) + ": " + what)};
}

namespace {

// Unwinds a loop iteration for {% break %} / {% continue %}.
struct LoopControl {
  bool is_break;
};

class Evaluator {
 public:
  explicit Evaluator(const ValueDict& globals) : globals_(globals) { scopes_.emplace_back(); }

  void Run(const NodeList& nodes, std::string* out) {
    for (const auto& n : nodes) Exec(*n, out);
  }

 private:
  void Exec(const Node& n, std::string* out) {
    switch (n.kind) {
      case Node::Kind::kText:
        *out += n.text;
        return;
      case Node::Kind::kOutput:
        *out += ToStr(Eval(*n.expr));
        return;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (Eval(*cond).Truthy()) {
            Run(body, out);
            return;
          }
        }
        Run(n.else_body, out);
        return;
      case Node::Kind::kFor:
        return ExecFor(n, out);
      case Node::Kind::kSet:
        return ExecSet(n);
      case Node::Kind::kBreak:
        if (loop_depth_ == 0) ThrowEval(n.line, n.col, "'break' outside a loop");
        throw LoopControl{true};
      case Node::Kind::kContinue:
        if (loop_depth_ == 0) ThrowEval(n.line, n.col, "'continue' outside a loop");
        throw LoopControl{false};
    }
  }

  std::vector<Value> Iterate(const Value& v, int line, int col) {
    switch (v.kind) {
      case Value::Kind::kUndefined: return {};
      case Value::Kind::kList: return *v.list;
      case Value::Kind::kDict: {
        std::vector<Value> keys;
        for (const auto& kv : *v.dict) keys.push_back(Value::String(kv.first));
        return keys;
      }
      case Value::Kind::kString: {
        std::vector<Value> chars;
        for (auto& c : Codepoints(v.s)) chars.push_back(Value::String(std::move(c)));
        return chars;
      }
      default:
        ThrowEval(line, col, std::string("'") + TypeName(v) + "' object is not iterable");
    }
  }

  void Bind(const std::vector<std::string>& targets, const Value& item, int line, int col) {
    auto& scope = scopes_.back();
    if (targets.size() == 1) {
      scope[targets[0]] = item;
      return;
    }
    if (item.kind != Value::Kind::kList || item.list->size() != targets.size()) {
      ThrowEval(line, col, "cannot unpack " + std::string(TypeName(item)) + " into " +
                               std::to_string(targets.size()) + " names");
    }
    for (size_t k = 0; k < targets.size(); ++k) scope[targets[k]] = (*item.list)[k];
  }

  void ExecFor(const Node& n, std::string* out) {
    std::vector<Value> items = Iterate(Eval(*n.expr), n.line, n.col);
    if (n.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        Bind(n.targets, item, n.line, n.col);
        const bool keep = Eval(*n.filter).Truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items.swap(kept);
    }
    if (items.empty()) {
      Run(n.else_body, out);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    ++loop_depth_;
    for (int64_t k = 0; k < len; ++k) {
      scopes_.emplace_back();
      Bind(n.targets, items[k], n.line, n.col);
      scopes_.back()["loop"] = Value::Dict({
          {"index", Value::Int(k + 1)},
          {"index0", Value::Int(k)},
          {"revindex", Value::Int(len - k)},
          {"revindex0", Value::Int(len - k - 1)},
          {"first", Value::Bool(k == 0)},
          {"last", Value::Bool(k == len - 1)},
          {"length", Value::Int(len)},
          {"previtem", k > 0 ? items[k - 1] : Value::Undefined("previtem")},
          {"nextitem", k + 1 < len ? items[k + 1] : Value::Undefined("nextitem")},
      });
      bool stop = false;
      try {
        Run(n.body, out);
      } catch (const LoopControl& c) {
        stop = c.is_break;
      }
      scopes_.pop_back();
      if (stop) break;
    }
    --loop_depth_;
  }

  void ExecSet(const Node& n) {
    Value v;
    if (n.expr) {
      v = Eval(*n.expr);
    } else {
      std::string captured;
      Run(n.body, &captured);
      v = Value::String(std::move(captured));
    }
    if (!n.attr.empty()) {
      Value ns = Lookup(n.targets[0]);
      if (ns.kind != Value::Kind::kNamespace) {
        ThrowEval(n.line, n.col, "cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
      }
      for (auto& kv : *ns.dict) {
        if (kv.first == n.attr) {
          kv.second = std::move(v);
          return;
        }
      }
      ns.dict->emplace_back(n.attr, std::move(v));
      return;
    }
    Bind(n.targets, v, n.line, n.col);
  }

  Value Lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    for (const auto& kv : globals_) {
      if (kv.first == name) return kv.second;
    }
    if (name == "range" || name == "namespace" || name == "raise_exception" || name == "dict") {
      return Value::Function(name);
    }
    return Value::Undefined(name);
  }

  [[noreturn]] void Undefined(const Expr& at, const Value& v) {
    ThrowEval(at.line, at.col, "'" + (v.s.empty() ? std::string("value") : v.s) + "' is undefined");
  }

  Value Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.value;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        ValueList items;
        for (const auto& a : e.args) items.push_back(Eval(*a));
        return Value::List(std::move(items));
      }
      case Expr::Kind::kDict: {
        ValueDict items;
        for (size_t k = 0; k < e.args.size(); ++k) {
          const Value key = Eval(*e.keys[k]);
          if (!key.is_string()) ThrowEval(e.line, e.col, "only string keys are supported in dict literals");
          items.emplace_back(key.s, Eval(*e.args[k]));
        }
        return Value::Dict(std::move(items));
      }
      case Expr::Kind::kGetAttr: {
        const Value obj = Eval(*e.args[0]);
        if (obj.is_undefined()) Undefined(e, obj);
        if (const Value* v = obj.Find(e.name)) return *v;
        return Value::Undefined(std::string(TypeName(obj)) + " object has no attribute " + e.name);
      }
      case Expr::Kind::kGetItem:
        return GetItem(e, Eval(*e.args[0]), Eval(*e.args[1]));
      case Expr::Kind::kSlice:
        return Slice(e);
      case Expr::Kind::kCall:
        return Call(e);
      case Expr::Kind::kFilter: {
        const Value subject = Eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(Eval(*e.args[k]));
        std::vector<std::pair<std::string, Value>> kwargs;
        for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, Eval(*v));
        return ApplyFilter(e, e.name, subject, args, kwargs);
      }
      case Expr::Kind::kTest: {
        const Value subject = Eval(*e.args[0]);
        std::vector<Value> args;
        for (size_t k = 1; k < e.args.size(); ++k) args.push_back(Eval(*e.args[k]));
        return Value::Bool(ApplyTest(e, e.name, subject, args) != e.negate);
      }
      case Expr::Kind::kUnary: {
        const Value v = Eval(*e.args[0]);
        if (e.name == "not") return Value::Bool(!v.Truthy());
        if (!v.is_number()) ThrowEval(e.line, e.col, "bad operand type for unary " + e.name + ": " + TypeName(v));
        if (e.name == "+") return v.kind == Value::Kind::kBool ? Value::Int(v.b) : v;
        if (v.kind == Value::Kind::kFloat) return Value::Float(-v.f);
        return Value::Int(-(v.kind == Value::Kind::kBool ? v.b : v.i));
      }
      case Expr::Kind::kBinary:
        return Binary(e);
      case Expr::Kind::kCond:
        if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value::Undefined();
    }
    return Value::Undefined();
  }

  Value GetItem(const Expr& e, const Value& obj, const Value& key) {
    if (obj.is_undefined()) Undefined(e, obj);
    if (obj.is_mapping()) {
      if (key.is_string()) {
        if (const Value* v = obj.Find(key.s)) return *v;
      }
      return Value::Undefined("key " + ToStr(key));
    }
    if ((obj.kind == Value::Kind::kList || obj.is_string()) && (key.kind == Value::Kind::kInt || key.kind == Value::Kind::kBool)) {
      if (obj.is_string()) {
        std::vector<std::string> cps = Codepoints(obj.s);
        int64_t idx = key.kind == Value::Kind::kBool ? key.b : key.i;
        if (idx < 0) idx += static_cast<int64_t>(cps.size());
        if (idx < 0 || idx >= static_cast<int64_t>(cps.size())) return Value::Undefined("index");
        return Value::String(cps[idx]);
      }
      int64_t idx = key.kind == Value::Kind::kBool ? key.b : key.i;
      if (idx < 0) idx += static_cast<int64_t>(obj.list->size());
      if (idx < 0 || idx >= static_cast<int64_t>(obj.list->size())) return Value::Undefined("index");
      return (*obj.list)[idx];
    }
    return Value::Undefined(std::string(TypeName(obj)) + " object has no element " + ToStr(key));
  }

  Value Slice(const Expr& e) {
    const Value obj = Eval(*e.args[0]);
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.slice[k]) continue;
      const Value v = Eval(*e.slice[k]);
      if (v.kind == Value::Kind::kNone) continue;
      if (v.kind != Value::Kind::kInt) ThrowEval(e.line, e.col, "slice indices must be integers");
      bounds[k] = v.i;
      given[k] = true;
    }
    const int64_t step = given[2] ? bounds[2] : 1;
    if (step == 0) ThrowEval(e.line, e.col, "slice step cannot be zero");
    std::vector<Value> items;
    std::vector<std::string> chars;
    if (obj.kind == Value::Kind::kList) {
      items = *obj.list;
    } else if (obj.is_string()) {
      chars = Codepoints(obj.s);
    } else {
      ThrowEval(e.line, e.col, std::string("'") + TypeName(obj) + "' object is not subscriptable");
    }
    const int64_t n = static_cast<int64_t>(obj.is_string() ? chars.size() : items.size());
    // Python slice.indices().
    auto clamp = [&](int64_t v, bool has, int64_t dflt) {
      if (!has) return dflt;
      if (v < 0) v += n;
      if (step > 0) return std::clamp<int64_t>(v, 0, n);
      return std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t start = clamp(bounds[0], given[0], step > 0 ? 0 : n - 1);
    const int64_t stop = clamp(bounds[1], given[1], step > 0 ? n : -1);
    ValueList out_items;
    std::string out_str;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (obj.is_string()) out_str += chars[k];
      else out_items.push_back(items[k]);
    }
    return obj.is_string() ? Value::String(std::move(out_str)) : Value::List(std::move(out_items));
  }

  Value Call(const Expr& e) {
    std::vector<Value> args;
    for (size_t k = 1; k < e.args.size(); ++k) args.push_back(Eval(*e.args[k]));
    std::vector<std::pair<std::string, Value>> kwargs;
    for (const auto& [k, v] : e.kwargs) kwargs.emplace_back(k, Eval(*v));
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::kGetAttr) {
      const Value obj = Eval(*callee.args[0]);
      if (obj.is_undefined()) Undefined(callee, obj);
      Value result;
      if (CallMethod(e, obj, callee.name, args, kwargs, &result)) return result;
      ThrowEval(e.line, e.col, std::string("'") + TypeName(obj) + "' object has no method '" + callee.name + "'");
    }
    const Value fn = Eval(callee);
    if (fn.kind != Value::Kind::kFunction) {
      ThrowEval(e.line, e.col, "'" + (callee.kind == Expr::Kind::kName ? callee.name : std::string("value")) +
                                   "' is not callable");
    }
    if (fn.s == "raise_exception") {
      throw EvalError{InvalidArgument(args.empty() ? "raise_exception called" : ToStr(args[0]))};
    }
    if (fn.s == "namespace" || fn.s == "dict") {
      ValueDict items;
      if (!args.empty() && args[0].is_mapping()) items = *args[0].dict;
      for (auto& [k, v] : kwargs) items.emplace_back(k, v);
      return fn.s == "namespace" ? Value::Namespace(std::move(items)) : Value::Dict(std::move(items));
    }
    if (fn.s == "range") {
      int64_t r[3] = {0, 0, 1};
      for (const Value& a : args) {
        if (a.kind != Value::Kind::kInt) ThrowEval(e.line, e.col, "range() arguments must be integers");
      }
      if (args.size() == 1) {
        r[1] = args[0].i;
      } else if (args.size() == 2 || args.size() == 3) {
        r[0] = args[0].i;
        r[1] = args[1].i;
        if (args.size() == 3) r[2] = args[2].i;
      } else {
        ThrowEval(e.line, e.col, "range() takes 1 to 3 arguments");
      }
      if (r[2] == 0) ThrowEval(e.line, e.col, "range() step must not be zero");
      ValueList out;
      for (int64_t k = r[0]; r[2] > 0 ? k < r[1] : k > r[1]; k += r[2]) {
        out.push_back(Value::Int(k));
        if (out.size() > 100000) ThrowEval(e.line, e.col, "range() too long");
      }
      return Value::List(std::move(out));
    }
    if (fn.s == "strftime_now") {
      if (args.empty() || !args[0].is_string()) ThrowEval(e.line, e.col, "strftime_now() needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof(buf), args[0].s.c_str(), &local);
      return Value::String(std::string(buf, n));
    }
    ThrowEval(e.line, e.col, "unsupported function '" + fn.s + "'");
  }

  Value Binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? Eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = Eval(*e.args[0]);
      return a.Truthy() ? a : Eval(*e.args[1]);
    }
    const Value a = Eval(*e.args[0]);
    const Value b = Eval(*e.args[1]);
    if (op == "~") return Value::String(ToStr(a) + ToStr(b));
    if (op == "==") return Value::Bool(Equals(a, b));
    if (op == "!=") return Value::Bool(!Equals(a, b));
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      bool ok = true;
      bool r;
      if (op == "<") r = Less(a, b, &ok);
      else if (op == ">") r = Less(b, a, &ok);
      else if (op == "<=") r = !Less(b, a, &ok);
      else r = !Less(a, b, &ok);
      if (!ok) ThrowEval(e.line, e.col, "'" + op + "' not supported between " + TypeName(a) + " and " + TypeName(b));
      return Value::Bool(r);
    }
    if (op == "in" || op == "notin") {
      bool found = false;
      if (b.is_string()) {
        if (!a.is_string()) ThrowEval(e.line, e.col, "'in <string>' requires string as left operand");
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.kind == Value::Kind::kList) {
        for (const Value& x : *b.list) found = found || Equals(a, x);
      } else if (b.is_mapping()) {
        found = a.is_string() && b.Find(a.s) != nullptr;
      } else if (!b.is_undefined()) {
        ThrowEval(e.line, e.col, std::string("argument of type '") + TypeName(b) + "' is not iterable");
      }
      return Value::Bool(op == "in" ? found : !found);
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::String(a.s + b.s);
      if (a.kind == Value::Kind::kList && b.kind == Value::Kind::kList) {
        ValueList items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        return Value::List(std::move(items));
      }
    }
    if (op == "*" && ((a.is_string() && b.kind == Value::Kind::kInt) || (a.kind == Value::Kind::kInt && b.is_string()))) {
      const std::string& s = a.is_string() ? a.s : b.s;
      const int64_t n = a.is_string() ? b.i : a.i;
      if (n > 100000) ThrowEval(e.line, e.col, "string repetition too long");
      std::string out;
      for (int64_t k = 0; k < n; ++k) out += s;
      return Value::String(std::move(out));
    }
    if (!a.is_number() || !b.is_number()) {
      ThrowEval(e.line, e.col, "unsupported operand types for " + op + ": '" + TypeName(a) + "' and '" + TypeName(b) + "'");
    }
    const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
    const int64_t x = a.kind == Value::Kind::kBool ? a.b : a.i;
    const int64_t y = b.kind == Value::Kind::kBool ? b.b : b.i;
    const double fx = a.AsDouble(), fy = b.AsDouble();
    if (op == "+") return ints ? Value::Int(x + y) : Value::Float(fx + fy);
    if (op == "-") return ints ? Value::Int(x - y) : Value::Float(fx - fy);
    if (op == "*") return ints ? Value::Int(x * y) : Value::Float(fx * fy);
    if (op == "/") {
      if (fy == 0) ThrowEval(e.line, e.col, "division by zero");
      return Value::Float(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (fy == 0) ThrowEval(e.line, e.col, "integer division or modulo by zero");
      if (ints) {
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;  // floor division
        return op == "//" ? Value::Int(q) : Value::Int(x - q * y);
      }
      const double q = std::floor(fx / fy);
      return op == "//" ? Value::Float(q) : Value::Float(fx - q * fy);
    }
    if (op == "**") {
      if (ints && y >= 0 && y <= 64) {
        int64_t r = 1;
        for (int64_t k = 0; k < y; ++k) r *= x;
        return Value::Int(r);
      }
      return Value::Float(std::pow(fx, fy));
    }
    ThrowEval(e.line, e.col, "unsupported operator '" + op + "'");
  }

  const ValueDict& globals_;
  std::vector<std::unordered_map<std::string, Value>> scopes_;
  int loop_depth_ = 0;
};

}  // namespace

StatusOr<std::string> Render(const NodeList& nodes, const ValueDict& globals) {
  std::string out;
  try {
    Evaluator(globals).Run(nodes, &out);
  } catch (const EvalError& e) {
    return e.status;
  }
  return out;
}

}  // namespace kinfer::jinja
