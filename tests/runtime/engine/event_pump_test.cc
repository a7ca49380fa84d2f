// EventPump: every posted event reaches its stream, in the order posted, while readers read
// concurrently; the destructor pushes what is still posted.
#include "runtime/engine/event_pump.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/engine/engine.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;

EventPump::Event TokenEvent(const std::shared_ptr<RequestStream>& s, int32_t tok, bool last) {
  EventPump::Event e;
  e.stream = s;
  e.event.tokens = {tok};
  if (last) e.event.finish = FinishReason::kLength;
  return e;
}

TEST(EventPumpTest, EveryEventArrivesInOrderWhileReadersRead) {
  constexpr int kStreams = 8, kSteps = 500;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_shared<RequestStream>());
  std::vector<std::vector<int32_t>> got(kStreams);
  std::vector<std::thread> readers;
  for (int i = 0; i < kStreams; ++i) {
    readers.emplace_back([&, i] {
      StreamEvent ev;
      while (streams[i]->Next(&ev, milliseconds(10000))) {
        got[i].insert(got[i].end(), ev.tokens.begin(), ev.tokens.end());
        if (ev.finish != FinishReason::kNone) break;
      }
    });
  }
  {
    EventPump pump;
    std::vector<EventPump::Event> batch;
    for (int step = 0; step < kSteps; ++step) {
      for (int i = 0; i < kStreams; ++i)
        batch.push_back(TokenEvent(streams[i], step, step == kSteps - 1));
      pump.Post(&batch);
      EXPECT_TRUE(batch.empty());
    }
  }  // the destructor pushes what is left
  for (std::thread& t : readers) t.join();
  std::vector<int32_t> want(kSteps);
  for (int step = 0; step < kSteps; ++step) want[step] = step;
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(got[i], want) << "stream " << i;
}

TEST(EventPumpTest, TheDestructorPushesEverythingStillPosted) {
  auto s = std::make_shared<RequestStream>();
  constexpr int32_t kEvents = 200000;  // tens of ms to push: the pump is still at it below
  {
    EventPump pump;
    std::vector<EventPump::Event> batch;
    for (int32_t t = 0; t < kEvents; ++t) batch.push_back(TokenEvent(s, t, false));
    pump.Post(&batch);
    std::vector<EventPump::Event> empty;
    pump.Post(&empty);  // nothing to post: a no-op
  }
  // Nothing read concurrently: every event must be in the stream once the pump is gone.
  StreamEvent ev;
  for (int32_t t = 0; t < kEvents; ++t) {
    ASSERT_TRUE(s->Next(&ev, milliseconds(0))) << "event " << t << " was not pushed";
    ASSERT_EQ(ev.tokens, std::vector<int32_t>{t});
  }
  EXPECT_FALSE(s->Next(&ev, milliseconds(0)));
}

}  // namespace
}  // namespace kinfer
