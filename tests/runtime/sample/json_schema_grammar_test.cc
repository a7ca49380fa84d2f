#include "runtime/sample/json_schema_grammar.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/sample/grammar.h"
#include "runtime/sample/token_constraint.h"

namespace kinfer {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Grammar> Compile(const std::string& schema) {
  auto g = JsonSchemaGrammar(ojson::parse(schema));
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().message();
  return g.ok() ? *g : nullptr;
}

// The whole text is a sentence of the grammar.
bool Matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarRecognizer r(g);
  return r.Feed(text) && r.complete();
}

std::string RefusalOf(const std::string& schema) {
  auto g = JsonSchemaGrammar(ojson::parse(schema));
  EXPECT_FALSE(g.ok()) << schema;
  return g.ok() ? "" : g.status().message();
}

// ---- the grammar and its recognizer ------------------------------------------------------------

TEST(GrammarTest, RightRecursionRunsInConstantStackAndLeftRecursionIsCut) {
  GrammarBuilder b;
  const int32_t list = b.NewRule();  // list ::= "a" list | ""
  b.AddAlternative(list, {b.Byte('a'), GrammarBuilder::Ref(list)});
  b.AddAlternative(list, {});
  auto g = b.Build(list);
  GrammarRecognizer r(g);
  EXPECT_TRUE(r.complete());
  const size_t stacks = r.num_stacks();
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(r.Feed('a'));
  EXPECT_EQ(r.num_stacks(), stacks);
  EXPECT_TRUE(r.complete());
  EXPECT_FALSE(r.Feed('b'));
  EXPECT_TRUE(r.complete());  // a refused byte leaves the state as it was

  GrammarBuilder lb;
  const int32_t left = lb.NewRule();  // left ::= left "a" | "b": cut, not a hang
  lb.AddAlternative(left, {GrammarBuilder::Ref(left), lb.Byte('a')});
  lb.AddAlternative(left, {lb.Byte('b')});
  GrammarRecognizer lr(lb.Build(left));
  EXPECT_TRUE(lr.Feed('b'));
}

TEST(GrammarTest, NullableRulesNestedInEachOtherAreWalkedOnceNotOncePerPath) {
  // The fuzzer's find: the regex `((a?)?){40}` (each repeat two nested nullable rules) reaches
  // the same stack along 2^40 paths; each was walked before, a hang on the first byte. The
  // recognizer must still be exact: up to 40 a's, and no more.
  auto g = Compile(R"({"type":"string","pattern":"^((a?)?){40}$"})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, R"("")"));
  EXPECT_TRUE(Matches(g, R"("aaaaaaaaaaaaaaaaaaa")"));
  EXPECT_TRUE(Matches(g, "\"" + std::string(40, 'a') + "\""));
  EXPECT_FALSE(Matches(g, "\"" + std::string(41, 'a') + "\""));
  EXPECT_FALSE(Matches(g, R"("ab")"));

  // The same shape by hand: 3^40 paths (x, or empty two ways) through forty nullable levels.
  GrammarBuilder b;
  int32_t chain = b.Rule({{}});  // chain_k ::= opt opt_in chain_{k-1} | "" ; opt ::= "x" | ""
  const int32_t opt = b.Rule({{b.Byte('x')}, {}});
  const int32_t opt_in = b.Rule({{GrammarBuilder::Ref(opt)}, {}});
  for (int k = 0; k < 40; ++k) {
    chain = b.Rule({{GrammarBuilder::Ref(opt_in), GrammarBuilder::Ref(chain)}, {}});
  }
  const int32_t root = b.Rule({{b.Byte('<'), GrammarBuilder::Ref(chain), b.Byte('>')}});
  auto hand = b.Build(root);
  EXPECT_TRUE(Matches(hand, "<>"));
  EXPECT_TRUE(Matches(hand, "<" + std::string(40, 'x') + ">"));
  EXPECT_FALSE(Matches(hand, "<" + std::string(41, 'x') + ">"));
}

TEST(GrammarTest, LeftRecursionUnderSeveralAlternativesIsCutNotAHang) {
  // left ::= left "a" | left "b": no base case, every path a distinct stack that is cut at the
  // expansion depth; 2^256 of them unless the work per round is bounded.
  GrammarBuilder b;
  const int32_t left = b.NewRule();
  b.AddAlternative(left, {GrammarBuilder::Ref(left), b.Byte('a')});
  b.AddAlternative(left, {GrammarBuilder::Ref(left), b.Byte('b')});
  GrammarRecognizer r(b.Build(left));
  EXPECT_TRUE(r.dead());
}

TEST(GrammarTest, NestedRulesAndAlternativesShareNothingTheyShouldNot) {
  // s ::= "(" s ")" | "x": balanced parentheses around one x.
  GrammarBuilder b;
  const int32_t s = b.NewRule();
  b.AddAlternative(s, {b.Byte('('), GrammarBuilder::Ref(s), b.Byte(')')});
  b.AddAlternative(s, {b.Byte('x')});
  auto g = b.Build(s);
  EXPECT_TRUE(Matches(g, "x"));
  EXPECT_TRUE(Matches(g, "((x))"));
  EXPECT_FALSE(Matches(g, "((x)"));
  EXPECT_FALSE(GrammarRecognizer(g).Accepts("(x))"));
  GrammarRecognizer deep(g);
  for (size_t i = 0; i < GrammarRecognizer::kMaxStackDepth + 10; ++i) (void)deep.Feed('(');
  EXPECT_TRUE(deep.dead() || !deep.Accepts(")"));  // bounded, not unbounded memory
}

// ---- what schemas accept ------------------------------------------------------------------------

struct Case {
  const char* schema;
  std::vector<const char*> accept;
  std::vector<const char*> reject;
};

TEST(JsonSchemaGrammarTest, AcceptsWhatTheSchemaAcceptsAndNothingElse) {
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
          "required":["name","age"]})",
       {R"({"name":"Ada","age":36})", R"({ "name" : "Ada" , "age" : -1 })",
        "{\n  \"name\": \"A\\\"d\\u00e9\",\n  \"age\": 0\n}", R"( {"name":"","age":12})",
        "\n\t{\"name\":\"\",\"age\":12}"},
       {R"({"age":36,"name":"Ada"})", R"({"name":"Ada"})", R"({"name":"Ada","age":36,"x":1})",
        R"({"name":"Ada","age":3.5})", R"({"name":"Ada","age":01})", R"({"name":1,"age":1})",
        R"({"name":"Ada","age":36} )", "{\n\n\"name\":\"A\",\"age\":1}",
        R"({  "name":"A","age":1})",
        R"({"name":"a)"
        "\n"
        R"(","age":1})"}},
      // Optional properties may be left out, in order.
      {R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"},
          "c":{"type":"number"}},"required":["b"]})",
       {R"({"b":null})", R"({"a":true,"b":null})", R"({"b":null,"c":1.5e-3})",
        R"({"a":false,"b":null,"c":-0})"},
       {R"({})", R"({"a":true})", R"({"c":1,"b":null})", R"({"b":null,})", R"({,"b":null})"}},
      // No properties: any object; additionalProperties with a schema: a map.
      {R"({"type":"object"})", {R"({})", R"({"x":[1,{"y":null}],"z":"w"})"}, {R"([])", "1"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {R"({})", R"({"a":1,"b":2})"},
       {R"({"a":"1"})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})",
       {R"({"a":1,"b":"x"})", R"({"b":[]})"},
       {R"({"a":"x"})"}},
      {R"({"enum":["red","green",3,null,{"k":[1]}]})",
       {R"("red")", R"("green")", "3", "null", R"({"k":[1]})"},
       {R"("blue")", R"("re")", "4", R"({"k":[2]})"}},
      {R"({"const":"fixed"})", {R"("fixed")"}, {R"("fixe")", R"("fixedd")"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})",
       {"12", R"("ab")", R"("")"},
       {R"("abc")", "1.5", "true"}},
      {R"({"type":["string","null"]})", {R"("x")", "null"}, {"1"}},
      {R"({"type":"integer","nullable":true})", {"7", "null"}, {R"("7")"}},
      {R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
       {"[1]", "[1,2,3]", "[ 1 , 2 ]"},
       {"[]", "[1,2,3,4]", "[1,]", R"(["1"])"}},
      {R"({"type":"array","items":{"type":"boolean"}})",
       {"[]", "[true,false,true,true,false]"},
       {"[1]", "[true false]"}},
      {R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
       {R"(["a",1])", R"(["a"])", "[]"},
       {R"([1,"a"])", R"(["a",1,2])"}},
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},
          "minItems":2})",
       {R"(["a",1])", R"(["a",1,2,3])"},
       {R"(["a"])", R"(["a","b"])"}},
      // Lengths count code points: "é" (2 bytes) and an escape are one each.
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("abc")", "\"\xC3\xA9\xC3\xA9\"", R"("a\n")"},
       {R"("a")", R"("abcd")", "\"\xC3\xA9\"", "\"a\xFF\""}},
      {R"({"type":"number"})",
       {"0", "-0.5", "1e10", "1E+2", "123.456e-7"},
       {"01", "1.", ".5", "+1", "1e", "--1", "12345678901234567"}},
      {"true", {"1", R"("s")", "[1,[2,{}]]", "null"}, {"nul", "[1,"}},
      {"{}", {"1", R"({"a":{}})"}, {"{"}},
  };
  for (const Case& c : cases) {
    auto g = Compile(c.schema);
    ASSERT_NE(g, nullptr);
    for (const char* text : c.accept) EXPECT_TRUE(Matches(g, text)) << c.schema << "\n" << text;
    for (const char* text : c.reject) EXPECT_FALSE(Matches(g, text)) << c.schema << "\n" << text;
  }
}

TEST(JsonSchemaGrammarTest, ReferencesResolveInsideTheSchemaAndMayRecurse) {
  // A pydantic-style schema: $defs and a recursive tree.
  auto g = Compile(R"({
    "$defs": {"Node": {"type": "object", "properties": {
        "value": {"type": "integer"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
      "required": ["value", "children"], "additionalProperties": false, "title": "Node"}},
    "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}}, "required": ["root"]})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Matches(g, R"({"root":{"value":1,"children":[]}})"));
  EXPECT_TRUE(Matches(
      g,
      R"({"root":{"value":1,"children":[{"value":2,"children":[{"value":3,"children":[]}]}]}})"));
  EXPECT_FALSE(Matches(g, R"({"root":{"value":1,"children":[{"value":2}]}})"));
  auto root_ref =
      Compile(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})");
  EXPECT_TRUE(Matches(root_ref, "[1,[2,[3]],[]]"));
  EXPECT_FALSE(Matches(root_ref, "[1,[2,[true]]]"));
  // allOf of one schema (pydantic's wrapping of a referenced model with a description).
  auto all_of = Compile(R"({"definitions":{"A":{"type":"integer"}},
      "properties":{"x":{"allOf":[{"$ref":"#/definitions/A"}],"description":"d"}}})");
  EXPECT_TRUE(Matches(all_of, R"({"x":3})"));
  EXPECT_TRUE(Matches(all_of, R"({})"));
  EXPECT_FALSE(Matches(all_of, R"({"x":"3"})"));
}

TEST(JsonSchemaGrammarTest, RefusesWhatItCannotEnforceNamingTheKeywordAndWhere) {
  EXPECT_EQ(
      RefusalOf(R"x({"type":"object","properties":{"zip":{"type":"string","pattern":"(?=1)"}}})x"),
      "json_schema: regex: lookaround is not supported (at offset 2) (at "
      "#/properties/zip/pattern)");
  EXPECT_EQ(RefusalOf(R"({"type":"integer","multipleOf":2})"),
            "json_schema: 'multipleOf' is not supported (at #)");
  EXPECT_NE(RefusalOf(R"({"type":"number","minimum":0})").find("on numbers"), std::string::npos);
  EXPECT_NE(RefusalOf(R"({"minimum":0})").find("\"integer\""), std::string::npos);
  EXPECT_NE(RefusalOf(R"({"type":"integer","minimum":5,"maximum":4})").find("no integer"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"allOf":[{"type":"integer"},{"type":"number"}]})").find("allOf"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"$ref":"https://example.com/s.json"})").find("inside the schema"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"$ref":"#/$defs/Missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(RefusalOf(R"({"type":"decimal"})").find("unknown type 'decimal'"), std::string::npos);
  EXPECT_NE(RefusalOf(R"({"properties":{"a":false}})").find("#/properties/a"), std::string::npos);
  EXPECT_NE(RefusalOf(R"({"type":"string","minLength":3,"maxLength":2})").find("minLength"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"type":"array","maxItems":100000})").find("maxItems"), std::string::npos);
  EXPECT_NE(RefusalOf(R"({"properties":{"a":{}},"required":["b"]})").find("'b'"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"type":"array","uniqueItems":true})").find("uniqueItems"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"anyOf":[{"type":"string"}],"type":"string"})").find("anyOf"),
            std::string::npos);
  EXPECT_NE(RefusalOf("[1]").find("must be an object"), std::string::npos);
  EXPECT_NE(RefusalOf(R"({"$ref":"#"})").find("matches no JSON text"), std::string::npos);
  // Annotations are not refused.
  EXPECT_NE(Compile(R"({"type":"string","format":"date-time","title":"t","description":"d",
                        "default":"x","examples":["y"],"$schema":"https://json-schema.org/x"})"),
            nullptr);
}

TEST(JsonSchemaGrammarTest, AHostilelyAmbiguousSchemaStaysBoundedAndStillMatches) {
  // Six levels of anyOf with six equal alternatives each, shared through $defs so that the
  // grammar stays small: 6^6 parses of the same text, unless the recognizer bounds its stacks.
  // (Written out inline, the copies would pass the grammar's size limit instead.)
  ojson schema = {{"$defs", {{"L0", {{"type", "integer"}}}}}};
  const char* kLevels[] = {"L0", "L1", "L2", "L3", "L4", "L5", "L6"};
  for (int d = 1; d <= 6; ++d) {
    const std::string ref = std::string("#/$defs/") + kLevels[d - 1];
    ojson alt = {{"type", "object"}, {"properties", {{"a", {{"$ref", ref}}}}}, {"required", {"a"}}};
    schema["$defs"][kLevels[d]] = {{"anyOf", ojson::array({alt, alt, alt, alt, alt, alt})}};
  }
  schema["$ref"] = "#/$defs/L6";
  auto g = JsonSchemaGrammar(schema);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const std::string text = R"({"a":{"a":{"a":{"a":{"a":{"a":1}}}}}})";
  GrammarRecognizer r(*g);
  size_t most = 0;
  for (char c : text) {
    ASSERT_TRUE(r.Feed(static_cast<uint8_t>(c))) << c;
    most = std::max(most, r.num_stacks());
  }
  EXPECT_TRUE(r.complete());
  EXPECT_LE(most, GrammarRecognizer::kMaxStacks);
}

TEST(JsonSchemaGrammarTest, IntegerBoundsHoldEveryIntegerAndNothingElse) {
  // Every integer of a window around the bounds, against the bounds themselves.
  struct Bounds {
    const char* schema;
    int64_t lo, hi;  // inclusive
  };
  const std::vector<Bounds> cases = {
      {R"({"type":"integer","minimum":0,"maximum":100})", 0, 100},
      {R"({"type":"integer","minimum":-37,"maximum":1234})", -37, 1234},
      {R"({"type":"integer","exclusiveMinimum":-5.5,"exclusiveMaximum":19})", -5, 18},
      {R"({"type":"integer","minimum":1.2,"maximum":9.8})", 2, 9},
      {R"({"type":"integer","minimum":-300,"maximum":-120})", -300, -120},
      {R"({"type":"integer","minimum":7})", 7, 9999999999999999},
      {R"({"type":"integer","maximum":-7})", -9999999999999999, -7},
  };
  for (const Bounds& c : cases) {
    auto g = Compile(c.schema);
    ASSERT_NE(g, nullptr) << c.schema;
    for (int64_t v = -1500; v <= 1500; ++v) {
      EXPECT_EQ(Matches(g, std::to_string(v)), v >= c.lo && v <= c.hi) << c.schema << " " << v;
    }
    for (int64_t v : {c.lo, c.hi}) {
      if (v > -1500 && v < 1500) continue;
      EXPECT_TRUE(Matches(g, std::to_string(v))) << c.schema << " " << v;
    }
    EXPECT_FALSE(Matches(g, "-0")) << c.schema;
    EXPECT_FALSE(Matches(g, "007")) << c.schema;
    EXPECT_FALSE(Matches(g, "5.0")) << c.schema;
  }
  auto big = Compile(R"({"type":"integer","minimum":123456789012,"maximum":123456799999})");
  EXPECT_TRUE(Matches(big, "123456789012"));
  EXPECT_TRUE(Matches(big, "123456795555"));
  EXPECT_FALSE(Matches(big, "123456789011"));
  EXPECT_FALSE(Matches(big, "123456800000"));
}

TEST(JsonSchemaGrammarTest, PatternsHoldTheStringsDecodedText) {
  const std::vector<Case> cases = {
      {R"({"type":"string","pattern":"^[0-9]{5}$"})",
       {R"("12345")"},
       {R"("1234")", R"("123456")", R"("abcde")"}},
      // Unanchored, as JSON Schema: any string containing a match.
      {R"({"type":"string","pattern":"ab"})", {R"("ab")", R"("xxabyy")"}, {R"("xyz")", R"("a b")"}},
      {R"({"type":"string","pattern":"^\\d{4}-\\d{2}-\\d{2}$"})",
       {R"("2026-12-03")"},
       {R"("2026-1-03")", R"("2026-12-03x")"}},
      {R"({"type":"string","pattern":"^(cat|dog)s?$"})",
       {R"("cat")", R"("dogs")"},
       {R"("cats?")", R"("cow")"}},
      {R"({"type":"string","pattern":"^[a-z.]+@[^@ ]+\\.com$"})",
       {R"("a.b@x-y.com")"},
       {R"("a@b@c.com")", R"("A@b.com")"}},
      // Characters that JSON escapes are matched in their escaped form.
      {R"({"type":"string","pattern":"^a\"b\\\\c\\n$"})",
       {R"("a\"b\\c\n")"},
       {"\"a\"b\\c\n\"", R"("a\"b\\c\u000a")"}},
      // '.' is one character, a multi-byte one too.
      {R"({"type":"string","pattern":"^.$"})",
       {"\"\xC3\xA9\"", R"("x")", R"("\"")"},
       {R"("ab")", R"("")", R"("\n")"}},
      {R"({"type":"string","pattern":"^[^0-9]{2,}$"})",
       {"\"ab\"", "\"\xC3\xA9z\""},
       {R"("a1")", R"("a")"}},
  };
  for (const Case& c : cases) {
    auto g = Compile(c.schema);
    ASSERT_NE(g, nullptr) << c.schema;
    for (const char* text : c.accept) EXPECT_TRUE(Matches(g, text)) << c.schema << "\n" << text;
    for (const char* text : c.reject) EXPECT_FALSE(Matches(g, text)) << c.schema << "\n" << text;
  }
  for (const char* bad :
       {"\\1", "a^b", "[\xC3\xA9]", "a{2000}", "(ab", "ab)", "[z-a]", "\\b", "*a", "a**"}) {
    EXPECT_NE(RefusalOf(ojson{{"type", "string"}, {"pattern", bad}}.dump()).find("regex: "),
              std::string::npos)
        << bad;
  }
  EXPECT_NE(RefusalOf(R"({"type":"string","pattern":"a","maxLength":3})").find("maxLength"),
            std::string::npos);
  // guided_regex: the whole raw output.
  auto raw = RegexGrammar("(yes|no)\n?");
  ASSERT_TRUE(raw.ok()) << raw.status().message();
  EXPECT_TRUE(Matches(*raw, "yes"));
  EXPECT_TRUE(Matches(*raw, "no\n"));
  EXPECT_FALSE(Matches(*raw, "yes!"));
  EXPECT_FALSE(Matches(*raw, "\"yes\""));
}

// OpenAI's string formats. Every accepted value here is accepted by pydantic 2.13's
// validate_json for the matching type (datetime, date, time, timedelta, UUID, IPv4Address,
// IPv6Address), the values pydantic itself dumps included.
TEST(JsonSchemaGrammarTest, FormatsHoldStringsToWhatPydanticParses) {
  struct FormatCase {
    const char* format;
    std::vector<const char*> accept, reject;
  };
  const std::vector<FormatCase> cases = {
      {"date-time",
       {"2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123456+01:00", "2024-02-29T23:59:59-23:59",
        "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999+00:00", "2000-02-29T12:00:00Z"},
       {"21 January, 2020", "2024-01-02T03:04:05", "2024-01-02 03:04:05Z", "2024-13-01T00:00:00Z",
        "2024-02-30T00:00:00Z", "2023-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
        "0000-01-01T00:00:00Z", "2024-01-02T24:00:00Z", "2024-01-02T03:04:60Z",
        "2024-01-02T03:04:05+24:00", "2024-01-02T03:04:05.Z", "2024-01-02t03:04:05z", "]["}},
      {"date",
       {"2024-01-02", "2024-02-29", "2000-02-29", "0400-02-29", "0004-02-29", "2023-04-30",
        "2023-12-31"},
       {"2024-13-01", "2024-00-10", "2024-01-00", "2024-04-31", "2023-02-29", "2100-02-29",
        "0000-01-01", "2024-1-02", "20240102", "2024-01-02T00:00:00Z", ""}},
      {"time",
       {"03:04:05", "03:04:05Z", "03:04:05.123456", "23:59:59.5+01:00", "00:00:00-23:59"},
       {"24:00:00", "03:04", "03:04:60", "3:04:05", "03:04:05+1:00", "03:04:05.", "noon"}},
      {"duration",
       {"P1DT2H3M4.5S", "PT0S", "-P1D", "-PT1.5S", "P2739Y9D", "P1Y2M3W4D", "P1WT1H", "PT1M", "P1M",
        "P1YT1S", "PT0.000001S", "P999999Y999M9999W999999DT99999H99999M999999999.999999999S"},
       {"P", "PT", "P1DT", "P1D1Y", "P1H", "PT1D", "P1.5D", "1D", "PT1.S", "P1000000D", "PT100000H",
        "--P1D", "P T1S"}},
      {"uuid",
       {"12345678-1234-1234-1234-123456789abc", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
        "00000000-0000-0000-0000-000000000000"},
       {"12345678123412341234123456789abc", "12345678-1234-1234-1234-123456789ab",
        "1234567g-1234-1234-1234-123456789abc", "{12345678-1234-1234-1234-123456789abc}"}},
      {"ipv4",
       {"0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.0.1"},
       {"256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5", "1.2.3.-4", "1..2.3"}},
      {"ipv6",
       {"::", "::1", "1::", "1:2:3:4:5:6:7:8", "1::2:3:4:5:6:7", "1:2:3:4:5:6:7::", "ABCD::ef",
        "fe80::1ff:fe23:4567:890a", "2001:db8:0:0:1:0:0:1", "1:2::7:8", "0001:0:0:0:0:0:0:0001"},
       {"1::2::3", ":1", "1:", "1:2:3:4:5:6:7", "1:2:3:4:5:6:7:8:9", "12345::1", "g::1",
        "1:2:3:4:5:6:7::8", ":::", "::ffff:1.2.3.4"}},
      {"hostname",
       {"localhost", "example.com", "a-b.c0.D9", "xn--bcher-kva.example", "1.2"},
       {"-a.com", "a-.com", "a..com", ".a.com", "a.com.", "a_b.com", "",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com"}},
      {"email",
       {"a@b.co", "first.last+tag@sub.example.org", "x_y-z@example.com", "o'neil@x.io"},
       {"a@b", "@b.com", "a@", "a..b@c.com", ".a@b.com", "a.@b.com", "a@b@c.com", "a b@c.com",
        "a@-b.com", "a@b.1com"}},
  };
  for (const FormatCase& c : cases) {
    const std::string schema = ojson{{"type", "string"}, {"format", c.format}}.dump();
    auto g = Compile(schema);
    ASSERT_NE(g, nullptr) << schema;
    for (const char* text : c.accept) {
      EXPECT_TRUE(Matches(g, ojson(text).dump())) << schema << "\n" << text;
    }
    for (const char* text : c.reject) {
      EXPECT_FALSE(Matches(g, ojson(text).dump())) << schema << "\n" << text;
    }
    EXPECT_FALSE(Matches(g, "1")) << schema;  // still a string
  }
  // In place of pydantic's fields: {"type": "string", "format": "date-time"} under properties.
  auto model = Compile(R"({"type":"object","properties":{"when":{"type":"string",
      "format":"date-time","title":"When"},"id":{"type":"string","format":"uuid"}},
      "required":["when","id"]})");
  EXPECT_TRUE(Matches(
      model, R"({"when":"2024-01-02T03:04:05Z","id":"12345678-1234-1234-1234-123456789abc"})"));
  EXPECT_FALSE(
      Matches(model, R"({"when":"tomorrow","id":"12345678-1234-1234-1234-123456789abc"})"));
  // A nullable one (Optional[datetime]).
  auto optional = Compile(R"({"anyOf":[{"type":"string","format":"date"},{"type":"null"}]})");
  EXPECT_TRUE(Matches(optional, R"("2024-01-02")"));
  EXPECT_TRUE(Matches(optional, "null"));
  EXPECT_FALSE(Matches(optional, R"("2024-01-32")"));
  // Other formats stay annotations.
  auto other = Compile(R"({"type":"string","format":"uri"})");
  EXPECT_TRUE(Matches(other, R"("not a uri")"));
  // A known format beside a pattern or a length: refused, naming where.
  EXPECT_EQ(RefusalOf(R"({"properties":{"d":{"type":"string","format":"date","maxLength":10}}})"),
            "json_schema: 'format' \"date\" beside pattern, minLength or maxLength is not "
            "supported (at #/properties/d)");
  EXPECT_NE(RefusalOf(R"({"type":"string","format":"uuid","pattern":"^a"})").find("'format'"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"type":"string","format":"email","minLength":3})").find("'format'"),
            std::string::npos);
}

TEST(JsonSchemaGrammarTest, PropertiesComeInTheSchemasOrder) {
  // ordered_json keeps the schema's order ("z" before "a"), as users write a reasoning field
  // before the answer it leads to.
  auto g = Compile(R"({"properties":{"z":{"type":"integer"},"a":{"type":"integer"}},
                       "required":["a","z"]})");
  EXPECT_TRUE(Matches(g, R"({"z":1,"a":2})"));
  EXPECT_FALSE(Matches(g, R"({"a":2,"z":1})"));
}

TEST(ToolCallGrammarTest, CallsNameAToolWithItsOwnArgumentsOrAnswer) {
  const ojson weather = ojson::parse(R"({"type":"object","properties":{
      "city":{"type":"string"},"unit":{"$ref":"#/$defs/Unit"}},"required":["city"],
      "$defs":{"Unit":{"enum":["C","F"]}}})");
  const ojson time = ojson::parse(R"({"type":"object","properties":{"tz":{"type":"string"}},
      "required":["tz"],"additionalProperties":false})");
  const std::vector<ToolSchema> tools = {{"get_weather", &weather, "tools[0].function.parameters"},
                                         {"get_time", &time, "tools[1].function.parameters"}};
  auto one = ToolCallGrammar(tools, /*may_answer=*/false, /*parallel=*/false);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_TRUE(Matches(
      *one, R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"C"}}]})"));
  EXPECT_TRUE(
      Matches(*one, R"({ "tool_calls": [ {"name": "get_time", "arguments": {"tz": "UTC"}} ] })"));
  EXPECT_FALSE(
      Matches(*one, R"({"tool_calls":[{"name":"get_time","arguments":{"city":"Paris"}}]})"));
  EXPECT_FALSE(Matches(*one, R"({"tool_calls":[{"name":"get_news","arguments":{}}]})"));
  EXPECT_FALSE(Matches(*one, R"({"tool_calls":[]})"));
  EXPECT_FALSE(Matches(
      *one,
      R"({"tool_calls":[{"name":"get_time","arguments":{"tz":"a"}},{"name":"get_time","arguments":{"tz":"b"}}]})"));
  EXPECT_FALSE(Matches(*one, R"({"response":"hi"})"));
  auto many = ToolCallGrammar(tools, /*may_answer=*/true, /*parallel=*/true);
  ASSERT_TRUE(many.ok());
  EXPECT_TRUE(Matches(
      *many,
      R"({"tool_calls":[{"name":"get_time","arguments":{"tz":"a"}},{"name":"get_weather","arguments":{"city":"b"}}]})"));
  EXPECT_TRUE(Matches(*many, R"({"response":"It is sunny."})"));
  const ojson bad =
      ojson::parse(R"({"type":"object","properties":{"n":{"type":"integer","multipleOf":2}}})");
  auto refused =
      ToolCallGrammar({tools[0], {"count", &bad, "tools[1].function.parameters"}}, true, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "tools[1].function.parameters: json_schema: 'multipleOf' is not supported (at "
            "#/properties/n)");
}

TEST(ToolCallGrammarTest, AResponseSchemaShapesTheDirectAnswer) {
  const ojson args = ojson::parse(R"({"type":"object","properties":{"q":{"type":"string"}}})");
  // The response schema's own $refs resolve inside it, apart from the tools' documents.
  const ojson city = ojson::parse(R"({"type":"object","properties":{"city":{"$ref":"#/$defs/C"}},
      "required":["city"],"additionalProperties":false,"$defs":{"C":{"enum":["Paris","Rome"]}}})");
  const ToolSchema response{"", &city, "response_format.json_schema.schema"};
  auto g =
      ToolCallGrammar({{"search", &args, "tools[0].function.parameters"}}, true, true, &response);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(Matches(*g, R"({"response": {"city": "Rome"}})"));
  EXPECT_TRUE(Matches(*g, R"({"tool_calls":[{"name":"search","arguments":{"q":"x"}}]})"));
  EXPECT_FALSE(Matches(*g, R"({"response": "Rome"})"));
  EXPECT_FALSE(Matches(*g, R"({"response": {"city": "Oslo"}})"));
  const ojson bad = ojson::parse(R"({"type":"number","multipleOf":2})");
  const ToolSchema refused_schema{"", &bad, "response_format.json_schema.schema"};
  auto refused = ToolCallGrammar({{"search", &args, "tools[0].function.parameters"}}, true, true,
                                 &refused_schema);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().rfind("response_format.json_schema.schema: ", 0), 0u);
}

// ---- random walks: whatever the grammar lets through is valid, and it never strands ---------

// Walks random allowed bytes until the text is complete (ending there with some probability), or
// gives up after `limit` bytes. Returns false if it gave up.
bool RandomSentence(const std::shared_ptr<const Grammar>& g, std::mt19937* rng, size_t limit,
                    std::string* out) {
  GrammarRecognizer r(g);
  out->clear();
  std::uniform_real_distribution<double> u(0.0, 1.0);
  while (out->size() < limit) {
    if (r.complete() && u(*rng) < 0.5) return true;
    const Grammar::ByteSet next = r.NextBytes();
    std::vector<uint8_t> bytes;
    for (int c = 0; c < 256; ++c) {
      if ((next[static_cast<size_t>(c) >> 6] >> (c & 63)) & 1u)
        bytes.push_back(static_cast<uint8_t>(c));
    }
    if (bytes.empty()) {
      EXPECT_TRUE(r.complete()) << "stranded after: " << *out;
      return r.complete();
    }
    // Closing bytes are favoured so that the walks end.
    uint8_t c = bytes[std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(*rng)];
    for (uint8_t closer : {'"', '}', ']'}) {
      if (next[closer >> 6] >> (closer & 63) & 1u && u(*rng) < 0.3) c = closer;
    }
    EXPECT_TRUE(r.Feed(c));
    out->push_back(static_cast<char>(c));
  }
  return false;
}

TEST(JsonSchemaGrammarTest, RandomSentencesAreValidJsonOfTheSchemasShape) {
  struct Walk {
    const char* schema;
    std::function<bool(const nlohmann::json&)> check;
  };
  const std::vector<Walk> walks = {
      {R"({"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer"},
          "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},"required":["n"]})",
       [](const nlohmann::json& j) {
         return j.is_object() && j.at("n").is_number_integer() &&
                (!j.contains("name") || j["name"].is_string()) &&
                (!j.contains("tags") || (j["tags"].is_array() && j["tags"].size() <= 2)) &&
                j.size() <= 3;
       }},
      {R"({"anyOf":[{"type":"number"},{"type":"array","items":{"type":"null"}}]})",
       [](const nlohmann::json& j) {
         if (j.is_number()) return true;
         if (!j.is_array()) return false;
         for (const auto& e : j) {
           if (!e.is_null()) return false;
         }
         return true;
       }},
      {"true", [](const nlohmann::json&) { return true; }},
  };
  std::mt19937 rng(3);
  for (const Walk& w : walks) {
    auto g = Compile(w.schema);
    ASSERT_NE(g, nullptr);
    int done = 0;
    for (int i = 0; i < 200; ++i) {
      std::string text;
      if (!RandomSentence(g, &rng, 4000, &text)) continue;
      ++done;
      nlohmann::json j;
      ASSERT_NO_THROW(j = nlohmann::json::parse(text)) << w.schema << "\n" << text;
      EXPECT_TRUE(w.check(j)) << w.schema << "\n" << text;
    }
    EXPECT_GT(done, 100) << w.schema;
  }
}

// ---- the constraint: the trie walk masks as feeding every token would ------------------------

TEST(GrammarConstraintTest, TheTrieWalkMasksExactlyAsFeedingEveryToken) {
  // A vocabulary of JSON-ish pieces, shared prefixes and plain string text among them.
  auto v = std::make_shared<ConstraintVocab>();
  v->bytes.push_back("");
  v->kind.push_back(ConstraintVocab::kEndOfGeneration);
  v->bytes.push_back("");
  v->kind.push_back(ConstraintVocab::kNever);
  for (const char* p :
       {"{",      "}",         "{\"",   "\":", "\"",     "a",        "ab",       "abc",   "b c",
        "1",      "12",        "0",     ",",   ", ",     " ",        "[",        "]",     ":",
        "true",   "tr",        "nul",   "l",   "\"}",    "\n",       "\":\"",    "\",\"", "name",
        "\"name", "\"name\":", "me",    "m",   "\"n\":", "\"s\":\"", "tags",     "\\",    "\\n",
        "\\u00",  "e9",        "-",     ".",   "e",      "null",     "\xC3\xA9", "\xC3",  "\xA9",
        "n",      "\"a\"",     "\"b\"", "]}",  "\t"}) {
    v->bytes.push_back(p);
    v->kind.push_back(ConstraintVocab::kText);
  }
  v->bytes.push_back("\"");  // a second id with the same bytes
  v->kind.push_back(ConstraintVocab::kText);
  v->Index();
  auto g = Compile(R"({"type":"object","properties":{"name":{"type":"string"},
      "n":{"type":"number"},"tags":{"type":"array","items":{"enum":["a","b"]}},
      "s":{"type":"string","maxLength":3}},"required":["name"]})");
  ASSERT_NE(g, nullptr);
  std::mt19937 rng(9);
  std::normal_distribution<float> noise(0.0f, 2.0f);
  int steps = 0, completed = 0;
  for (int run = 0; run < 200; ++run) {
    GrammarConstraint c(v, g);
    std::string text;
    for (int step = 0; step < 80; ++step) {
      std::vector<float> logits(v->bytes.size() + 3);  // + padding past the vocabulary
      for (float& l : logits) l = noise(rng);
      std::vector<float> brute = logits;
      c.Mask(logits);
      // What feeding every token's bytes says; with no text token allowed and the text not
      // complete, the constraint offers end-of-generation rather than nothing.
      bool any_text = false;
      for (size_t id = 0; id < v->kind.size(); ++id) {
        any_text |= v->kind[id] == ConstraintVocab::kText && c.state().Accepts(v->bytes[id]);
      }
      for (size_t id = 0; id < brute.size(); ++id) {
        bool ok = false;
        if (id < v->kind.size()) {
          ok = v->kind[id] == ConstraintVocab::kEndOfGeneration
                   ? c.complete() || !any_text
                   : v->kind[id] == ConstraintVocab::kText && c.state().Accepts(v->bytes[id]);
        }
        ASSERT_EQ(!std::isinf(logits[id]), ok)
            << "run " << run << " after '" << text << "' token '"
            << (id < v->bytes.size() ? v->bytes[id] : "pad") << "'";
      }
      const auto tok =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      if (v->kind[static_cast<size_t>(tok)] == ConstraintVocab::kEndOfGeneration) {
        if (c.complete()) {
          ++completed;
          EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
        }
        break;
      }
      ++steps;
      c.Accept(tok);
      text += v->bytes[static_cast<size_t>(tok)];
    }
  }
  EXPECT_GT(steps, 1000);
  EXPECT_GT(completed, 10);
}

TEST(GrammarConstraintTest, InsideAFreeStringPlainBytesLeaveTheStateAsItIs) {
  auto g = Compile(R"({"type":"object","properties":{"s":{"type":"string"}},"required":["s"]})");
  GrammarRecognizer r(g);
  ASSERT_TRUE(r.Feed(R"({"s":"ab)"));
  EXPECT_TRUE(r.InPlainString());
  GrammarRecognizer before = r;
  ASSERT_TRUE(r.Feed("x y\xC3\xA9"));
  EXPECT_TRUE(r.SameStacksAs(before));
  ASSERT_TRUE(r.Feed("\\"));  // in an escape: not plain
  EXPECT_FALSE(r.InPlainString());
  // A bounded string counts its characters: never plain.
  auto bounded = Compile(R"({"type":"string","maxLength":5})");
  GrammarRecognizer b(bounded);
  ASSERT_TRUE(b.Feed("\"a"));
  EXPECT_FALSE(b.InPlainString());
}

}  // namespace
// ---- found by a differential run against the jsonschema library ------------------------------

// A constraining keyword beside $ref, allOf, anyOf, oneOf, const or enum would go unenforced:
// refused. Annotations may stand there, and `type` beside const/enum, which keeps the values of
// that type.
TEST(JsonSchemaGrammarTest, KeywordsBesideAWholeValueKeywordAreRefusedNotDropped) {
  EXPECT_NE(RefusalOf(R"({"enum":["123"],"maxLength":1})").find("'maxLength' beside 'enum'"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"$ref":"#/$defs/s","maxLength":2,"$defs":{"s":{"type":"string"}}})")
                .find("'maxLength' beside '$ref'"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"anyOf":[{"type":"object"}],"required":["a"]})").find("'required'"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"allOf":[{"type":"string"}],"maxLength":1})").find("'maxLength'"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"const":7,"type":"string"})").find("no value is valid"),
            std::string::npos);
  auto e = Compile(R"({"type":"integer","enum":[1,2.5],"title":"n"})");
  EXPECT_TRUE(Matches(e, "1"));
  EXPECT_FALSE(Matches(e, "2.5"));
  auto r = Compile(R"({"$ref":"#/$defs/s","description":"d","$defs":{"s":{"type":"string"}}})");
  EXPECT_TRUE(Matches(r, R"("abc")"));
  EXPECT_FALSE(Matches(r, "1"));
}

// An integer bound past the 16 digits allows every integer on its far side and none on its near.
TEST(JsonSchemaGrammarTest, IntegerBoundsPastSixteenDigits) {
  EXPECT_NE(RefusalOf(R"({"type":"integer","minimum":1e17})").find("no integer"),
            std::string::npos);
  EXPECT_NE(RefusalOf(R"({"type":"integer","exclusiveMaximum":-2e16})").find("no integer"),
            std::string::npos);
  auto g = Compile(R"({"type":"integer","minimum":-1e17,"maximum":3})");
  EXPECT_TRUE(Matches(g, "-5"));
  EXPECT_FALSE(Matches(g, "4"));
}

// Other keys beside declared names with escapes or non-ASCII characters stay JSON (the trie
// never branches inside an escape or a UTF-8 character), and no other key spells a declared
// name another way (\u0061 for "a": the object would hold it twice).
TEST(JsonSchemaGrammarTest, OtherKeysAreJsonAndNeverADeclaredNameSpeltAnotherWay) {
  auto nl = Compile(R"({"type":"object","properties":{"a\nb":{"type":"integer"}},
                        "additionalProperties":true})");
  EXPECT_TRUE(Matches(nl, R"({"a\nb":1})"));
  EXPECT_TRUE(Matches(nl, R"({"ab":1})"));
  EXPECT_FALSE(Matches(nl, R"({"a\":1})"));
  EXPECT_FALSE(Matches(nl, R"({"a\q":1})"));
  auto e = Compile(R"({"type":"object","properties":{"é":{"type":"integer"}},
                       "additionalProperties":true})");
  EXPECT_TRUE(Matches(e, "{\"\xc3\xa9\":1}"));
  EXPECT_FALSE(Matches(e, "{\"\xc3\":1}"));
  EXPECT_FALSE(Matches(e, "{\"\xc3" "a\":1}"));
  EXPECT_FALSE(Matches(e, R"({"\u00e9":"x"})"));
  auto a = Compile(R"({"type":"object","properties":{"id":{"type":"integer"}},
                       "additionalProperties":true})");
  EXPECT_FALSE(Matches(a, R"({"\u0069d":"x"})"));
  EXPECT_FALSE(Matches(a, R"({"i\u0064":"x"})"));
  EXPECT_TRUE(Matches(a, R"({"id":1,"x\ny":"z"})"));
  EXPECT_TRUE(Matches(a, R"({"x\u001fy":"z"})"));
}

// A string's \u escapes are characters: a surrogate pair is one (minLength, maxLength), and a
// lone surrogate is none (pydantic, and so the openai client's parse(), refuse it).
TEST(JsonSchemaGrammarTest, SurrogatePairsAreOneCharacterAndLoneSurrogatesNone) {
  auto s = Compile(R"({"type":"string"})");
  EXPECT_TRUE(Matches(s, R"("\ud83d\ude00")"));
  EXPECT_TRUE(Matches(s, R"("\uD83D\uDE00")"));
  EXPECT_TRUE(Matches(s, R"("\ud7ff\ue000")"));
  EXPECT_FALSE(Matches(s, R"("\ud800")"));
  EXPECT_FALSE(Matches(s, R"("\udc00\ud800")"));
  EXPECT_FALSE(Matches(Compile(R"({"type":"string","minLength":2})"), R"("\ud83d\ude00")"));
  EXPECT_TRUE(Matches(Compile(R"({"type":"string","maxLength":1})"), R"("\ud83d\ude00")"));
}

}  // namespace kinfer
