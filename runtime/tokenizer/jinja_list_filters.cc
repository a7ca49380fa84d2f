// The collection filters of jinja2 (select, reject, selectattr, rejectattr, map, unique, sort),
// with its semantics: select/reject/map give nothing for a false subject (none, undefined,
// empty); attributes are jinja2's attribute paths ("a.b.0": dict keys, list indexes for digits);
// unique and sort compare strings case-insensitively unless case_sensitive=true; sort is stable,
// also reversed.
//
// jinja2 returns generators from select, reject, map and unique; these return lists, which
// behave the same under list, join, first, length, for, and print as lists rather than
// "<generator object ...>".
#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "runtime/tokenizer/jinja_eval.h"
#include "runtime/tokenizer/jinja_parser.h"

namespace kinfer::jinja {
namespace {

using Kwargs = std::vector<std::pair<std::string, Value>>;

[[noreturn]] void Fail(const Expr& at, const std::string& what) { ThrowEval(at.line, at.col, what); }

bool AllDigits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

// One step of jinja2's attribute path: an integer part indexes a list or string, another part
// looks up a dict key. Missing is undefined.
Value Step(const Value& obj, const std::string& part) {
  if (AllDigits(part)) {
    const size_t idx = std::strtoull(part.c_str(), nullptr, 10);
    if (obj.kind == Value::Kind::kList && idx < obj.list->size()) return (*obj.list)[idx];
    if (obj.is_string()) {
      std::vector<std::string> cps = Codepoints(obj.s);
      if (idx < cps.size()) return Value::String(cps[idx]);
    }
  } else if (const Value* v = obj.Find(part)) {
    return *v;
  }
  return Value::Undefined(std::string(TypeName(obj)) + " object has no attribute " + part);
}

// jinja2's make_attrgetter: follows the dotted `path`; a step from an undefined value is an
// error (as jinja2's getitem on Undefined raises UndefinedError).
Value GetAttribute(const Expr& at, const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    if (cur.is_undefined()) {
      std::string what = "'";
      what += cur.s.empty() ? "value" : cur.s;
      Fail(at, what + "' is undefined");
    }
    cur = Step(cur, path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

const std::string& StringArg(const Expr& at, const Value* v, const std::string& filter, const char* what) {
  if (v == nullptr || !v->is_string()) Fail(at, filter + " expects " + what + " as a string");
  return v->s;
}

// jinja2's ignore_case: strings lower-cased, other values as they are.
Value IgnoreCase(Value v) {
  if (v.is_string()) v.s = MapCase(v.s, false);
  return v;
}

// select / reject (by_attr false) and selectattr / rejectattr (by_attr true).
Value SelectOrReject(const Expr& at, const std::string& name, const Value& v, const std::vector<Value>& args,
                     bool keep, bool by_attr) {
  ValueList out;
  if (!v.Truthy()) return Value::List();
  size_t next = 0;
  std::string attribute;
  if (by_attr) attribute = StringArg(at, args.empty() ? nullptr : &args[0], name, "an attribute");
  if (by_attr) ++next;
  std::string test;
  if (next < args.size()) {
    test = StringArg(at, &args[next], name, "a test name");
    if (!IsSupportedTest(test)) Fail(at, "no test named '" + test + "'");
    ++next;
  }
  const std::vector<Value> test_args(args.begin() + static_cast<std::ptrdiff_t>(next), args.end());
  for (const Value& item : AsList(at, v)) {
    const Value subject = by_attr ? GetAttribute(at, item, attribute) : item;
    const bool pass = test.empty() ? subject.Truthy() : ApplyTest(at, test, subject, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}

// map(attribute='a.b', default=x) or map('filter', args..., kwargs...).
Value Map(const Expr& at, const Value& v, const std::vector<Value>& args, const Kwargs& kwargs) {
  ValueList out;
  if (!v.Truthy()) return Value::List();
  const Value* attribute = Kwarg(kwargs, "attribute");
  if (args.empty() && attribute != nullptr) {
    const std::string& path = StringArg(at, attribute, "map", "attribute=");
    const Value* dflt = Kwarg(kwargs, "default");
    for (const Value& item : AsList(at, v)) {
      Value got = GetAttribute(at, item, path);
      out.push_back(got.is_undefined() && dflt != nullptr ? *dflt : std::move(got));
    }
    return Value::List(std::move(out));
  }
  const std::string& filter = StringArg(at, args.empty() ? nullptr : &args[0], "map", "a filter name or attribute=");
  if (!IsSupportedFilter(filter)) Fail(at, "no filter named '" + filter + "'");
  const std::vector<Value> rest(args.begin() + 1, args.end());
  for (const Value& item : AsList(at, v)) out.push_back(ApplyFilter(at, filter, item, rest, kwargs));
  return Value::List(std::move(out));
}

Value Unique(const Expr& at, const Value& v, const std::vector<Value>& args, const Kwargs& kwargs) {
  const Value* case_sensitive = Arg(args, kwargs, 0, "case_sensitive");
  const Value* attribute = Arg(args, kwargs, 1, "attribute");
  const bool fold = case_sensitive == nullptr || !case_sensitive->Truthy();
  if (v.kind == Value::Kind::kNone) Fail(at, "'NoneType' object is not iterable");
  ValueList out;
  ValueList seen;
  for (const Value& item : AsList(at, v)) {
    Value key = attribute != nullptr && attribute->kind != Value::Kind::kNone
                    ? GetAttribute(at, item, StringArg(at, attribute, "unique", "attribute="))
                    : item;
    if (fold) key = IgnoreCase(std::move(key));
    if (key.kind == Value::Kind::kList || key.is_mapping()) {
      Fail(at, std::string("unhashable type: '") + TypeName(key) + "'");
    }
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::List(std::move(out));
}

// jinja2's make_multi_attrgetter: the key of each item is the list of its comma-separated
// attributes (the item itself without attribute=), compared as Python compares lists.
Value Sort(const Expr& at, const Value& v, const std::vector<Value>& args, const Kwargs& kwargs) {
  const Value* reverse = Arg(args, kwargs, 0, "reverse");
  const Value* case_sensitive = Arg(args, kwargs, 1, "case_sensitive");
  const Value* attribute = Arg(args, kwargs, 2, "attribute");
  const bool descending = reverse != nullptr && reverse->Truthy();
  const bool fold = case_sensitive == nullptr || !case_sensitive->Truthy();
  if (v.kind == Value::Kind::kNone) Fail(at, "'NoneType' object is not iterable");
  std::vector<std::string> paths;
  if (attribute != nullptr && attribute->kind != Value::Kind::kNone) {
    const std::string& spec = StringArg(at, attribute, "sort", "attribute=");
    for (size_t start = 0;;) {
      const size_t comma = spec.find(',', start);
      paths.push_back(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  const ValueList items = AsList(at, v);
  std::vector<std::pair<Value, size_t>> keyed;  // (key, index into items)
  keyed.reserve(items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    ValueList key;
    if (paths.empty()) key.push_back(fold ? IgnoreCase(items[k]) : items[k]);
    for (const std::string& p : paths) {
      Value part = GetAttribute(at, items[k], p);
      key.push_back(fold ? IgnoreCase(std::move(part)) : std::move(part));
    }
    keyed.emplace_back(Value::List(std::move(key)), k);
  }
  // Python's sorted(reverse=True) keeps equal items in their order, as this does.
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    bool ok = true;
    const bool less = descending ? Less(b.first, a.first, &ok) : Less(a.first, b.first, &ok);
    if (!ok) Fail(at, "sort cannot compare these items (" + Repr(a.first) + ", " + Repr(b.first) + ")");
    return less;
  });
  ValueList out;
  out.reserve(items.size());
  for (const auto& [key, k] : keyed) out.push_back(items[k]);
  return Value::List(std::move(out));
}

}  // namespace

bool ApplyListFilter(const Expr& at, const std::string& name, const Value& v, const std::vector<Value>& args,
                     const Kwargs& kwargs, Value* result) {
  if (name == "select" || name == "reject") {
    *result = SelectOrReject(at, name, v, args, name == "select", false);
  } else if (name == "selectattr" || name == "rejectattr") {
    *result = SelectOrReject(at, name, v, args, name == "selectattr", true);
  } else if (name == "map") {
    *result = Map(at, v, args, kwargs);
  } else if (name == "unique") {
    *result = Unique(at, v, args, kwargs);
  } else if (name == "sort") {
    *result = Sort(at, v, args, kwargs);
  } else {
    return false;
  }
  return true;
}

}  // namespace kinfer::jinja
