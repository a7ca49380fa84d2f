#include "runtime/server/choice_streams.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using std::chrono::milliseconds;

StreamEvent Text(std::string t) {
  StreamEvent ev;
  ev.text = std::move(t);
  return ev;
}
StreamEvent Final(FinishReason f) {
  StreamEvent ev;
  ev.finish = f;
  return ev;
}

std::vector<std::shared_ptr<RequestStream>> MakeStreams(int n) {
  std::vector<std::shared_ptr<RequestStream>> v;
  for (int i = 0; i < n; ++i) v.push_back(std::make_shared<RequestStream>());
  return v;
}

TEST(ChoiceStreamsTest, OneStreamIsThatStream) {
  auto streams = MakeStreams(1);
  ChoiceStreams cs(streams);
  int i = -1;
  StreamEvent ev;
  EXPECT_FALSE(cs.Next(&i, &ev, milliseconds(1)));
  streams[0]->Push(Text("a"));
  streams[0]->Push(Final(FinishReason::kStop));
  ASSERT_TRUE(cs.Next(&i, &ev, milliseconds(1)));
  EXPECT_EQ(i, 0);
  EXPECT_EQ(ev.text, "a");
  EXPECT_FALSE(cs.done());
  ASSERT_TRUE(cs.Next(&i, &ev, milliseconds(1)));
  EXPECT_EQ(ev.finish, FinishReason::kStop);
  EXPECT_TRUE(cs.done());
  EXPECT_FALSE(cs.Next(&i, &ev, milliseconds(1)));
}

TEST(ChoiceStreamsTest, TakesTurnsAcrossChoicesAndKeepsEachChoicesOrder) {
  auto streams = MakeStreams(3);
  // Choice 0 has three events waiting, choice 2 one, choice 1 none: the scan goes round.
  for (const char* t : {"a0", "a1", "a2"}) streams[0]->Push(Text(t));
  streams[2]->Push(Text("c0"));
  ChoiceStreams cs(streams);
  std::vector<std::pair<int, std::string>> got;
  int i = -1;
  StreamEvent ev;
  while (cs.Next(&i, &ev, milliseconds(1))) got.emplace_back(i, ev.text);
  const std::vector<std::pair<int, std::string>> want = {
      {0, "a0"}, {2, "c0"}, {0, "a1"}, {0, "a2"}};
  EXPECT_EQ(got, want);
  EXPECT_FALSE(cs.done());
}

TEST(ChoiceStreamsTest, WakesOnAPushToAnyStreamWithoutWaitingOutItsTimeout) {
  auto streams = MakeStreams(4);
  ChoiceStreams cs(streams);
  std::thread producer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    streams[3]->Push(Text("late"));
  });
  int i = -1;
  StreamEvent ev;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(cs.Next(&i, &ev, milliseconds(10000)));
  const auto waited = std::chrono::steady_clock::now() - t0;
  producer.join();
  EXPECT_EQ(i, 3);
  EXPECT_EQ(ev.text, "late");
  // Not a speed assertion: a missed wake-up would wait the whole 10 s.
  EXPECT_LT(waited, milliseconds(5000));
}

TEST(ChoiceStreamsTest, DoneOnlyOnceEveryChoiceHasEndedAndCancelReachesAll) {
  auto streams = MakeStreams(2);
  ChoiceStreams cs(streams);
  cs.CancelAll();
  EXPECT_TRUE(streams[0]->cancelled());
  EXPECT_TRUE(streams[1]->cancelled());
  streams[1]->Push(Final(FinishReason::kCancelled));
  int i = -1;
  StreamEvent ev;
  ASSERT_TRUE(cs.Next(&i, &ev, milliseconds(1)));
  EXPECT_EQ(i, 1);
  EXPECT_FALSE(cs.done());
  // A finished choice is not read again; the other still is.
  streams[0]->Push(Text("x"));
  streams[0]->Push(Final(FinishReason::kStop));
  ASSERT_TRUE(cs.Next(&i, &ev, milliseconds(1)));
  EXPECT_EQ(i, 0);
  ASSERT_TRUE(cs.Next(&i, &ev, milliseconds(1)));
  EXPECT_EQ(ev.finish, FinishReason::kStop);
  EXPECT_TRUE(cs.done());
  EXPECT_FALSE(cs.Next(&i, &ev, milliseconds(1)));
}

TEST(ChoiceStreamsTest, ManyEventsFromConcurrentProducersAllArrive) {
  constexpr int kChoices = 8, kEvents = 500;
  auto streams = MakeStreams(kChoices);
  ChoiceStreams cs(streams);
  std::vector<std::thread> producers;
  for (int c = 0; c < kChoices; ++c) {
    producers.emplace_back([&, c] {
      for (int e = 0; e < kEvents; ++e) streams[c]->Push(Text(std::to_string(e)));
      streams[c]->Push(Final(FinishReason::kLength));
    });
  }
  std::vector<int> next(kChoices, 0);
  int i = -1;
  StreamEvent ev;
  while (!cs.done()) {
    ASSERT_TRUE(cs.Next(&i, &ev, milliseconds(10000)));
    if (ev.finish != FinishReason::kNone) {
      EXPECT_EQ(next[i], kEvents);
      continue;
    }
    EXPECT_EQ(ev.text, std::to_string(next[i])) << "choice " << i;
    ++next[i];
  }
  for (auto& t : producers) t.join();
}

}  // namespace
}  // namespace kinfer
