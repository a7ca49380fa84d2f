// Tests for SseFirstTokenDetector: the first TOKEN of an OpenAI SSE stream (not the role chunk),
// found at exactly the right event whatever the split of the bytes.
#include "sidecar/proxy/sse_first_token.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer {
namespace {

// One SSE event carrying `json` as its data.
std::string Event(std::string_view json) { return "data: " + std::string(json) + "\n\n"; }

std::string Chunk(std::string_view delta, std::string_view finish_reason = "null") {
  return Event(R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",)"
               R"("choices":[{"index":0,"delta":)" +
               std::string(delta) + R"(,"logprobs":null,"finish_reason":)" +
               std::string(finish_reason) + "}]}");
}

// True when feeding `stream` in one piece finds a token.
bool FindsToken(std::string_view stream) {
  SseFirstTokenDetector d;
  return d.Feed(stream) && d.token();
}

// True when feeding `stream` in one piece ends the search without a token (an error, an end).
bool EndsWithoutToken(std::string_view stream) {
  SseFirstTokenDetector d;
  return d.Feed(stream) && !d.token();
}

// A realistic vLLM-style stream: a keep-alive comment, the role-only chunk, an empty-content
// chunk, then tokens. `token_end` is the index of the last byte of the first token's event (the
// second '\n' of its terminator), the byte at which the detector must report it.
struct Stream {
  std::string text;
  size_t token_end = 0;
};

Stream RealisticStream(std::string_view newline = "\n") {
  std::string prefix = ": keep-alive\n\n" + Chunk(R"({"role":"assistant","content":""})") +
                       Chunk(R"({"content":""})");
  std::string token = Chunk(R"({"content":"Hello"})");
  std::string rest = Chunk(R"({"content":" world"})") + Chunk("{}", R"("stop")") + Event("[DONE]");
  Stream s;
  s.text = prefix + token + rest;
  s.token_end = prefix.size() + token.size() - 1;
  if (newline != "\n") {
    std::string converted;
    size_t token_end = 0;
    for (size_t i = 0; i < s.text.size(); ++i) {
      if (s.text[i] == '\n') {
        converted += newline;
      } else {
        converted += s.text[i];
      }
      if (i == s.token_end) token_end = converted.size() - 1;
    }
    s.text = std::move(converted);
    s.token_end = token_end;
  }
  return s;
}

TEST(SseFirstTokenTest, RoleOnlyChunkIsNotAToken) {
  EXPECT_FALSE(FindsToken(Chunk(R"({"role":"assistant"})")));
  EXPECT_FALSE(FindsToken(Chunk(R"({"role":"assistant","content":""})")));
  EXPECT_FALSE(FindsToken(Chunk(R"({"role":"assistant","content":null})")));
  EXPECT_FALSE(FindsToken(Chunk("{}")));
}

TEST(SseFirstTokenTest, ContentChunkIsAToken) {
  SseFirstTokenDetector d;
  EXPECT_FALSE(d.Feed(Chunk(R"({"role":"assistant","content":""})")));
  EXPECT_FALSE(d.found());
  EXPECT_TRUE(d.Feed(Chunk(R"({"content":"Hi"})")));
  EXPECT_TRUE(d.found());
  // Once found, it stays found whatever comes next.
  EXPECT_TRUE(d.Feed("garbage"));
  EXPECT_TRUE(d.found());
}

TEST(SseFirstTokenTest, ReasoningContentIsAToken) {
  EXPECT_TRUE(FindsToken(Chunk(R"({"reasoning_content":"Let me think"})")));
  EXPECT_FALSE(FindsToken(Chunk(R"({"reasoning_content":""})")));
}

TEST(SseFirstTokenTest, CompletionsTextIsAToken) {
  EXPECT_TRUE(FindsToken(Event(
      R"({"object":"text_completion","choices":[{"index":0,"text":"Hi","finish_reason":null}]})")));
  EXPECT_FALSE(FindsToken(Event(
      R"({"object":"text_completion","choices":[{"index":0,"text":"","finish_reason":null}]})")));
}

TEST(SseFirstTokenTest, ToolCallsAreAToken) {
  EXPECT_TRUE(FindsToken(Chunk(
      R"({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]})")));
}

TEST(SseFirstTokenTest, ResponsesApiEventsAreFoundByType) {
  const auto ev = [](const std::string& type, const std::string& rest = "") {
    return "event: " + type + "\ndata: {\"type\":\"" + type + "\"" + rest + "}\n\n";
  };
  SseFirstTokenDetector d;
  EXPECT_FALSE(d.Feed(ev("response.created", R"(,"response":{"output":[]})")));
  EXPECT_FALSE(d.Feed(ev("response.in_progress")));
  EXPECT_FALSE(d.Feed(ev("response.content_part.added")));
  EXPECT_TRUE(d.Feed(ev("response.output_text.delta", R"(,"delta":"Hi")")));
  EXPECT_TRUE(FindsToken(ev("response.output_item.added")));  // a call's name, or the text
  EXPECT_TRUE(FindsToken(ev("response.completed")));
  EXPECT_TRUE(FindsToken(ev("response.incomplete")));
  // A failure is no time to first token: the search ends without one.
  EXPECT_TRUE(EndsWithoutToken(ev("response.failed")));
  EXPECT_TRUE(EndsWithoutToken(ev("error")));
}

TEST(SseFirstTokenTest, EmptyOrNullToolCallsAreNotAToken) {
  EXPECT_FALSE(FindsToken(Chunk(R"({"role":"assistant","content":"","tool_calls":[]})")));
  EXPECT_FALSE(FindsToken(Chunk(R"({"role":"assistant","content":null,"tool_calls":null})")));
}

TEST(SseFirstTokenTest, FinishReasonIsAToken) {
  // A response that ends before any token (max_tokens 0, an immediate stop) still ends the wait.
  EXPECT_TRUE(FindsToken(Chunk("{}", R"("length")")));
  EXPECT_TRUE(FindsToken(Chunk(R"({"content":""})", R"("stop")")));
}

TEST(SseFirstTokenTest, TokenInALaterChoiceIsFound) {
  EXPECT_TRUE(FindsToken(
      Event(R"({"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null},)"
            R"({"index":1,"delta":{"content":"x"},"finish_reason":null}]})")));
}

TEST(SseFirstTokenTest, DoneBeforeAnyTokenEndsTheSearchWithoutOne) {
  EXPECT_TRUE(EndsWithoutToken("data: [DONE]\n\n"));
  EXPECT_TRUE(EndsWithoutToken("data:[DONE]\n\n"));
  SseFirstTokenDetector d;
  EXPECT_FALSE(d.Feed(Chunk(R"({"role":"assistant"})")));
  EXPECT_TRUE(d.Feed("data: [DONE]\n\n"));
  EXPECT_FALSE(d.token());
}

TEST(SseFirstTokenTest, ErrorEventEndsTheSearchWithoutAToken) {
  // An upstream that fails before its first token (a deadline, an overload) gave no time to
  // first token: counted as one, errors pulled the sidecar's TTFT percentiles down.
  EXPECT_TRUE(EndsWithoutToken(Event(R"({"error":{"message":"boom","type":"server_error"}})")));
  EXPECT_TRUE(EndsWithoutToken("event: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n"));
  // Once found, the decision stays: a token after the error is not a first token.
  SseFirstTokenDetector d;
  EXPECT_TRUE(d.Feed(Event(R"({"error":{"message":"boom"}})")));
  EXPECT_TRUE(d.Feed(Chunk(R"({"content":"late"})")));
  EXPECT_FALSE(d.token());
}

TEST(SseFirstTokenTest, DataWithoutSpaceAndOtherFieldsAreRead) {
  EXPECT_TRUE(FindsToken("data:{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"));
  EXPECT_TRUE(
      FindsToken("id: 7\nevent: message\nretry: 100\ndata: "
                 "{\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"));
  EXPECT_FALSE(FindsToken("id: 7\nevent: message\n: comment \"content\":\"a\"\n\n"));
}

TEST(SseFirstTokenTest, NonJsonDataIsIgnored) {
  SseFirstTokenDetector d;
  EXPECT_FALSE(d.Feed("data: hello world\n\n"));
  EXPECT_FALSE(d.Feed("data: {not json\n\n"));
  EXPECT_FALSE(d.Feed("data: [1,2,3]\n\n"));
  EXPECT_FALSE(d.Feed("data: \"content\"\n\n"));
  EXPECT_FALSE(d.Feed("data: {\"choices\":\"nope\"}\n\n"));
  EXPECT_FALSE(d.Feed("data: {\"choices\":[1, null, \"x\"]}\n\n"));
  EXPECT_TRUE(d.Feed(Chunk(R"({"content":"ok"})")));
}

TEST(SseFirstTokenTest, UnfinishedEventIsNotYetAToken) {
  SseFirstTokenDetector d;
  std::string token = Chunk(R"({"content":"Hi"})");
  EXPECT_FALSE(d.Feed(token.substr(0, token.size() - 1)));  // one '\n' short of the blank line
  EXPECT_TRUE(d.Feed("\n"));
}

TEST(SseFirstTokenTest, CrLfLineEndsAreAccepted) {
  EXPECT_TRUE(FindsToken("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n"));
  EXPECT_FALSE(FindsToken("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\r\n\r\n"));
  SseFirstTokenDetector d;
  EXPECT_FALSE(d.Feed("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n"));
  EXPECT_FALSE(d.Feed("\r"));
  EXPECT_TRUE(d.Feed("\n"));
}

// Feeds `s` one byte at a time: found() must turn true exactly at token_end.
void ExpectFoundAtByte(const Stream& s) {
  SseFirstTokenDetector d;
  for (size_t i = 0; i < s.text.size(); ++i) {
    bool found = d.Feed(std::string_view(&s.text[i], 1));
    ASSERT_EQ(found, i >= s.token_end) << "byte " << i << " of " << s.text.size();
  }
}

TEST(SseFirstTokenTest, OneByteAtATimeFindsTheTokenAtItsEvent) {
  ExpectFoundAtByte(RealisticStream());
}

TEST(SseFirstTokenTest, OneByteAtATimeWithCrLf) { ExpectFoundAtByte(RealisticStream("\r\n")); }

TEST(SseFirstTokenTest, EverySplitIntoTwoFindsTheTokenAtItsEvent) {
  for (std::string_view newline : {"\n", "\r\n"}) {
    Stream s = RealisticStream(newline);
    for (size_t k = 0; k <= s.text.size(); ++k) {
      SseFirstTokenDetector d;
      ASSERT_EQ(d.Feed(std::string_view(s.text).substr(0, k)), k > s.token_end) << "split " << k;
      ASSERT_TRUE(d.Feed(std::string_view(s.text).substr(k))) << "split " << k;
    }
  }
}

TEST(SseFirstTokenTest, RandomSplitsFindTheTokenAtItsEvent) {
  std::mt19937 rng(12345);
  for (std::string_view newline : {"\n", "\r\n"}) {
    Stream s = RealisticStream(newline);
    for (int trial = 0; trial < 300; ++trial) {
      std::uniform_int_distribution<size_t> len(1, 1 + static_cast<size_t>(trial % 40));
      SseFirstTokenDetector d;
      size_t pos = 0;
      while (pos < s.text.size()) {
        size_t n = std::min(len(rng), s.text.size() - pos);
        bool found = d.Feed(std::string_view(s.text).substr(pos, n));
        pos += n;
        ASSERT_EQ(found, pos > s.token_end) << "trial " << trial << " at " << pos;
      }
    }
  }
}

TEST(SseFirstTokenTest, ManyEventsInOneFeed) {
  Stream s = RealisticStream();
  SseFirstTokenDetector d;
  EXPECT_FALSE(d.Feed(std::string_view(s.text).substr(0, s.token_end)));
  EXPECT_TRUE(d.Feed(std::string_view(s.text).substr(s.token_end)));
  EXPECT_TRUE(FindsToken(s.text));
}

TEST(SseFirstTokenTest, LongStreamOfRoleChunksNeverCountsAsAToken) {
  // Complete events are consumed, so a long stream without a token never trips the size bound.
  SseFirstTokenDetector d;
  std::string role = Chunk(R"({"role":"assistant","content":""})");
  size_t total = 0;
  while (total < 4 * SseFirstTokenDetector::kMaxPending) {
    ASSERT_FALSE(d.Feed(role));
    total += role.size();
  }
  EXPECT_TRUE(d.Feed(Chunk(R"({"content":"x"})")));
}

TEST(SseFirstTokenTest, OversizePendingEventCountsAsFound) {
  SseFirstTokenDetector d;
  std::string head = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"";
  std::string filler(SseFirstTokenDetector::kMaxPending - head.size(), 'x');
  ASSERT_FALSE(d.Feed(head));
  // Exactly kMaxPending bytes of an unfinished event are still kept.
  ASSERT_FALSE(d.Feed(filler));
  EXPECT_FALSE(d.found());
  // One more byte: the event is too long to keep; it counts as the first token.
  EXPECT_TRUE(d.Feed("x"));
  EXPECT_TRUE(d.found());
  EXPECT_TRUE(d.token());
  // Whatever follows is not buffered (it is ignored once found).
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(d.Feed(std::string(64 * 1024, 'y')));
}

TEST(SseFirstTokenTest, OversizeEventInOneFeedCountsAsFound) {
  SseFirstTokenDetector d;
  std::string big = "data: \"" + std::string(2 * SseFirstTokenDetector::kMaxPending, 'z');
  EXPECT_TRUE(d.Feed(big));
}

}  // namespace
}  // namespace kinfer
