#include "common/json_limits.h"

#include <gtest/gtest.h>

#include <string>

namespace kinfer {
namespace {

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(JsonLimitsTest, CountsArraysAndObjectsTogether) {
  EXPECT_TRUE(JsonNestingWithin("{}", 1));
  EXPECT_FALSE(JsonNestingWithin("{\"a\":[1]}", 1));
  EXPECT_TRUE(JsonNestingWithin("{\"a\":[1],\"b\":{\"c\":2}}", 2));
  EXPECT_FALSE(JsonNestingWithin("{\"a\":[{\"c\":2}]}", 2));
  EXPECT_TRUE(JsonNestingWithin("[[1],[2],[3]]", 2));  // siblings do not add up
}

TEST(JsonLimitsTest, TheDefaultLimitIsInclusive) {
  EXPECT_TRUE(JsonNestingWithin(Nested(kMaxJsonNesting)));
  EXPECT_FALSE(JsonNestingWithin(Nested(kMaxJsonNesting + 1)));
  EXPECT_FALSE(JsonNestingWithin(Nested(100000)));
}

TEST(JsonLimitsTest, BracketsInsideStringsDoNotCount) {
  const std::string deep_text = "{\"content\":\"" + Nested(1000) + "\"}";
  EXPECT_TRUE(JsonNestingWithin(deep_text, 1));
  // An escaped quote does not end the string; an escaped backslash before a quote does.
  EXPECT_TRUE(JsonNestingWithin(R"({"a":"\"[[[[","b":1})", 1));
  EXPECT_FALSE(JsonNestingWithin(R"({"a":"\\","b":[[1]]})", 2));
}

TEST(JsonLimitsTest, MalformedTextIsLeftToTheParser) {
  EXPECT_TRUE(JsonNestingWithin("]]]}}}", 1));
  EXPECT_TRUE(JsonNestingWithin("{\"unterminated", 1));
  EXPECT_TRUE(JsonNestingWithin("", 1));
}

}  // namespace
}  // namespace kinfer
