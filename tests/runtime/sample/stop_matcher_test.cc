#include "runtime/sample/stop_matcher.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

// Pushes every piece, collecting the output until a stop; returns output + Flush() when none stops.
struct Result {
  std::string text;
  bool stopped = false;
};

Result PushAll(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  StopMatcher m(std::move(stops));
  Result r;
  for (const auto& p : pieces) {
    bool stopped = false;
    r.text += m.Push(p, &stopped);
    if (stopped) {
      r.stopped = true;
      return r;
    }
  }
  r.text += m.Flush();
  return r;
}

// One byte a push.
std::vector<std::string> Bytes(const std::string& s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

TEST(StopMatcherTest, NoStopStringsPassesTextThroughAtOnce) {
  StopMatcher m({});
  bool stopped = true;
  EXPECT_EQ(m.Push("hello", &stopped), "hello");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, TextWithoutAStopIsFlushedIntact) {
  const std::string text =
      "The quick brown fox jumps over the lazy dog. \xC3\xA9t\xC3\xA9 \xE2\x82\xAC";
  const auto r = PushAll({"###", "\nUser:"}, Bytes(text));
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, text);
}

TEST(StopMatcherTest, StopSplitAcrossManyPushesIsDroppedWithWhatFollows) {
  const auto r = PushAll({"\nUser:"}, {"Hello", " world", "\n", "Us", "e", "r", ": more", " text"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "Hello world");
}

TEST(StopMatcherTest, PossibleStopPrefixIsHeldBackThenReleased) {
  StopMatcher m({"STOP"});
  bool stopped = false;
  EXPECT_EQ(m.Push("abc ST", &stopped), "abc ");
  EXPECT_EQ(m.Push("O", &stopped), "");
  EXPECT_EQ(m.Push("P?", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_TRUE(m.stopped());

  StopMatcher n({"STOP"});
  EXPECT_EQ(n.Push("abc ST", &stopped), "abc ");
  EXPECT_EQ(n.Push("OW", &stopped), "STOW");  // not a stop after all
  EXPECT_FALSE(stopped);
}

TEST(StopMatcherTest, ShorterOverlappingStopWinsWhenItCompletesFirst) {
  // "ab" completes before "abc" can.
  auto r = PushAll({"abc", "ab"}, Bytes("xxabc"));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "xx");
  r = PushAll({"abc", "ab"}, {"xxab", "c"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "xx");
}

TEST(StopMatcherTest, LongerStopHoldsBackTextThatCouldStillMatchIt) {
  // Only "abc" is a stop: "ab" is held until the next byte decides.
  StopMatcher m({"abc"});
  bool stopped = false;
  EXPECT_EQ(m.Push("xxab", &stopped), "xx");
  EXPECT_EQ(m.Push("d", &stopped), "abd");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcherTest, SelfOverlappingStopIsFound) {
  // "aab" inside "aaab": a naive matcher that restarts after "aa" + "a" misses it.
  const auto r = PushAll({"aab"}, Bytes("xaaab"));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "xa");
}

TEST(StopMatcherTest, EarliestOfSeveralStopsWins) {
  const auto r = PushAll({"END", "\n\n", "###"}, {"one\n", "two ###", " three END\n\n"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "one\ntwo ");
}

TEST(StopMatcherTest, StopInOnePushWithTextOnBothSides) {
  const auto r = PushAll({"</s>"}, {"answer</s>junk"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "answer");
}

TEST(StopMatcherTest, StopAtTheVeryStartGivesNothing) {
  const auto r = PushAll({"Q:"}, {"Q", ": next"});
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

TEST(StopMatcherTest, PushesAfterAStopReturnNothing) {
  StopMatcher m({"x"});
  bool stopped = false;
  EXPECT_EQ(m.Push("ax", &stopped), "a");
  EXPECT_TRUE(stopped);
  stopped = false;
  EXPECT_EQ(m.Push("more", &stopped), "");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopMatcherTest, FlushReturnsAHeldStopPrefix) {
  StopMatcher m({"###"});
  bool stopped = false;
  EXPECT_EQ(m.Push("done ##", &stopped), "done ");
  EXPECT_EQ(m.Flush(), "##");
  EXPECT_FALSE(stopped);
}

TEST(StopMatcherTest, MultiByteCharactersAreNeverSplit) {
  // "é" (2 bytes), "€" (3 bytes), "😀" (4 bytes), pushed one byte at a time.
  const std::string text =
      "a\xC3\xA9"
      "b\xE2\x82\xAC"
      "c\xF0\x9F\x98\x80"
      "d";
  StopMatcher m({"zz"});
  std::string out;
  for (const auto& b : Bytes(text)) {
    bool stopped = false;
    const std::string piece = m.Push(b, &stopped);
    // Every piece is whole characters: it never ends with a lead byte missing its continuations.
    if (!piece.empty()) {
      const auto last = static_cast<unsigned char>(piece.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "piece ends in a lead byte";
    }
    out += piece;
    for (const std::string& whole :
         {std::string("\xC3\xA9"), std::string("\xE2\x82\xAC"), std::string("\xF0\x9F\x98\x80")}) {
      // Pieces only ever contain whole characters, so each is either all out or not at all.
      EXPECT_TRUE(out.find(whole) != std::string::npos || out.find(whole[0]) == std::string::npos);
    }
  }
  out += m.Flush();
  EXPECT_EQ(out, text);
}

TEST(StopMatcherTest, MultiByteStopStringMatchesAcrossPushes) {
  const auto r = PushAll({"\xE2\x80\x94"
                          "end"},
                         Bytes("x \xE2\x80\x94"
                               "end y"));
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "x ");
}

TEST(StopMatcherTest, BeforeMinTokensAStopStringDoesNotEndTheText) {
  // vLLM's min_tokens: pushes with may_stop false pass a whole stop string on as text.
  StopMatcher m({"Paris"});
  bool stopped = true;
  EXPECT_EQ(m.Push("The capital is Paris", &stopped, /*may_stop=*/false), "The capital is Paris");
  EXPECT_FALSE(stopped);
  // A stop's beginning is still held, and ends the text when it completes with may_stop.
  EXPECT_EQ(m.Push(". Par", &stopped, false), ". ");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.Push("is is big", &stopped, true), "");
  EXPECT_TRUE(stopped);
  // Once may_stop, the next occurrence ends it.
  StopMatcher later({"\n"});
  EXPECT_EQ(later.Push("a\nb", &stopped, false), "a\nb");
  EXPECT_EQ(later.Push("c\nd", &stopped, true), "c");
  EXPECT_TRUE(stopped);
}

TEST(StopMatcherTest, EmptyStopStringsAreIgnored) {
  const auto r = PushAll({""}, {"abc"});
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "abc");
}

}  // namespace
}  // namespace kinfer
