#include "runtime/server/tool_answer_stream.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/server/tool_calls.h"

namespace kinfer {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using Delta = ToolAnswerStream::Delta;
using Kind = ToolAnswerStream::Delta::Kind;

// What a whole stream adds up to.
struct Sum {
  std::string content;
  std::vector<std::string> names;
  std::vector<std::string> args;
  std::vector<Kind> order;  // the kinds in the order they came, consecutive repeats folded
};

Sum Add(const std::vector<Delta>& deltas) {
  Sum s;
  for (const Delta& d : deltas) {
    if (s.order.empty() || s.order.back() != d.kind || d.kind == Kind::kCallStart) {
      s.order.push_back(d.kind);
    }
    switch (d.kind) {
      case Kind::kContent:
        s.content += d.text;
        break;
      case Kind::kCallStart:
        EXPECT_EQ(d.index, static_cast<int>(s.names.size())) << "calls start in order";
        s.names.push_back(d.text);
        s.args.emplace_back();
        break;
      case Kind::kArguments:
        EXPECT_GE(d.index, 0);
        EXPECT_LT(d.index, static_cast<int>(s.names.size())) << "arguments after the name";
        if (d.index >= 0 && d.index < static_cast<int>(s.args.size())) {
          s.args[static_cast<size_t>(d.index)] += d.text;
        }
        break;
    }
  }
  return s;
}

// Feeds `text` cut at the given lengths (the rest as one last piece).
std::vector<Delta> FeedPieces(ToolAnswerStream* r, const std::string& text,
                              const std::vector<size_t>& cuts) {
  std::vector<Delta> out;
  size_t at = 0;
  for (size_t c : cuts) {
    const size_t n = std::min(c, text.size() - at);
    r->Feed(std::string_view(text).substr(at, n), &out);
    at += n;
  }
  r->Feed(std::string_view(text).substr(at), &out);
  return out;
}

std::vector<Delta> FeedBytes(ToolAnswerStream* r, const std::string& text) {
  return FeedPieces(r, text, std::vector<size_t>(text.size(), 1));
}

TEST(ToolAnswerStreamTest, CallsStreamTheirNameThenTheirArgumentsWithoutOuterWhitespace) {
  const std::string text =
      "{\"tool_calls\": [\n  {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris, "
      "{France}\", \"days\": [1, 2],\n \"q\": \"a \\\"b\\\" \\n\"}},\n  {\"name\": \"noop\", "
      "\"arguments\": {}}\n]}";
  ToolAnswerStream r;
  const Sum s = Add(FeedBytes(&r, text));
  EXPECT_EQ(r.answer(), ToolAnswerStream::Answer::kCalls);
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.calls(), 2);
  ASSERT_EQ(s.names, (std::vector<std::string>{"get_weather", "noop"}));
  // Whitespace inside strings stays, outside them goes; escapes as written.
  EXPECT_EQ(s.args[0], R"({"city":"Paris, {France}","days":[1,2],"q":"a \"b\" \n"})");
  EXPECT_EQ(s.args[1], "{}");
  EXPECT_EQ(s.order, (std::vector<Kind>{Kind::kCallStart, Kind::kArguments, Kind::kCallStart,
                                        Kind::kArguments}));
  EXPECT_TRUE(s.content.empty());
}

TEST(ToolAnswerStreamTest, TheNameComesAsSoonAsItsStringCloses) {
  ToolAnswerStream r;
  std::vector<Delta> out;
  r.Feed(R"({"tool_calls": [{"name": "get_wea)", &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(r.answer(), ToolAnswerStream::Answer::kCalls);
  r.Feed(R"(ther")", &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, Kind::kCallStart);
  EXPECT_EQ(out[0].text, "get_weather");
  out.clear();
  r.Feed(R"(, "arguments": {"ci)", &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, Kind::kArguments);
  EXPECT_EQ(out[0].text, R"({"ci)");
  out.clear();
  r.Feed(R"(ty": "Paris"}}]})", &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, R"(ty":"Paris"})");
  EXPECT_TRUE(r.complete());
}

TEST(ToolAnswerStreamTest, AStringResponseIsDecodedAsItComes) {
  // \u00e9, a surrogate pair (U+1F600), a lone high surrogate, raw UTF-8 (3 and 4 bytes).
  const std::string text = R"({"response": "Caf\u00e9 \"ok\"\n\ud83d\ude00 \ud800x \\ / \/ )"
                           "\xe2\x82\xac \xf0\x9f\x8d\x95\"}";
  const std::string expected =
      "Caf\xc3\xa9 \"ok\"\n\xf0\x9f\x98\x80 \xef\xbf\xbdx \\ / / \xe2\x82\xac \xf0\x9f\x8d\x95";
  for (int mode = 0; mode < 2; ++mode) {
    ToolAnswerStream r;
    std::vector<Delta> out = mode == 0 ? FeedPieces(&r, text, {}) : FeedBytes(&r, text);
    EXPECT_EQ(r.answer(), ToolAnswerStream::Answer::kResponse);
    EXPECT_TRUE(r.complete());
    EXPECT_EQ(Add(out).content, expected) << "mode " << mode;
    if (mode == 1) {
      // Fed a byte at a time, every content piece is still whole UTF-8 (no split sequence).
      for (const Delta& d : out) {
        ASSERT_EQ(d.kind, Kind::kContent);
        EXPECT_NO_THROW((void)json(d.text).dump()) << "piece " << d.text;
      }
    }
  }
}

TEST(ToolAnswerStreamTest, AJsonResponseIsItsValueWithoutOuterWhitespace) {
  ToolAnswerStream r;
  const Sum s = Add(FeedBytes(&r,
                              "{\"response\": {\"a\": [1, 2.5e3, true, null],\n  \"b\": "
                              "\"x y\"}\n}"));
  EXPECT_EQ(r.answer(), ToolAnswerStream::Answer::kResponse);
  EXPECT_EQ(s.content, R"({"a":[1,2.5e3,true,null],"b":"x y"})");
  ToolAnswerStream scalar;
  EXPECT_EQ(Add(FeedBytes(&scalar, R"({"response": -12.5 })")).content, "-12.5");
}

TEST(ToolAnswerStreamTest, ScalarArgumentsEndAtTheirDelimiter) {
  ToolAnswerStream r;
  const Sum s = Add(FeedBytes(
      &r,
      R"({"tool_calls": [{"name": "a", "arguments": 5 }, {"name": "b", "arguments": "s,}"}]})"));
  ASSERT_EQ(s.args.size(), 2u);
  EXPECT_EQ(s.args[0], "5");
  EXPECT_EQ(s.args[1], R"("s,}")");
}

TEST(ToolAnswerStreamTest, ArgumentsBeforeTheNameAreHeldForIt) {
  ToolAnswerStream r;
  const Sum s = Add(FeedBytes(&r, R"({"tool_calls": [{"arguments": {"x": 1}, "name": "late"}]})"));
  ASSERT_EQ(s.names, std::vector<std::string>{"late"});
  EXPECT_EQ(s.args[0], R"({"x":1})");
}

TEST(ToolAnswerStreamTest, ACallWithoutANameNeverStartsAndTheIndicesStayDense) {
  // (Not the grammar's format, found by the fuzzer: the stream must not skip index 0.)
  const std::string text =
      R"({"tool_calls": [{"nme": "a", "arguments": {"y": 2}}, {"name": "b", "arguments": {"x": 1}}]})";
  ToolAnswerStream r;
  const std::vector<Delta> out = FeedBytes(&r, text);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind, Kind::kCallStart);
  EXPECT_EQ(out[0].index, 0);
  EXPECT_EQ(out[0].text, "b");
  EXPECT_EQ(out[1].index, 0);
  EXPECT_EQ(out[1].text, R"({"x":1})");
  EXPECT_EQ(r.calls(), 2);
  EXPECT_EQ(r.named_calls(), 1);
  EXPECT_FALSE(ReadToolAnswer(text).has_value()) << "every call needs its name";
  // A member with no value (`"response":,`): the next key is not streamed as the answer, fed
  // whole or a byte at a time.
  const std::string missing = R"({"response":,"key": "v"})";
  ToolAnswerStream whole, bytes;
  std::vector<Delta> w;
  whole.Feed(missing, &w);
  EXPECT_TRUE(w.empty());
  EXPECT_TRUE(FeedBytes(&bytes, missing).empty());
}

TEST(ToolAnswerStreamTest, TextThatIsNotAToolAnswerGivesNoDeltas) {
  for (const char* text : {"Hello there", R"({"other": {"response": "x"}})", "[1]"}) {
    ToolAnswerStream r;
    EXPECT_TRUE(FeedBytes(&r, text).empty()) << text;
    EXPECT_EQ(r.answer(), ToolAnswerStream::Answer::kNotToolFormat) << text;
    EXPECT_EQ(r.raw(), text);
  }
  ToolAnswerStream cut;
  std::vector<Delta> out;
  cut.Feed(R"({"tool_)", &out);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(cut.answer(), ToolAnswerStream::Answer::kUnknown);
  EXPECT_FALSE(cut.complete());
}

TEST(ToolAnswerStreamTest, BytesAfterTheAnswerAreIgnored) {
  ToolAnswerStream r;
  const Sum s = Add(FeedBytes(&r, R"({"response": "a"} {"response": "b"})"));
  EXPECT_EQ(s.content, "a");
  EXPECT_TRUE(r.complete());
}

// A random JSON value of bounded depth, with strings that hold JSON's delimiters and escapes.
ojson RandomValue(std::mt19937& rng, int depth) {
  const char* strings[] = {
      "",          "plain",       "a, b", "{x}",          "[1]", "q\"uote", "back\\slash",
      "new\nline", "caf\xc3\xa9", ":",    " spaced  out "};
  std::uniform_int_distribution<int> kind(0, depth > 2 ? 4 : 6);
  switch (kind(rng)) {
    case 0:
      return ojson(nullptr);
    case 1:
      return ojson(std::uniform_int_distribution<int>(0, 1)(rng) == 1);
    case 2:
      return ojson(std::uniform_int_distribution<int>(-1000, 1000)(rng));
    case 3:
      return ojson(std::uniform_real_distribution<double>(-10, 10)(rng));
    case 4:
      return ojson(strings[std::uniform_int_distribution<size_t>(0, 10)(rng)]);
    case 5: {
      ojson a = ojson::array();
      const int n = std::uniform_int_distribution<int>(0, 3)(rng);
      for (int i = 0; i < n; ++i) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      ojson o = ojson::object();
      const int n = std::uniform_int_distribution<int>(0, 3)(rng);
      for (int i = 0; i < n; ++i) o["k" + std::to_string(i)] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

// Property: for random arguments, written compact or indented and fed in random pieces, each
// call's streamed arguments parse to its value, and add up to what ReadToolAnswer gives.
TEST(ToolAnswerStreamTest, RandomArgumentsInRandomPiecesReadBackToTheirValues) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    ojson calls = ojson::array();
    const int n = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int i = 0; i < n; ++i) {
      ojson args = ojson::object();
      args["v"] = RandomValue(rng, 0);
      calls.push_back({{"name", "f" + std::to_string(i)}, {"arguments", args}});
    }
    const ojson answer = {{"tool_calls", calls}};
    const std::string text = iter % 2 == 0 ? answer.dump() : answer.dump(2);
    std::vector<size_t> cuts;
    for (size_t left = text.size(); left > 0;) {
      const size_t c = std::uniform_int_distribution<size_t>(1, 6)(rng);
      cuts.push_back(c);
      left -= std::min(c, left);
    }
    ToolAnswerStream r;
    const Sum s = Add(FeedPieces(&r, text, cuts));
    ASSERT_TRUE(r.complete()) << text;
    ASSERT_EQ(s.names.size(), static_cast<size_t>(n)) << text;
    auto whole = ReadToolAnswer(text);
    ASSERT_TRUE(whole.has_value()) << text;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(s.names[static_cast<size_t>(i)], "f" + std::to_string(i));
      EXPECT_EQ(ojson::parse(s.args[static_cast<size_t>(i)]),
                calls[static_cast<size_t>(i)]["arguments"])
          << text;
      EXPECT_EQ(whole->tool_calls[static_cast<size_t>(i)]["function"]["arguments"],
                s.args[static_cast<size_t>(i)]);
    }
  }
}

TEST(ReadToolAnswerTest, ACallWithoutArgumentsGetsAnEmptyObject) {
  auto a = ReadToolAnswer(R"({"tool_calls": [{"name": "now"}]})");
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->tool_calls.size(), 1u);
  EXPECT_EQ(a->tool_calls[0]["function"]["arguments"], "{}");
  // Not JSON, a cut answer, a call with no name: not a tool answer.
  EXPECT_FALSE(ReadToolAnswer(R"({"tool_calls": [{"name": "now"}]} x)").has_value());
  EXPECT_FALSE(ReadToolAnswer(R"({"tool_calls": [{"name": "now"})").has_value());
  EXPECT_FALSE(ReadToolAnswer(R"({"tool_calls": [{"arguments": {}}]})").has_value());
  EXPECT_FALSE(ReadToolAnswer(R"({"tool_calls": []})").has_value());
}

}  // namespace
}  // namespace kinfer
