#include "runtime/sample/json_recognizer.h"

#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kinfer {
namespace {

bool Whole(std::string_view s) {
  JsonRecognizer r;
  return r.Feed(s) && r.complete();
}
bool Prefix(std::string_view s) {
  JsonRecognizer r;
  return r.Feed(s);
}

TEST(JsonRecognizerTest, AcceptsObjectsOfEveryValueKind) {
  for (const char* s : {
           "{}",
           " \n{ }",
           R"({"a":1})",
           R"({"a": -0.5e+10, "b": [1, 2.25, -3E2, 0], "c": {"d": [true, false, null]}})",
           R"({"s": "esc \" \\ \/ \b \f \n \r \t \u00e9 \uD83D\uDE00", "u": "héllo 日本"})",
           R"({"empty": [], "o": {}, "nested": [[[{}]]]})",
           "{\"k\"\t:\r\n\"v\" , \"n\" : 0 }",
       }) {
    EXPECT_TRUE(Whole(s)) << s;
    EXPECT_TRUE(nlohmann::json::parse(s).is_object()) << s;  // the reference agrees
  }
}

TEST(JsonRecognizerTest, RejectsWhatJsonForbids) {
  for (const char* s : {
           "[]",                       // the root must be an object
           "1",                        //
           R"({"a":1,})",              // trailing comma
           R"({"a":[1,]})",            //
           R"({a:1})",                 // unquoted key
           R"({"a" 1})",               // no colon
           R"({"a":01})",              // leading zero
           R"({"a":1.})",              // no fraction digits
           R"({"a":.5})",              //
           R"({"a":1e})",              // no exponent digits
           R"({"a":+1})",              //
           R"({"a":-})",               //
           R"({"a":tru})",             //
           R"({"a":nul})",             //
           R"({"a":"\x"})",            // bad escape
           R"({"a":"\u12G4"})",        //
           "{\"a\":\"line\nbreak\"}",  // raw control character in a string
           R"({"a":1]})",              // mismatched close
           R"({"a":[1}})",             //
           R"({} {})",                 // anything after the object
           R"({}x)",                   //
       }) {
    EXPECT_FALSE(Whole(s)) << s;
    EXPECT_ANY_THROW((void)nlohmann::json::parse(s).get<nlohmann::json::object_t>()) << s;
  }
}

TEST(JsonRecognizerTest, EveryPrefixOfAValidObjectIsAccepted) {
  const std::string s = R"({"name": "kinfer", "v": [1, -2.5e-3, true, null, {"x": "\u00e9"}]})";
  for (size_t i = 0; i <= s.size(); ++i) {
    EXPECT_TRUE(Prefix(s.substr(0, i))) << i;
    EXPECT_EQ(Whole(s.substr(0, i)), i == s.size()) << i;
  }
}

TEST(JsonRecognizerTest, AcceptsDoesNotChangeTheState) {
  JsonRecognizer r;
  ASSERT_TRUE(r.Feed(R"({"a":)"));
  EXPECT_TRUE(r.Accepts("12"));
  EXPECT_FALSE(r.Accepts("}"));
  EXPECT_TRUE(r.Accepts("[]}"));
  ASSERT_TRUE(r.Feed("7}"));
  EXPECT_TRUE(r.complete());
  EXPECT_FALSE(r.Accepts(" "));  // nothing after the object, not even whitespace
}

TEST(JsonRecognizerTest, BoundsWhitespaceRunsAndDepth) {
  const std::string run(JsonRecognizer::kMaxWhitespaceRun, ' ');
  EXPECT_TRUE(Prefix("{" + run));
  EXPECT_FALSE(Prefix("{" + run + " "));
  EXPECT_TRUE(Prefix("{" + run + "\"a\":" + run + "1"));  // a new run after each token
  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonRecognizer::kMaxDepth; ++i) deep += "[";
  EXPECT_TRUE(Prefix(deep));
  EXPECT_FALSE(Prefix(deep + "["));
}

TEST(JsonRecognizerTest, AgreesWithNlohmannOnRandomMutations) {
  // Random edits of valid objects: whatever the recognizer takes whole, nlohmann parses as an
  // object, and whatever nlohmann parses as an object (within our whitespace bound), the
  // recognizer takes.
  const std::string seeds[] = {R"({"a": [1, 2.5, -3e4], "b": {"c": "d\n"}, "e": null})",
                               R"({"k": true, "l": false, "m": "x\"y", "n": [[], {}]})"};
  const std::string alphabet = "{}[]\":, -+.eE0123456789truefalsn\\u\"abc";
  std::mt19937 rng(7);
  int agreed_valid = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string s = seeds[trial % 2];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % s.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          s[pos] = c;
          break;
        case 1:
          s.insert(s.begin() + static_cast<std::ptrdiff_t>(pos), c);
          break;
        default:
          s.erase(pos, 1);
          break;
      }
    }
    bool reference = false;
    try {
      reference = nlohmann::json::parse(s).is_object();
    } catch (const nlohmann::json::exception&) {
    }
    ASSERT_EQ(Whole(s), reference) << s;
    agreed_valid += reference;
  }
  EXPECT_GT(agreed_valid, 100);  // the mutations do keep some objects valid
}

}  // namespace
}  // namespace kinfer
