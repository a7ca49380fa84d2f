// Values of the Jinja subset, with Python semantics where the output depends on them: str()
// and repr() spelling, truthiness, equality (1 == 1.0 == True) and ordering.
//
// Lists, dicts and namespaces are shared by reference (as Python objects); only namespaces are
// mutable from templates ({% set ns.x = ... %}).
//
// Thread safety: a Value is not synchronized; each render owns its values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kinfer::jinja {

struct Value;
using ValueList = std::vector<Value>;
using ValueDict = std::vector<std::pair<std::string, Value>>;  // insertion order, string keys

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // kString: the text; kUndefined: the missing name; kFunction: its name
  std::shared_ptr<ValueList> list;
  std::shared_ptr<ValueDict> dict;  // kDict and kNamespace

  static Value Undefined(std::string name = "") { Value v; v.s = std::move(name); return v; }
  static Value None() { Value v; v.kind = Kind::kNone; return v; }
  static Value Bool(bool x) { Value v; v.kind = Kind::kBool; v.b = x; return v; }
  static Value Int(int64_t x) { Value v; v.kind = Kind::kInt; v.i = x; return v; }
  static Value Float(double x) { Value v; v.kind = Kind::kFloat; v.f = x; return v; }
  static Value String(std::string x) { Value v; v.kind = Kind::kString; v.s = std::move(x); return v; }
  static Value List(ValueList items = {}) {
    Value v; v.kind = Kind::kList; v.list = std::make_shared<ValueList>(std::move(items)); return v;
  }
  static Value Dict(ValueDict items = {}) {
    Value v; v.kind = Kind::kDict; v.dict = std::make_shared<ValueDict>(std::move(items)); return v;
  }
  static Value Namespace(ValueDict items = {}) {
    Value v = Dict(std::move(items)); v.kind = Kind::kNamespace; return v;
  }
  static Value Function(std::string name) { Value v; v.kind = Kind::kFunction; v.s = std::move(name); return v; }

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_mapping() const { return kind == Kind::kDict || kind == Kind::kNamespace; }

  // Python truthiness (undefined is false).
  bool Truthy() const;
  // Key lookup in a dict or namespace; nullptr when absent or not a mapping.
  const Value* Find(const std::string& key) const;
  // Number as a double (bool and int included). REQUIRES: is_number().
  double AsDouble() const { return kind == Kind::kFloat ? f : kind == Kind::kInt ? static_cast<double>(i) : b; }
};

// str(value) as jinja2 prints it: strings as is, None as "None", True/False, floats like repr,
// lists and dicts like Python repr; undefined prints as "".
std::string ToStr(const Value& v);
// Python repr().
std::string Repr(const Value& v);
// json.dumps(v, ensure_ascii=False) with optional indent (< 0: none) and sort_keys.
std::string ToJson(const Value& v, int indent, bool sort_keys);
// Python ==.
bool Equals(const Value& a, const Value& b);
// Python <: numbers with numbers, strings with strings, lists element-wise. Returns false and
// sets *ok = false for incomparable types.
bool Less(const Value& a, const Value& b, bool* ok);
// Name of the value's type for error messages ("str", "int", "list", ...).
const char* TypeName(const Value& v);

}  // namespace kinfer::jinja
