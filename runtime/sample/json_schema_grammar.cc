#include "runtime/sample/json_schema_grammar.h"

#include "runtime/sample/regex_grammar.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace kinfer {
namespace {

using ojson = nlohmann::ordered_json;
using Seq = GrammarBuilder::Sequence;
using Sym = GrammarBuilder::Symbol;

constexpr int kIntDigits = 16;
constexpr int kFracDigits = 16;
constexpr int kExpDigits = 2;  // so every number parses as a double (1e99 at most)

// The string formats OpenAI's Structured Outputs enforce, as regular expressions the whole decoded
// string must match. Each accepts only text pydantic v2 accepts for the matching type (datetime,
// date, time, timedelta, UUID, IPv4Address, IPv6Address), a subset of it: RFC 3339 / ISO 8601 in
// their usual form. Known gaps (docs/api.md): hostname and email lengths are per label only, and
// email-validator (pydantic's EmailStr) also refuses special-use domains such as `.local`.
std::string FormatRegex(const std::string& format) {
  static const std::map<std::string, std::string> k = [] {
    const std::string year = "(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})";
    const std::string leap =
        "([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)";
    // Days held to the month's length, February 29 to leap years (year 0000 is outside Python's).
    const std::string date = "(" + year +
                             "-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12]"
                             "[0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|" +
                             leap + "-02-29)";
    // No leap second: Python's time has none.
    const std::string hms = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?";
    const std::string offset = "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    // ISO 8601 durations in order, at least one component; digit counts keep the largest
    // (P999999Y999M9999W999999DT99999H99999M999999999.999999999S) within what pydantic parses:
    // timedelta's 999999999 days, and the T part's seconds within 2^32. A fraction on seconds only.
    const std::string sec = "[0-9]{1,9}(\\.[0-9]{1,9})?S";
    const std::string time_part =
        "T([0-9]{1,5}H([0-9]{1,5}M)?(" + sec + ")?|[0-9]{1,5}M(" + sec + ")?|" + sec + ")";
    const std::string date_part =
        "([0-9]{1,6}Y([0-9]{1,3}M)?([0-9]{1,4}W)?([0-9]{1,6}D)?|[0-9]{1,3}M([0-9]{1,4}W)?([0-9]{1,"
        "6}D)?|[0-9]{1,4}W([0-9]{1,6}D)?|[0-9]{1,6}D)";
    const std::string h = "[0-9a-fA-F]{1,4}";
    const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    const std::string label = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?";
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    return std::map<std::string, std::string>{
        {"date", date},
        {"time", hms + offset + "?"},
        {"date-time", date + "T" + hms + offset},
        {"duration", "-?P(" + date_part + "(" + time_part + ")?|" + time_part + ")"},
        {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
        {"ipv4", octet + "(\\." + octet + "){3}"},
        // RFC 4291's text forms, full and with "::"; no embedded IPv4, no zone.
        {"ipv6", "((" + h + ":){7}" + h + "|(" + h + ":){1,7}:|(" + h + ":){1,6}:" + h + "|(" + h +
                     ":){1,5}(:" + h + "){1,2}|(" + h + ":){1,4}(:" + h + "){1,3}|(" + h +
                     ":){1,3}(:" + h + "){1,4}|(" + h + ":){1,2}(:" + h + "){1,5}|" + h +
                     ":(:" + h + "){1,6}|:((:" + h + "){1,7}|:))"},
        {"hostname", label + "(\\." + label + ")*"},
        {"email",
         atom + "(\\." + atom + ")*@(" + label + "\\.)+[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"},
    };
  }();
  const auto it = k.find(format);
  return it == k.end() ? std::string() : "^(" + it->second + ")$";
}

// Keywords that assert something this compiler cannot enforce: refused rather than ignored.
const std::set<std::string>& Unsupported() {
  static const std::set<std::string> k = {"patternProperties",
                                          "multipleOf",
                                          "not",
                                          "if",
                                          "then",
                                          "else",
                                          "dependentRequired",
                                          "dependentSchemas",
                                          "dependencies",
                                          "propertyNames",
                                          "contains",
                                          "minContains",
                                          "maxContains",
                                          "minProperties",
                                          "maxProperties",
                                          "unevaluatedProperties",
                                          "unevaluatedItems",
                                          "$dynamicRef",
                                          "$recursiveRef"};
  return k;
}

class Compiler {
 public:
  Compiler() = default;

  StatusOr<std::shared_ptr<const Grammar>> Run(const ojson& schema) {
    int32_t value = -1;
    KINFER_RETURN_IF_ERROR(Document(schema, "", &value));
    return Finish(value);
  }

  // {"tool_calls": [{"name": ..., "arguments": {...}}, ...]} with each tool's own parameters
  // schema, or (with `may_answer`) {"response": "..."}.
  StatusOr<std::shared_ptr<const Grammar>> RunTools(const std::vector<ToolSchema>& tools,
                                                    bool may_answer, bool parallel,
                                                    const ToolSchema* response_schema) {
    if (tools.empty()) return InvalidArgument("no tools to call");
    std::vector<Seq> calls;
    for (size_t i = 0; i < tools.size(); ++i) {
      int32_t args = -1;
      std::string scope = std::to_string(i);  // (appended: GCC 12 warns falsely on "t" + ...)
      scope += ':';
      Status st = Document(*tools[i].parameters, scope, &args);
      if (!st.ok()) return InvalidArgument(tools[i].param + ": " + st.message());
      Seq s{b_.Byte('{'), Ws()};
      Member("name", &s);
      b_.AppendLiteral(ojson(tools[i].name).dump(), &s);
      for (const Sym& x : {Ws(), b_.Byte(','), Ws()}) s.push_back(x);
      Member("arguments", &s);
      for (const Sym& x : {GrammarBuilder::Ref(args), Ws(), b_.Byte('}')}) s.push_back(x);
      calls.push_back(s);
    }
    const Sym call = GrammarBuilder::Ref(b_.Rule(calls));
    // [call] or [call, call, ...]
    const int32_t more = b_.NewRule();
    b_.AddAlternative(more, {});
    if (parallel) {
      b_.AddAlternative(more, {b_.Byte(','), Ws(), call, Ws(), GrammarBuilder::Ref(more)});
    }
    Seq tc{b_.Byte('{'), Ws()};
    Member("tool_calls", &tc);
    for (const Sym& x : {b_.Byte('['), Ws(), call, Ws(), GrammarBuilder::Ref(more), b_.Byte(']'),
                         Ws(), b_.Byte('}')}) {
      tc.push_back(x);
    }
    std::vector<Seq> alts{tc};
    if (may_answer) {
      Seq answer{b_.Byte('{'), Ws()};
      Member("response", &answer);
      Sym value = String();
      if (response_schema != nullptr) {
        int32_t v = -1;
        Status st = Document(*response_schema->parameters, "response:", &v);
        if (!st.ok()) return InvalidArgument(response_schema->param + ": " + st.message());
        value = GrammarBuilder::Ref(v);
      }
      for (const Sym& x : {value, Ws(), b_.Byte('}')}) answer.push_back(x);
      alts.push_back(answer);
    }
    return Finish(b_.Rule(alts));
  }

 private:
  // The value rule of a whole schema document; its $refs resolve inside it (`scope` keeps the
  // refs of several documents in one grammar apart).
  Status Document(const ojson& schema, const std::string& scope, int32_t* value) {
    root_ = &schema;
    scope_ = scope;
    return Value(schema, "#", value);
  }
  // `"key"` ws `:` ws
  void Member(std::string_view key, Seq* s) {
    b_.AppendLiteral(ojson(std::string(key)).dump(), s);
    for (const Sym& x : {Ws(), b_.Byte(':'), Ws()}) s->push_back(x);
  }
  StatusOr<std::shared_ptr<const Grammar>> Finish(int32_t value) {
    const int32_t top = b_.Rule({{Ws(), GrammarBuilder::Ref(value)}});
    KINFER_RETURN_IF_ERROR(CheckSize());
    auto g = b_.Build(top);
    if (GrammarRecognizer(g, value).dead()) {
      return InvalidArgument("json_schema: the schema matches no JSON text");
    }
    return g;
  }

  Status Error(const std::string& where, const std::string& what) {
    return InvalidArgument("json_schema: " + what + " (at " + where + ")");
  }
  Status CheckSize() {
    if (b_.num_elements() > kMaxSchemaGrammarElements) {
      return InvalidArgument("json_schema: the schema is too large (its grammar passes " +
                             std::to_string(kMaxSchemaGrammarElements) + " symbols)");
    }
    return Status::Ok();
  }

  // ---- shared pieces, built on first use --------------------------------------------------

  // Whitespace between tokens, as llama.cpp's JSON grammars allow it: nothing, one space, or
  // one newline and up to kSchemaMaxWhitespaceRun spaces or tabs of indentation. (Free
  // whitespace lets a small model pad "\n\n,\n\n" between every token.)
  Sym Ws() {
    if (ws_ < 0) {
      const int32_t indent = UpTo(b_.Range({{' ', ' '}, {'\t', '\t'}}), kSchemaMaxWhitespaceRun);
      ws_ = b_.Rule({{}, {b_.Byte(' ')}, {b_.Byte('\n'), GrammarBuilder::Ref(indent)}});
    }
    return GrammarBuilder::Ref(ws_);
  }
  Sym Hex() { return b_.Range({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); }
  Sym Escape() {  // after a backslash
    if (escape_ < 0) {
      escape_ = b_.Rule({{b_.Range({{'"', '"'},
                                    {'\\', '\\'},
                                    {'/', '/'},
                                    {'b', 'b'},
                                    {'f', 'f'},
                                    {'n', 'n'},
                                    {'r', 'r'},
                                    {'t', 't'}})},
                         // \uXXXX outside the surrogates, or a high surrogate with its low
                         // one: a lone surrogate is no character (pydantic, and so the openai
                         // client's parse(), refuse the text).
                         {b_.Byte('u'), b_.Range({{'0', '9'}, {'A', 'C'}, {'a', 'c'}, {'E', 'F'},
                                                  {'e', 'f'}}),
                          Hex(), Hex(), Hex()},
                         {b_.Byte('u'), b_.Range({{'D', 'D'}, {'d', 'd'}}),
                          b_.Range({{'0', '7'}}), Hex(), Hex()},
                         {b_.Byte('u'), b_.Range({{'D', 'D'}, {'d', 'd'}}),
                          b_.Range({{'8', '9'}, {'A', 'B'}, {'a', 'b'}}), Hex(), Hex(),
                          b_.Byte('\\'), b_.Byte('u'), b_.Range({{'D', 'D'}, {'d', 'd'}}),
                          b_.Range({{'C', 'F'}, {'c', 'f'}}), Hex(), Hex()}});
    }
    return GrammarBuilder::Ref(escape_);
  }
  Sym String() {  // any JSON string
    if (string_ < 0) {
      const int32_t body = b_.NewRule();
      b_.AddAlternative(body, {});
      b_.AddAlternative(body, {CodePoint(), GrammarBuilder::Ref(body)});
      string_ = b_.Rule({{b_.Byte('"'), GrammarBuilder::Ref(body), b_.Byte('"')}});
    }
    return GrammarBuilder::Ref(string_);
  }
  // One character of a string: a code point as well-formed UTF-8 (RFC 3629: no overlong forms,
  // no surrogates), or an escape.
  Sym CodePoint() {
    if (code_point_ < 0) {
      code_point_ = b_.Rule({{b_.PlainStringByte()}, {NonAsciiOrEscape()}});
    }
    return GrammarBuilder::Ref(code_point_);
  }
  // The well-formed multi-byte UTF-8 sequences (no surrogates, no overlongs), one per lead range.
  std::vector<Seq> MultiByteCharacters() {
    const Sym cont = b_.Range({{0x80, 0xBF}});
    return {{b_.Range({{0xC2, 0xDF}}), cont},
            {b_.Byte(0xE0), b_.Range({{0xA0, 0xBF}}), cont},
            {b_.Range({{0xE1, 0xEC}, {0xEE, 0xEF}}), cont, cont},
            {b_.Byte(0xED), b_.Range({{0x80, 0x9F}}), cont},
            {b_.Byte(0xF0), b_.Range({{0x90, 0xBF}}), cont, cont},
            {b_.Range({{0xF1, 0xF3}}), cont, cont, cont},
            {b_.Byte(0xF4), b_.Range({{0x80, 0x8F}}), cont, cont}};
  }
  Sym NonAsciiOrEscape() {
    if (non_ascii_ < 0) {
      std::vector<Seq> alts = MultiByteCharacters();
      alts.push_back({b_.Byte('\\'), Escape()});
      non_ascii_ = b_.Rule(alts);
    }
    return GrammarBuilder::Ref(non_ascii_);
  }
  // A string other than the JSON strings `names` (written as a compact serializer writes them):
  // an object's other keys, beside its declared ones. A trie of the names' characters as written
  // (an escape such as \n or \u00e9, or a multi-byte UTF-8 character, is one step: the trie never
  // branches inside one, so the text stays JSON): at each node, a character of a name follows it,
  // any other character leaves the names behind, and the closing quote ends the key unless a
  // name ends there. (A name spelled with an escape that the serializer does not use is not
  // recognised as that name.)
  Sym KeyOtherThan(const std::vector<std::string>& names) {
    if (names.empty()) return String();
    std::vector<std::vector<std::string>> inner;  // each name's characters between the quotes
    for (const std::string& n : names) {
      const std::string q = ojson(n).dump();
      inner.push_back(WrittenCharacters(q.substr(1, q.size() - 2)));
    }
    return GrammarBuilder::Ref(b_.Rule({{b_.Byte('"'), GrammarBuilder::Ref(TrieRule(inner, {}))}}));
  }
  // The characters of a string's JSON text (between its quotes), each as its bytes.
  static std::vector<std::string> WrittenCharacters(const std::string& text) {
    std::vector<std::string> out;
    for (size_t i = 0; i < text.size();) {
      const auto c = static_cast<uint8_t>(text[i]);
      size_t len = 1;
      if (c == '\\') {
        len = i + 1 < text.size() && text[i + 1] == 'u' ? 6 : 2;
      } else if (c >= 0xF0) {
        len = 4;
      } else if (c >= 0xE0) {
        len = 3;
      } else if (c >= 0xC0) {
        len = 2;
      }
      len = std::min(len, text.size() - i);
      out.push_back(text.substr(i, len));
      i += len;
    }
    return out;
  }
  // In an other key, each character has one spelling, the serializer's (raw UTF-8; \" \\ \b \f
  // \n \r \t; \u00xx in lowercase for the other control characters): spelled another way
  // (\u0061 for "a", \u00e9 for "é", \u000a for a newline) a declared name would pass as an
  // other key, and the object would hold it twice.
  Sym KeyNonAsciiOrEscape() {
    if (key_non_ascii_ < 0) {
      const Sym u = b_.Byte('u');
      std::vector<Seq> alts = MultiByteCharacters();
      alts.push_back({b_.Byte('\\'), b_.Range({{'"', '"'}, {'\\', '\\'}, {'b', 'b'}, {'f', 'f'},
                                                {'n', 'n'}, {'r', 'r'}, {'t', 't'}})});
      alts.push_back({b_.Byte('\\'), u, b_.Byte('0'), b_.Byte('0'), b_.Byte('0'),
                      b_.Range({{'0', '7'}, {'b', 'b'}, {'e', 'f'}})});
      alts.push_back({b_.Byte('\\'), u, b_.Byte('0'), b_.Byte('0'), b_.Byte('1'),
                      b_.Range({{'0', '9'}, {'a', 'f'}})});
      key_non_ascii_ = b_.Rule(alts);
    }
    return GrammarBuilder::Ref(key_non_ascii_);
  }
  Sym KeyCodePoint() {
    if (key_code_point_ < 0) {
      key_code_point_ = b_.Rule({{b_.PlainStringByte()}, {KeyNonAsciiOrEscape()}});
    }
    return GrammarBuilder::Ref(key_code_point_);
  }
  Sym RestOfString() {  // the rest of an other key, its closing quote included
    if (rest_of_string_ < 0) {
      rest_of_string_ = b_.NewRule();
      b_.AddAlternative(rest_of_string_, {b_.Byte('"')});
      b_.AddAlternative(rest_of_string_, {KeyCodePoint(), GrammarBuilder::Ref(rest_of_string_)});
    }
    return GrammarBuilder::Ref(rest_of_string_);
  }
  int32_t TrieRule(const std::vector<std::vector<std::string>>& names,
                   const std::vector<std::string>& prefix) {
    std::set<std::string> next;
    bool ends_here = false;
    for (const std::vector<std::string>& n : names) {
      if (n.size() > prefix.size() && std::equal(prefix.begin(), prefix.end(), n.begin())) {
        next.insert(n[prefix.size()]);
      } else if (n == prefix) {
        ends_here = true;
      }
    }
    const int32_t r = b_.NewRule();
    if (!ends_here) b_.AddAlternative(r, {b_.Byte('"')});
    Grammar::ByteSet other{};  // the one-byte characters that leave every name
    for (int c = 0x20; c < 0x80; ++c) {
      if (c != '"' && c != '\\' && next.count(std::string(1, static_cast<char>(c))) == 0) {
        other[static_cast<size_t>(c) >> 6] |= uint64_t{1} << (c & 63);
      }
    }
    const Sym body = RestOfString();
    b_.AddAlternative(r, {b_.Class(other), body});
    // Multi-byte characters and escapes leave the names too, unless a name goes on with one.
    const bool names_go_on_long =
        std::any_of(next.begin(), next.end(), [](const std::string& ch) { return ch.size() > 1; });
    if (!names_go_on_long) b_.AddAlternative(r, {KeyNonAsciiOrEscape(), body});
    for (const std::string& ch : next) {
      Seq seq;
      for (char c : ch) seq.push_back(b_.Byte(static_cast<uint8_t>(c)));
      std::vector<std::string> longer = prefix;
      longer.push_back(ch);
      seq.push_back(GrammarBuilder::Ref(TrieRule(names, longer)));
      b_.AddAlternative(r, seq);
    }
    return r;
  }
  // Up to `n` more of `s` (a chain of optional rules).
  int32_t UpTo(const Sym& s, int n) {
    int32_t next = b_.Rule({{}});
    for (int k = 0; k < n; ++k) next = b_.Rule({{}, {s, GrammarBuilder::Ref(next)}});
    return next;
  }
  Sym Digits(int max) {  // 0..max more digits
    int32_t& r = digit_rules_[max];
    if (r == 0) r = UpTo(b_.Range({{'0', '9'}}), max) + 1;  // stored +1: 0 means unbuilt
    return GrammarBuilder::Ref(r - 1);
  }
  Sym IntPart() {  // 0 | [1-9][0-9]*, at most kIntDigits digits
    if (int_part_ < 0) {
      int_part_ = b_.Rule({{b_.Byte('0')}, {b_.Range({{'1', '9'}}), Digits(kIntDigits - 1)}});
    }
    return GrammarBuilder::Ref(int_part_);
  }
  Sym OptMinus() {
    if (opt_minus_ < 0) opt_minus_ = b_.Rule({{}, {b_.Byte('-')}});
    return GrammarBuilder::Ref(opt_minus_);
  }
  Sym Integer() {
    if (integer_ < 0) integer_ = b_.Rule({{OptMinus(), IntPart()}});
    return GrammarBuilder::Ref(integer_);
  }
  static bool HasBounds(const ojson& schema) {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (schema.contains(k)) return true;
    }
    return false;
  }

  // The integers that minimum / maximum / exclusiveMinimum / exclusiveMaximum allow, written as
  // JSON writes them (no leading zeros, "-" only before a non-zero magnitude), with at most
  // kIntDigits digits.
  Status IntegerIn(const ojson& schema, const std::string& where, Sym* out) {
    if (!HasBounds(schema)) {
      *out = Integer();
      return Status::Ok();
    }
    constexpr int64_t kLimit = 9999999999999999;  // kIntDigits nines
    int64_t lo = -kLimit, hi = kLimit;
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      const auto it = schema.find(k);
      if (it == schema.end()) continue;
      if (!it->is_number()) {
        return Error(where + "/" + k, std::string("'") + k + "' must be a number");
      }
      const double v = it->get<double>();
      const std::string key = k;
      // Past what the 16 digits can write: a bound on the far side allows every such integer
      // (no bound), one on the near side allows none (e.g. minimum 1e17).
      if (std::fabs(v) > 1e16) {
        const bool lower = key == "minimum" || key == "exclusiveMinimum";
        if ((lower && v > 0) || (!lower && v < 0)) {
          return Error(where, "no integer of at most 16 digits is within '" + key + "'");
        }
        continue;
      }
      if (key == "minimum") lo = std::max(lo, static_cast<int64_t>(std::ceil(v)));
      if (key == "maximum") hi = std::min(hi, static_cast<int64_t>(std::floor(v)));
      if (key == "exclusiveMinimum") lo = std::max(lo, static_cast<int64_t>(std::floor(v)) + 1);
      if (key == "exclusiveMaximum") hi = std::min(hi, static_cast<int64_t>(std::ceil(v)) - 1);
    }
    if (lo > hi) return Error(where, "no integer is within minimum and maximum");
    std::vector<Seq> alts;
    if (lo < 0) {  // -magnitude for magnitudes max(1, -hi) .. -lo
      for (Seq& m : Magnitudes(std::max<int64_t>(1, -hi), -lo)) {
        m.insert(m.begin(), b_.Byte('-'));
        alts.push_back(std::move(m));
      }
    }
    if (hi >= 0) {
      for (Seq& m : Magnitudes(std::max<int64_t>(0, lo), hi)) alts.push_back(std::move(m));
    }
    *out = GrammarBuilder::Ref(b_.Rule(alts));
    return Status::Ok();
  }

  // Decimal numbers a..b (0 <= a <= b), one sequence per digit count.
  std::vector<Seq> Magnitudes(int64_t a, int64_t b) {
    std::vector<Seq> out;
    const std::string as = std::to_string(a), bs = std::to_string(b);
    for (size_t len = as.size(); len <= bs.size(); ++len) {
      std::string lo(len, '0');  // (built in place: GCC 12 warns falsely on "1" + ...)
      lo[0] = '1';
      if (len == as.size()) lo = as;
      const std::string hi = len == bs.size() ? bs : std::string(len, '9');
      out.push_back({GrammarBuilder::Ref(SameLengthRange(lo, hi))});
    }
    return out;
  }
  // The digit strings lo..hi, both of one length, lo <= hi.
  int32_t SameLengthRange(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return b_.Rule({{}});
    if (lo.find_first_not_of('0') == std::string::npos &&
        hi.find_first_not_of('9') == std::string::npos) {
      // Every digit string of that length (so that each side below recurses only once).
      Seq any;
      for (size_t i = 0; i < lo.size(); ++i) any.push_back(b_.Range({{'0', '9'}}));
      return b_.Rule({any});
    }
    if (lo[0] == hi[0]) {
      return b_.Rule({{b_.Byte(static_cast<uint8_t>(lo[0])),
                       GrammarBuilder::Ref(SameLengthRange(lo.substr(1), hi.substr(1)))}});
    }
    const size_t rest = lo.size() - 1;
    std::vector<Seq> alts;
    alts.push_back({b_.Byte(static_cast<uint8_t>(lo[0])),
                    GrammarBuilder::Ref(SameLengthRange(lo.substr(1), std::string(rest, '9')))});
    if (hi[0] - lo[0] > 1) {
      Seq mid{b_.Range({{static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1)}})};
      for (size_t i = 0; i < rest; ++i) mid.push_back(b_.Range({{'0', '9'}}));
      alts.push_back(mid);
    }
    alts.push_back({b_.Byte(static_cast<uint8_t>(hi[0])),
                    GrammarBuilder::Ref(SameLengthRange(std::string(rest, '0'), hi.substr(1)))});
    return b_.Rule(alts);
  }

  Sym Number() {
    if (number_ < 0) {
      const Sym digit = b_.Range({{'0', '9'}});
      const int32_t frac = b_.Rule({{}, {b_.Byte('.'), digit, Digits(kFracDigits - 1)}});
      const int32_t sign = b_.Rule({{}, {b_.Range({{'+', '+'}, {'-', '-'}})}});
      const int32_t exp = b_.Rule({{},
                                   {b_.Range({{'e', 'e'}, {'E', 'E'}}), GrammarBuilder::Ref(sign),
                                    digit, Digits(kExpDigits - 1)}});
      number_ =
          b_.Rule({{OptMinus(), IntPart(), GrammarBuilder::Ref(frac), GrammarBuilder::Ref(exp)}});
    }
    return GrammarBuilder::Ref(number_);
  }
  Sym Literal(std::string_view text) { return GrammarBuilder::Ref(b_.Rule({b_.Literal(text)})); }
  Sym Boolean() {
    if (boolean_ < 0) boolean_ = b_.Rule({b_.Literal("true"), b_.Literal("false")});
    return GrammarBuilder::Ref(boolean_);
  }
  Sym Null() {
    if (null_ < 0) null_ = b_.Rule({b_.Literal("null")});
    return GrammarBuilder::Ref(null_);
  }
  // Any JSON value.
  Sym AnyValue() {
    if (any_ < 0) {
      any_ = b_.NewRule();
      const Sym v = GrammarBuilder::Ref(any_);
      // {"k": v, ...}
      const int32_t member = b_.Rule({{String(), Ws(), b_.Byte(':'), Ws(), v, Ws()}});
      const int32_t more = b_.NewRule();
      b_.AddAlternative(more, {});
      b_.AddAlternative(
          more, {b_.Byte(','), Ws(), GrammarBuilder::Ref(member), GrammarBuilder::Ref(more)});
      const int32_t members =
          b_.Rule({{}, {GrammarBuilder::Ref(member), GrammarBuilder::Ref(more)}});
      // [v, ...]
      const int32_t amore = b_.NewRule();
      b_.AddAlternative(amore, {});
      b_.AddAlternative(amore, {b_.Byte(','), Ws(), v, Ws(), GrammarBuilder::Ref(amore)});
      const int32_t items = b_.Rule({{}, {v, Ws(), GrammarBuilder::Ref(amore)}});
      b_.AddAlternative(any_, {b_.Byte('{'), Ws(), GrammarBuilder::Ref(members), b_.Byte('}')});
      b_.AddAlternative(any_, {b_.Byte('['), Ws(), GrammarBuilder::Ref(items), b_.Byte(']')});
      b_.AddAlternative(any_, {String()});
      b_.AddAlternative(any_, {Number()});
      b_.AddAlternative(any_, {Boolean()});
      b_.AddAlternative(any_, {Null()});
    }
    return GrammarBuilder::Ref(any_);
  }

  // ---- schemas ----------------------------------------------------------------------------

  // The rule for the values `schema` accepts, into *rule.
  Status Value(const ojson& schema, const std::string& where, int32_t* rule) {
    if (++depth_ > 128) return Error(where, "the schema nests too deeply");
    Status st = ValueAt(schema, where, rule);
    --depth_;
    if (st.ok()) st = CheckSize();
    return st;
  }

  // Whether a keyword this compiler enforces says which values are valid (the unsupported
  // ones are refused wherever they are; the rest, such as title, default, discriminator or an
  // x- extension, are annotations).
  static bool Annotation(std::string_view key) {
    static const std::set<std::string_view> kConstraining = {
        "type",      "properties", "required",  "additionalProperties", "items",
        "prefixItems", "minItems", "maxItems",  "minLength", "maxLength", "pattern",
        "format",    "minimum",    "maximum",   "exclusiveMinimum", "exclusiveMaximum",
        "nullable",  "$ref",       "allOf",     "anyOf",     "oneOf",     "const", "enum"};
    return kConstraining.count(key) == 0;
  }

  // Whether `value` is of `schema`'s "type" (any, when it has none): JSON Schema's types, an
  // integer being a number without a fraction.
  static bool OfDeclaredType(const ojson& schema, const ojson& value) {
    const auto t = schema.find("type");
    if (t == schema.end()) return true;
    auto is = [&value](const ojson& name) {
      if (!name.is_string()) return false;
      const std::string& n = name.get_ref<const std::string&>();
      if (n == "null") return value.is_null();
      if (n == "boolean") return value.is_boolean();
      if (n == "string") return value.is_string();
      if (n == "array") return value.is_array();
      if (n == "object") return value.is_object();
      if (n == "number") return value.is_number();
      if (n == "integer") {
        return value.is_number_integer() ||
               (value.is_number_float() && std::isfinite(value.get<double>()) &&
                value.get<double>() == std::floor(value.get<double>()));
      }
      return false;
    };
    if (t->is_array()) return std::any_of(t->begin(), t->end(), is);
    return is(*t);
  }

  Status ValueAt(const ojson& schema, const std::string& where, int32_t* rule) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) return Error(where, "the schema false accepts no value");
      *rule = RuleOf(AnyValue());
      return Status::Ok();
    }
    if (!schema.is_object()) return Error(where, "a schema must be an object or a boolean");
    for (const auto& [key, v] : schema.items()) {
      if (Unsupported().count(key) != 0) {
        return Error(where, "'" + key + "' is not supported");
      }
    }
    if (const auto it = schema.find("uniqueItems");
        it != schema.end() && it->is_boolean() && it->get<bool>()) {
      return Error(where, "'uniqueItems' is not supported");
    }
    // $ref, allOf, anyOf, oneOf, const and enum each decide the whole value here: a constraining
    // keyword beside one (maxLength beside enum, required beside anyOf, type beside $ref) would
    // go unenforced, so it is refused, never silently dropped. Annotations may stand beside them,
    // and `type` beside const or enum, whose values must then be of that type.
    for (const char* kw : {"$ref", "allOf", "anyOf", "oneOf", "const", "enum"}) {
      if (!schema.contains(kw)) continue;
      const bool value_list = std::string_view(kw) == "const" || std::string_view(kw) == "enum";
      for (const auto& [key, v] : schema.items()) {
        if (key == kw || Annotation(key) || (value_list && key == "type")) continue;
        return Error(where, "'" + key + "' beside '" + kw +
                                "' is not supported (it would not be enforced: put it inside " +
                                (value_list ? "the values" : "the referenced schema or each alternative") +
                                ")");
      }
      break;
    }
    if (const auto it = schema.find("$ref"); it != schema.end()) return Ref(*it, where, rule);
    if (const auto it = schema.find("allOf"); it != schema.end()) {
      if (!it->is_array() || it->size() != 1) {
        return Error(where + "/allOf", "'allOf' is supported with one schema only");
      }
      return Value((*it)[0], where + "/allOf/0", rule);
    }
    for (const char* kw : {"anyOf", "oneOf"}) {
      const auto it = schema.find(kw);
      if (it == schema.end()) continue;
      if (!it->is_array() || it->empty()) {
        return Error(where + "/" + kw, "'" + std::string(kw) + "' must be a non-empty array");
      }
      std::vector<Seq> alts;
      for (size_t i = 0; i < it->size(); ++i) {
        int32_t r = -1;
        KINFER_RETURN_IF_ERROR(Value((*it)[i], where + "/" + kw + "/" + std::to_string(i), &r));
        alts.push_back({GrammarBuilder::Ref(r)});
      }
      *rule = b_.Rule(alts);
      return Status::Ok();
    }
    if (const auto it = schema.find("const"); it != schema.end()) {
      if (!OfDeclaredType(schema, *it)) {
        return Error(where, "'const' is not of the schema's 'type': no value is valid");
      }
      *rule = b_.Rule({b_.Literal(it->dump())});
      return Status::Ok();
    }
    if (const auto it = schema.find("enum"); it != schema.end()) {
      if (!it->is_array() || it->empty()) {
        return Error(where + "/enum", "'enum' must be a non-empty array");
      }
      std::vector<Seq> alts;
      for (const ojson& v : *it) {
        if (OfDeclaredType(schema, v)) alts.push_back(b_.Literal(v.dump()));
      }
      if (alts.empty()) {
        return Error(where, "no value of 'enum' is of the schema's 'type': no value is valid");
      }
      *rule = b_.Rule(alts);
      return Status::Ok();
    }

    std::vector<std::string> types;
    if (const auto it = schema.find("type"); it != schema.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const ojson& t : *it) {
          if (!t.is_string()) return Error(where + "/type", "'type' must name types");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Error(where + "/type", "'type' must be a string or a non-empty array");
      }
    } else if (schema.contains("properties") || schema.contains("additionalProperties") ||
               schema.contains("required")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("prefixItems")) {
      types.push_back("array");
    } else {
      if (HasBounds(schema)) {
        return Error(where, "'minimum' and 'maximum' are supported on \"type\": \"integer\"");
      }
      *rule = RuleOf(AnyValue());
      return Status::Ok();
    }
    if (const auto it = schema.find("nullable");
        it != schema.end() && it->is_boolean() && it->get<bool>()) {
      types.push_back("null");
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) {
      Sym s;
      if (t == "object") {
        int32_t r = -1;
        KINFER_RETURN_IF_ERROR(Object(schema, where, &r));
        s = GrammarBuilder::Ref(r);
      } else if (t == "array") {
        int32_t r = -1;
        KINFER_RETURN_IF_ERROR(Array(schema, where, &r));
        s = GrammarBuilder::Ref(r);
      } else if (t == "string") {
        int32_t r = -1;
        KINFER_RETURN_IF_ERROR(StringOf(schema, where, &r));
        s = GrammarBuilder::Ref(r);
      } else if (t == "number") {
        if (HasBounds(schema)) {
          return Error(where,
                       "'minimum' and 'maximum' are supported on \"type\": \"integer\", "
                       "not on numbers");
        }
        s = Number();
      } else if (t == "integer") {
        KINFER_RETURN_IF_ERROR(IntegerIn(schema, where, &s));
      } else if (t == "boolean") {
        s = Boolean();
      } else if (t == "null") {
        s = Null();
      } else {
        return Error(where + "/type", "unknown type '" + t + "'");
      }
      alts.push_back({s});
    }
    *rule = b_.Rule(alts);
    return Status::Ok();
  }

  int32_t RuleOf(const Sym& s) { return s.id; }

  Status Ref(const ojson& ref, const std::string& where, int32_t* rule) {
    if (!ref.is_string()) return Error(where + "/$ref", "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    const std::string key = scope_ + target;
    if (const auto it = refs_.find(key); it != refs_.end()) {
      *rule = it->second;
      return Status::Ok();
    }
    if (target.empty() || target[0] != '#') {
      return Error(where + "/$ref", "only references inside the schema (\"#...\") are supported");
    }
    const ojson* node = nullptr;
    try {
      const ojson::json_pointer ptr(target.substr(1));
      if (root_->contains(ptr)) node = &root_->at(ptr);
    } catch (const ojson::exception&) {
      node = nullptr;
    }
    if (node == nullptr) return Error(where + "/$ref", "'" + target + "' names nothing");
    // The rule exists before its body is compiled, so that the body may refer to it.
    const int32_t r = b_.NewRule();
    refs_[key] = r;
    int32_t body = -1;
    KINFER_RETURN_IF_ERROR(Value(*node, target, &body));
    b_.AddAlternative(r, {GrammarBuilder::Ref(body)});
    *rule = r;
    return Status::Ok();
  }

  Status Object(const ojson& schema, const std::string& where, int32_t* rule) {
    struct Prop {
      std::string name;
      const ojson* schema;  // null: any value
      bool required = false;
    };
    std::vector<Prop> props;
    if (const auto it = schema.find("properties"); it != schema.end()) {
      if (!it->is_object()) return Error(where + "/properties", "'properties' must be an object");
      for (const auto& [name, s] : it->items()) props.push_back({name, &s, false});
    }
    // null: no other properties. Unset means none when `properties` is given (OpenAI's strict
    // mode), any when it is not ({"type": "object"} is any object).
    static const ojson kAny = true;
    const ojson* additional = schema.contains("properties") ? nullptr : &kAny;
    if (const auto it = schema.find("additionalProperties"); it != schema.end()) {
      additional = it->is_boolean() && !it->get<bool>() ? nullptr : &*it;
    }
    if (const auto it = schema.find("required"); it != schema.end()) {
      if (!it->is_array()) return Error(where + "/required", "'required' must be an array");
      for (const ojson& n : *it) {
        if (!n.is_string()) return Error(where + "/required", "'required' must list names");
        const std::string name = n.get<std::string>();
        bool found = false;
        for (Prop& p : props) {
          if (p.name == name) found = p.required = true;
        }
        if (!found) {
          if (additional == nullptr) {
            return Error(where + "/required", "required property '" + name +
                                                  "' is not in 'properties' and "
                                                  "additionalProperties is false");
          }
          props.push_back({name, additional, true});
        }
      }
    }
    // key-value pairs
    std::vector<int32_t> kv(props.size());
    for (size_t i = 0; i < props.size(); ++i) {
      int32_t v = -1;
      KINFER_RETURN_IF_ERROR(
          Value(*props[i].schema, where + "/properties/" + Escaped(props[i].name), &v));
      Seq s = b_.Literal(ojson(props[i].name).dump());
      for (const Sym& x : {Ws(), b_.Byte(':'), Ws(), GrammarBuilder::Ref(v), Ws()}) s.push_back(x);
      kv[i] = b_.Rule({s});
    }
    int32_t extra = -1;
    if (additional != nullptr) {
      int32_t v = -1;
      KINFER_RETURN_IF_ERROR(Value(*additional, where + "/additionalProperties", &v));
      std::vector<std::string> names;
      for (const Prop& p : props) names.push_back(p.name);
      extra =
          b_.Rule({{KeyOtherThan(names), Ws(), b_.Byte(':'), Ws(), GrammarBuilder::Ref(v), Ws()}});
    }
    // tail[i]: properties i.. after at least one was written (each is preceded by a comma);
    // head[i]: the same before any was written.
    const size_t n = props.size();
    std::vector<int32_t> tail(n + 1), head(n + 1);
    tail[n] = b_.NewRule();
    b_.AddAlternative(tail[n], {});
    head[n] = b_.NewRule();
    b_.AddAlternative(head[n], {});
    if (extra >= 0) {
      b_.AddAlternative(
          tail[n], {b_.Byte(','), Ws(), GrammarBuilder::Ref(extra), GrammarBuilder::Ref(tail[n])});
      b_.AddAlternative(head[n], {GrammarBuilder::Ref(extra), GrammarBuilder::Ref(tail[n])});
    }
    for (size_t i = n; i-- > 0;) {
      tail[i] = b_.NewRule();
      b_.AddAlternative(tail[i], {b_.Byte(','), Ws(), GrammarBuilder::Ref(kv[i]),
                                  GrammarBuilder::Ref(tail[i + 1])});
      head[i] = b_.NewRule();
      b_.AddAlternative(head[i], {GrammarBuilder::Ref(kv[i]), GrammarBuilder::Ref(tail[i + 1])});
      if (!props[i].required) {
        b_.AddAlternative(tail[i], {GrammarBuilder::Ref(tail[i + 1])});
        b_.AddAlternative(head[i], {GrammarBuilder::Ref(head[i + 1])});
      }
    }
    *rule = b_.Rule({{b_.Byte('{'), Ws(), GrammarBuilder::Ref(head[0]), b_.Byte('}')}});
    return Status::Ok();
  }

  Status Count(const ojson& schema, const char* key, const std::string& where, int* out) {
    const auto it = schema.find(key);
    if (it == schema.end()) return Status::Ok();
    std::string quoted = "'";  // (built up: GCC 12 warns falsely on "'" + std::string(key))
    quoted += key;
    quoted += "'";
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Error(where + "/" + key, quoted + " must be a non-negative integer");
    }
    if (it->get<int64_t>() > kMaxSchemaRepeat) {
      return Error(where + "/" + key,
                   quoted + " above " + std::to_string(kMaxSchemaRepeat) + " is not supported");
    }
    *out = static_cast<int>(it->get<int64_t>());
    return Status::Ok();
  }

  Status Array(const ojson& schema, const std::string& where, int32_t* rule) {
    int min = 0, max = -1;
    KINFER_RETURN_IF_ERROR(Count(schema, "minItems", where, &min));
    KINFER_RETURN_IF_ERROR(Count(schema, "maxItems", where, &max));
    std::vector<int32_t> prefix;
    if (const auto it = schema.find("prefixItems"); it != schema.end()) {
      if (!it->is_array()) return Error(where + "/prefixItems", "'prefixItems' must be an array");
      for (size_t i = 0; i < it->size(); ++i) {
        int32_t r = -1;
        KINFER_RETURN_IF_ERROR(Value((*it)[i], where + "/prefixItems/" + std::to_string(i), &r));
        prefix.push_back(r);
      }
    }
    int32_t items = -1;  // -1: no elements past the prefix
    if (const auto it = schema.find("items"); it != schema.end()) {
      if (!(it->is_boolean() && !it->get<bool>())) {
        KINFER_RETURN_IF_ERROR(Value(*it, where + "/items", &items));
      }
    } else {
      items = RuleOf(AnyValue());
    }
    const int m = static_cast<int>(prefix.size());
    if (items < 0 && (max < 0 || max > m)) max = m;
    if (max >= 0 && min > max) {
      return Error(where, "minItems is above the number of items the array may hold");
    }
    auto element = [&](int k) { return k < m ? prefix[static_cast<size_t>(k)] : items; };
    // after[k]: the rest once k elements (k >= 1) are written.
    const int last =
        max >= 0 ? max : std::max({m, min, 1});  // past it, a loop (unbounded) or nothing
    std::vector<int32_t> after(static_cast<size_t>(last) + 2, -1);
    for (int k = last; k >= 1; --k) {
      const int32_t r = b_.NewRule();
      after[static_cast<size_t>(k)] = r;
      if (k >= min) b_.AddAlternative(r, {});
      if (max < 0 || k < max) {
        const int32_t next = k == last ? r : after[static_cast<size_t>(k) + 1];
        b_.AddAlternative(r, {b_.Byte(','), Ws(), GrammarBuilder::Ref(element(k)), Ws(),
                              GrammarBuilder::Ref(next)});
      }
      KINFER_RETURN_IF_ERROR(CheckSize());
    }
    const int32_t body = b_.NewRule();
    if (min == 0) b_.AddAlternative(body, {});
    if (max != 0) {
      const int32_t rest = last >= 1 ? after[1] : b_.Rule({{}});
      b_.AddAlternative(body, {GrammarBuilder::Ref(element(0)), Ws(), GrammarBuilder::Ref(rest)});
    }
    *rule = b_.Rule({{b_.Byte('['), Ws(), GrammarBuilder::Ref(body), b_.Byte(']')}});
    return Status::Ok();
  }

  Status StringOf(const ojson& schema, const std::string& where, int32_t* rule) {
    int min = 0, max = -1;
    KINFER_RETURN_IF_ERROR(Count(schema, "minLength", where, &min));
    KINFER_RETURN_IF_ERROR(Count(schema, "maxLength", where, &max));
    if (const auto it = schema.find("format"); it != schema.end() && it->is_string()) {
      if (const std::string regex = FormatRegex(it->get<std::string>()); !regex.empty()) {
        if (schema.contains("pattern") || min != 0 || max >= 0) {
          return Error(where, "'format' \"" + it->get<std::string>() +
                                  "\" beside pattern, minLength or maxLength is not supported");
        }
        auto body = RegexRule(regex, RegexText::kJsonString, /*anchored=*/false, &b_);
        if (!body.ok()) return Error(where + "/format", body.status().message());
        *rule = b_.Rule({{b_.Byte('"'), GrammarBuilder::Ref(*body), b_.Byte('"')}});
        return Status::Ok();
      }
    }
    if (const auto it = schema.find("pattern"); it != schema.end()) {
      if (!it->is_string()) return Error(where + "/pattern", "'pattern' must be a string");
      if (min != 0 || max >= 0) {
        return Error(where,
                     "'pattern' beside minLength or maxLength is not supported (put the "
                     "length in the pattern)");
      }
      auto body =
          RegexRule(it->get<std::string>(), RegexText::kJsonString, /*anchored=*/false, &b_);
      if (!body.ok()) return Error(where + "/pattern", body.status().message());
      *rule = b_.Rule({{b_.Byte('"'), GrammarBuilder::Ref(*body), b_.Byte('"')}});
      return Status::Ok();
    }
    if (min == 0 && max < 0) {
      *rule = RuleOf(String());
      return Status::Ok();
    }
    if (max >= 0 && min > max) return Error(where, "minLength is above maxLength");
    Seq s{b_.Byte('"')};
    for (int i = 0; i < min; ++i) s.push_back(CodePoint());
    if (max < 0) {
      const int32_t loop = b_.NewRule();
      b_.AddAlternative(loop, {});
      b_.AddAlternative(loop, {CodePoint(), GrammarBuilder::Ref(loop)});
      s.push_back(GrammarBuilder::Ref(loop));
    } else {
      s.push_back(GrammarBuilder::Ref(UpTo(CodePoint(), max - min)));
    }
    s.push_back(b_.Byte('"'));
    *rule = b_.Rule({s});
    return Status::Ok();
  }

  // A property name as a JSON pointer token.
  static std::string Escaped(const std::string& name) {
    std::string out;
    for (char c : name) {
      if (c == '~') {
        out += "~0";
      } else if (c == '/') {
        out += "~1";
      } else {
        out += c;
      }
    }
    return out;
  }

  const ojson* root_ = nullptr;  // the document being compiled ($refs resolve in it)
  std::string scope_;
  GrammarBuilder b_;
  std::map<std::string, int32_t> refs_;
  std::map<int, int32_t> digit_rules_;
  int depth_ = 0;
  int32_t ws_ = -1, escape_ = -1, string_ = -1, code_point_ = -1, int_part_ = -1, opt_minus_ = -1,
          integer_ = -1, non_ascii_ = -1, rest_of_string_ = -1, number_ = -1, boolean_ = -1,
          null_ = -1, any_ = -1, key_non_ascii_ = -1, key_code_point_ = -1;
};

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> JsonSchemaGrammar(const nlohmann::ordered_json& schema) {
  return Compiler().Run(schema);
}

StatusOr<std::shared_ptr<const Grammar>> RegexGrammar(std::string_view pattern) {
  GrammarBuilder b;
  auto rule = RegexRule(pattern, RegexText::kRaw, /*anchored=*/true, &b);
  if (!rule.ok()) return rule.status();
  auto g = b.Build(*rule);
  if (GrammarRecognizer(g).dead()) return InvalidArgument("regex: the pattern matches nothing");
  return g;
}

StatusOr<std::shared_ptr<const Grammar>> ToolCallGrammar(const std::vector<ToolSchema>& tools,
                                                         bool may_answer, bool parallel,
                                                         const ToolSchema* response_schema) {
  return Compiler().RunTools(tools, may_answer, parallel, response_schema);
}

}  // namespace kinfer
