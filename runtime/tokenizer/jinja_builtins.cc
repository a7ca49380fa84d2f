// Filters, tests and methods of the Jinja subset, with jinja2 / Python semantics.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "runtime/tokenizer/jinja_eval.h"
#include "runtime/tokenizer/jinja_parser.h"
#include "runtime/tokenizer/unicode.h"

namespace kinfer::jinja {
namespace {

const char* const kFilters[] = {"trim", "length", "count", "upper", "lower", "capitalize", "title", "default", "d",
                                "first", "last", "join", "replace", "string", "int", "float", "tojson", "safe",
                                "list", "reverse", "items", "abs", "e", "escape",
                                // jinja_list_filters.cc
                                "select", "reject", "selectattr", "rejectattr", "map", "unique", "sort"};
// jinja2's names, with its aliases: "==" / "eq" / "equalto", "<" / "lt" / "lessthan", ...
const char* const kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
                              "iterable", "sequence", "boolean", "true", "false", "odd", "even", "eq", "equalto",
                              "==", "ne", "!=", "lt", "<", "lessthan", "gt", ">", "greaterthan", "le", "<=", "ge",
                              ">=", "in", "divisibleby", "callable", "sameas", "lower", "upper", "filter", "test"};

bool IsPySpace(uint32_t cp) {
  return (cp >= 0x1C && cp <= 0x1F) || (unicode::CodepointFlags(cp) & unicode::kWhitespace);
}

std::vector<uint32_t> Decode(const std::string& s) {
  std::vector<uint32_t> cpts;
  std::vector<uint32_t> offs;
  unicode::DecodeUtf8(s, &cpts, &offs);
  return cpts;
}

std::string Encode(const std::vector<uint32_t>& cpts, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) unicode::AppendUtf8(cpts[k], &out);
  return out;
}

// Case mapping: ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic basic blocks (Python's
// mappings there, except the context-dependent final sigma on lower()); other code points are
// left unchanged.
uint32_t ToLowerCp(uint32_t c) {
  if ((c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (c == 0x178) return 0xFF;
    if (odd_upper ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}
uint32_t ToUpperCp(uint32_t c) {
  if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c == 0xB5) return 0x39C;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

}  // namespace

std::string MapCase(const std::string& s, bool upper) {
  std::string out;
  for (uint32_t c : Decode(s)) {
    if (upper && c == 0xDF) {  // Python: "\u00df".upper() == "SS"
      out += "SS";
      continue;
    }
    unicode::AppendUtf8(upper ? ToUpperCp(c) : ToLowerCp(c), &out);
  }
  return out;
}

namespace {

bool IsCased(uint32_t c) { return ToLowerCp(c) != c || ToUpperCp(c) != c; }

// Python str.islower() (`upper` false) / str.isupper() (`upper` true): at least one cased
// character and none of the other case.
bool IsAllCase(const std::string& s, bool upper) {
  bool cased = false;
  for (uint32_t c : Decode(s)) {
    const bool is_upper = ToLowerCp(c) != c;
    const bool is_lower = ToUpperCp(c) != c || c == 0xDF;
    if (upper ? is_lower : is_upper) return false;
    cased = cased || is_upper || is_lower;
  }
  return cased;
}

std::string Capitalize(const std::string& s) {
  std::vector<uint32_t> c = Decode(s);
  std::string out;
  for (size_t k = 0; k < c.size(); ++k) unicode::AppendUtf8(k == 0 ? ToUpperCp(c[k]) : ToLowerCp(c[k]), &out);
  return out;
}

std::string Title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t c : Decode(s)) {
    unicode::AppendUtf8(prev_cased ? ToLowerCp(c) : ToUpperCp(c), &out);
    prev_cased = IsCased(c);
  }
  return out;
}

std::string Replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    std::vector<std::string> cps = Codepoints(s);
    int64_t done = 0;
    for (const auto& c : cps) {
      if (count < 0 || done < count) { out += to; ++done; }
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

std::vector<std::string> Split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep == nullptr || sep->kind == Value::Kind::kNone) {
    const std::vector<uint32_t> c = Decode(s);
    size_t k = 0;
    while (k < c.size()) {
      while (k < c.size() && IsPySpace(c[k])) ++k;
      if (k == c.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t end = c.size();
        while (end > k && IsPySpace(c[end - 1])) --end;
        parts.push_back(Encode(c, k, end));
        break;
      }
      const size_t start = k;
      while (k < c.size() && !IsPySpace(c[k])) ++k;
      parts.push_back(Encode(c, start, k));
    }
    return parts;
  }
  const std::string& d = sep->s;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

}  // namespace

const Value* Kwarg(const std::vector<std::pair<std::string, Value>>& kwargs, const char* name) {
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Arg(const std::vector<Value>& args, const std::vector<std::pair<std::string, Value>>& kwargs, size_t i,
                 const char* name) {
  if (i < args.size()) return &args[i];
  return Kwarg(kwargs, name);
}

namespace {

const std::string& RequireString(const Expr& at, const Value& v, const char* what) {
  if (!v.is_string()) ThrowEval(at.line, at.col, std::string(what) + " expects a string, got " + TypeName(v));
  return v.s;
}

int64_t Length(const Expr& at, const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(CodepointCount(v.s));
    case Value::Kind::kList: return static_cast<int64_t>(v.list->size());
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: return static_cast<int64_t>(v.dict->size());
    default: ThrowEval(at.line, at.col, std::string("object of type '") + TypeName(v) + "' has no len()");
  }
}

}  // namespace

ValueList AsList(const Expr& at, const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return *v.list;
    case Value::Kind::kString: {
      ValueList out;
      for (auto& c : Codepoints(v.s)) out.push_back(Value::String(std::move(c)));
      return out;
    }
    case Value::Kind::kDict: {
      ValueList out;
      for (const auto& kv : *v.dict) out.push_back(Value::String(kv.first));
      return out;
    }
    default: ThrowEval(at.line, at.col, std::string("'") + TypeName(v) + "' object is not iterable");
  }
}

namespace {

Value Items(const Value& v) {
  ValueList out;
  if (v.is_mapping()) {
    for (const auto& kv : *v.dict) out.push_back(Value::List({Value::String(kv.first), kv.second}));
  }
  return Value::List(std::move(out));
}

}  // namespace

bool IsSupportedFilter(const std::string& name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}
bool IsSupportedTest(const std::string& name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

size_t CodepointCount(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> Codepoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t k = 0; k < s.size();) {
    const size_t len = std::min(unicode::Utf8SequenceLength(static_cast<uint8_t>(s[k])), s.size() - k);
    out.push_back(s.substr(k, len));
    k += len;
  }
  return out;
}

std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right) {
  const std::vector<uint32_t> c = Decode(s);
  std::vector<uint32_t> set;
  if (chars) set = Decode(*chars);
  auto strip = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : IsPySpace(cp);
  };
  size_t begin = 0, end = c.size();
  if (left) while (begin < end && strip(c[begin])) ++begin;
  if (right) while (end > begin && strip(c[end - 1])) --end;
  return Encode(c, begin, end);
}

Value ApplyFilter(const Expr& at, const std::string& name, const Value& v, const std::vector<Value>& args,
                  const std::vector<std::pair<std::string, Value>>& kwargs) {
  Value listed;
  if (ApplyListFilter(at, name, v, args, kwargs, &listed)) return listed;
  if (name == "trim") {
    const Value* chars = Arg(args, kwargs, 0, "chars");
    const bool has = chars && chars->is_string();
    return Value::String(PyStrip(ToStr(v), has ? &chars->s : nullptr, true, true));
  }
  if (name == "length" || name == "count") return Value::Int(Length(at, v));
  if (name == "upper") return Value::String(MapCase(ToStr(v), true));
  if (name == "lower") return Value::String(MapCase(ToStr(v), false));
  if (name == "capitalize") return Value::String(Capitalize(ToStr(v)));
  if (name == "title") return Value::String(Title(ToStr(v)));
  if (name == "default" || name == "d") {
    const Value* dflt = Arg(args, kwargs, 0, "default_value");
    const Value* boolean = Arg(args, kwargs, 1, "boolean");
    const bool use = v.is_undefined() || (boolean && boolean->Truthy() && !v.Truthy());
    return use ? (dflt ? *dflt : Value::String("")) : v;
  }
  if (name == "first" || name == "last") {
    const ValueList items = AsList(at, v);
    if (items.empty()) return Value::Undefined("first/last of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const Value* sep = Arg(args, kwargs, 0, "d");
    const Value* attribute = Arg(args, kwargs, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : AsList(at, v)) {
      if (!first && sep) out += ToStr(*sep);
      first = false;
      if (attribute && attribute->is_string()) {
        const Value* f = item.Find(attribute->s);
        out += f ? ToStr(*f) : "";
      } else {
        out += ToStr(item);
      }
    }
    return Value::String(std::move(out));
  }
  if (name == "replace") {
    if (args.size() < 2) ThrowEval(at.line, at.col, "replace needs two arguments");
    const Value* count = Arg(args, kwargs, 2, "count");
    return Value::String(Replace(ToStr(v), ToStr(args[0]), ToStr(args[1]),
                                 count && count->kind == Value::Kind::kInt ? count->i : -1));
  }
  if (name == "string" || name == "safe" || name == "e" || name == "escape") {
    // Autoescape is off (as in llama-cpp-python), so escape leaves text unchanged there too.
    return v.is_string() ? v : Value::String(ToStr(v));
  }
  if (name == "int") {
    if (v.kind == Value::Kind::kInt) return v;
    if (v.kind == Value::Kind::kBool) return Value::Int(v.b);
    if (v.kind == Value::Kind::kFloat) return Value::Int(static_cast<int64_t>(v.f));
    if (v.is_string()) {
      const std::string t = PyStrip(v.s, nullptr, true, true);
      char* end = nullptr;
      const long long x = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && end && *end == '\0') return Value::Int(x);
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end && *end == '\0') return Value::Int(static_cast<int64_t>(d));
    }
    const Value* dflt = Arg(args, kwargs, 0, "default");
    return dflt ? *dflt : Value::Int(0);
  }
  if (name == "float") {
    if (v.is_number()) return Value::Float(v.AsDouble());
    if (v.is_string()) {
      char* end = nullptr;
      const std::string t = PyStrip(v.s, nullptr, true, true);
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end && *end == '\0') return Value::Float(d);
    }
    const Value* dflt = Arg(args, kwargs, 0, "default");
    return dflt ? *dflt : Value::Float(0);
  }
  if (name == "tojson") {
    const Value* indent = Arg(args, kwargs, 0, "indent");
    const Value* sort_keys = Kwarg(kwargs, "sort_keys");
    return Value::String(ToJson(v, indent && indent->kind == Value::Kind::kInt ? static_cast<int>(indent->i) : -1,
                                sort_keys && sort_keys->Truthy()));
  }
  if (name == "list") return Value::List(AsList(at, v));
  if (name == "reverse") {
    if (v.is_string()) {
      std::vector<std::string> cps = Codepoints(v.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::String(std::move(out));
    }
    ValueList items = AsList(at, v);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "items") return Items(v);
  if (name == "abs") {
    if (v.kind == Value::Kind::kFloat) return Value::Float(std::fabs(v.f));
    if (v.is_number()) return Value::Int(std::llabs(v.kind == Value::Kind::kBool ? v.b : v.i));
    ThrowEval(at.line, at.col, std::string("bad operand type for abs(): ") + TypeName(v));
  }
  ThrowEval(at.line, at.col, "unsupported filter '" + name + "'");
}

bool ApplyTest(const Expr& at, const std::string& name, const Value& v, const std::vector<Value>& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.kind == K::kNone;
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.kind == K::kDict;
  if (name == "iterable") return v.kind == K::kList || v.kind == K::kDict || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.kind == K::kList || v.kind == K::kDict || v.is_string() || v.is_undefined();
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "lower" || name == "upper") return IsAllCase(ToStr(v), name == "upper");
  if (name == "filter") return v.is_string() && IsSupportedFilter(v.s);
  if (name == "test") return v.is_string() && IsSupportedTest(v.s);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind != K::kInt && v.kind != K::kBool) ThrowEval(at.line, at.col, "'" + name + "' test needs an integer");
    const int64_t x = v.kind == K::kBool ? v.b : v.i;
    if (name == "odd") return x % 2 != 0;
    if (name == "even") return x % 2 == 0;
    if (args.empty() || args[0].kind != K::kInt || args[0].i == 0) ThrowEval(at.line, at.col, "divisibleby needs a non-zero integer");
    return x % args[0].i == 0;
  }
  if (args.empty()) ThrowEval(at.line, at.col, "test '" + name + "' needs an argument");
  const Value& o = args[0];
  if (name == "eq" || name == "equalto" || name == "==") return Equals(v, o);
  if (name == "ne" || name == "!=") return !Equals(v, o);
  if (name == "sameas") {
    // Python's `is`, as far as values here have identity: None and booleans are singletons,
    // lists and dicts are shared objects; other values are taken as identical when equal.
    if (v.kind != o.kind) return false;
    if (v.kind == K::kList) return v.list == o.list;
    if (v.is_mapping()) return v.dict == o.dict;
    return Equals(v, o);
  }
  if (name == "in") {
    if (o.is_string() && v.is_string()) return o.s.find(v.s) != std::string::npos;
    if (o.kind == K::kList) return std::any_of(o.list->begin(), o.list->end(), [&](const Value& x) { return Equals(v, x); });
    if (o.is_mapping()) return v.is_string() && o.Find(v.s) != nullptr;
    return false;
  }
  bool ok = true;
  bool r = false;
  if (name == "lt" || name == "<" || name == "lessthan") r = Less(v, o, &ok);
  else if (name == "gt" || name == ">" || name == "greaterthan") r = Less(o, v, &ok);
  else if (name == "le" || name == "<=") r = !Less(o, v, &ok);
  else if (name == "ge" || name == ">=") r = !Less(v, o, &ok);
  if (!ok) ThrowEval(at.line, at.col, "cannot compare " + std::string(TypeName(v)) + " and " + TypeName(o));
  return r;
}

bool CallMethod(const Expr& at, const Value& v, const std::string& name, const std::vector<Value>& args,
                const std::vector<std::pair<std::string, Value>>& kwargs, Value* result) {
  if (v.is_string()) {
    const std::string& s = v.s;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = Arg(args, kwargs, 0, "chars");
      const bool has = chars && chars->is_string();
      *result = Value::String(PyStrip(s, has ? &chars->s : nullptr, name != "rstrip", name != "lstrip"));
      return true;
    }
    if (name == "startswith" || name == "endswith") {
      if (args.empty()) ThrowEval(at.line, at.col, name + "() needs an argument");
      std::vector<std::string> options;
      if (args[0].kind == Value::Kind::kList) {
        for (const Value& x : *args[0].list) options.push_back(RequireString(at, x, name.c_str()));
      } else {
        options.push_back(RequireString(at, args[0], name.c_str()));
      }
      bool hit = false;
      for (const std::string& o : options) {
        hit = hit || (o.size() <= s.size() &&
                      (name == "startswith" ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0));
      }
      *result = Value::Bool(hit);
      return true;
    }
    if (name == "upper" || name == "lower") {
      *result = Value::String(MapCase(s, name == "upper"));
      return true;
    }
    if (name == "capitalize") { *result = Value::String(Capitalize(s)); return true; }
    if (name == "title") { *result = Value::String(Title(s)); return true; }
    if (name == "split") {
      const Value* sep = Arg(args, kwargs, 0, "sep");
      const Value* maxsplit = Arg(args, kwargs, 1, "maxsplit");
      if (sep && sep->is_string() && sep->s.empty()) ThrowEval(at.line, at.col, "empty separator");
      ValueList parts;
      for (auto& p : Split(s, sep, maxsplit && maxsplit->kind == Value::Kind::kInt ? maxsplit->i : -1)) {
        parts.push_back(Value::String(std::move(p)));
      }
      *result = Value::List(std::move(parts));
      return true;
    }
    if (name == "replace") {
      if (args.size() < 2) ThrowEval(at.line, at.col, "replace() needs two arguments");
      *result = Value::String(Replace(s, RequireString(at, args[0], "replace"), RequireString(at, args[1], "replace"),
                                      args.size() > 2 && args[2].kind == Value::Kind::kInt ? args[2].i : -1));
      return true;
    }
    return false;
  }
  if (v.is_mapping()) {
    if (name == "items") { *result = Items(v); return true; }
    if (name == "keys" || name == "values") {
      ValueList out;
      for (const auto& kv : *v.dict) out.push_back(name == "keys" ? Value::String(kv.first) : kv.second);
      *result = Value::List(std::move(out));
      return true;
    }
    if (name == "get") {
      if (args.empty()) ThrowEval(at.line, at.col, "get() needs a key");
      const Value* found = args[0].is_string() ? v.Find(args[0].s) : nullptr;
      *result = found ? *found : (args.size() > 1 ? args[1] : Value::None());
      return true;
    }
  }
  return false;
}

}  // namespace kinfer::jinja
