// Randomized (seeded) runs of the scheduler against a fake engine: thousands of steps with random
// arrivals, cancellations, deadlines and stops, checking invariants every step.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <set>

#include "runtime/sched/scheduler.h"
#include "tests/runtime/sched/sched_test_util.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;

struct Params {
  uint64_t seed;
  int num_blocks;
  int block_size;
  int max_batch_tokens;
  int max_running;
  int max_prefill_chunk;
  bool pipelined = false;  // FakeEngine::RunPipelined: every plan it can made ahead
};

class SchedulerPropertyTest : public ::testing::TestWithParam<Params> {};

TEST_P(SchedulerPropertyTest, InvariantsHoldAndEverythingEndsWithNoLeakedBlocks) {
  const Params prm = GetParam();
  std::mt19937_64 rng(prm.seed);
  SchedulerConfig c;
  c.kv.num_blocks = prm.num_blocks;
  c.kv.block_size = prm.block_size;
  c.max_batch_tokens = prm.max_batch_tokens;
  c.max_running = prm.max_running;
  c.max_prefill_chunk = prm.max_prefill_chunk;
  c.max_waiting = 40;
  c.max_waiting_prompt_tokens = 4000;
  c.priority_aging = milliseconds(500);
  c.watermark_blocks = static_cast<int>(rng() % 3);
  ASSERT_TRUE(ValidateSchedulerConfig(c).ok());
  Scheduler s(c);
  FakeEngine eng(&s);

  const int capacity = prm.num_blocks * prm.block_size;
  std::set<SchedSeqId> submitted;
  std::map<SchedSeqId, int> max_tokens;
  std::map<SchedSeqId, int> prompt_len;
  SchedSeqId next = 1;
  SchedTime now = T0();
  int64_t refused = 0;
  const int kSteps = 4000;
  for (int step = 0; step < kSteps + 3000; ++step) {
    const bool arrivals = step < kSteps;
    // Arrivals: bursts; prompts share a few prefixes.
    if (arrivals && rng() % 3 == 0) {
      const int n = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n; ++i) {
        SchedRequest r;
        r.id = next++;
        const int len = 1 + static_cast<int>(rng() % (capacity / 2));
        r.prompt = Tokens(static_cast<int32_t>(rng() % 4) * 1000, len);
        if (rng() % 2) r.prompt.back() = static_cast<int32_t>(r.id);
        r.max_tokens = 1 + static_cast<int>(rng() % 40);
        r.priority = static_cast<int>(rng() % 3);
        r.cache_salt = rng() % 4 == 0 ? 7 : 0;
        if (rng() % 10 == 0) r.deadline = now + milliseconds(rng() % 2000);
        if (rng() % 7 == 0) eng.stop_at[r.id] = 1 + static_cast<int>(rng() % 10);
        const int mt = r.max_tokens;
        const int pl = static_cast<int>(r.prompt.size());
        const Status st = s.Submit(std::move(r), now);
        if (st.ok()) {
          submitted.insert(next - 1);
          max_tokens[next - 1] = mt;
          prompt_len[next - 1] = pl;
        } else {
          ASSERT_TRUE(st.code() == StatusCode::kResourceExhausted ||
                      st.code() == StatusCode::kOutOfRange)
              << st.ToString();
          ++refused;
        }
      }
    }
    if (arrivals && rng() % 11 == 0 && !submitted.empty()) {
      auto it = submitted.begin();
      std::advance(it, rng() % submitted.size());
      s.Cancel(*it);
    }
    const StepPlan p = prm.pipelined ? eng.RunPipelined(now) : eng.RunStep(now);
    now += milliseconds(10 + rng() % 20);

    // The budget and the cap hold; every item is sane.
    ASSERT_LE(p.num_tokens, c.max_batch_tokens) << PlanString(p);
    ASSERT_LE(s.num_running(), c.max_running);
    ASSERT_LE(s.num_waiting(), c.max_waiting + c.max_running);  // + preempted re-queues
    std::set<SchedSeqId> in_plan;
    for (const auto* list : {&p.decodes, &p.prefills}) {
      for (const ScheduledSeq& item : *list) {
        ASSERT_GE(item.length, 1);
        ASSERT_TRUE(in_plan.insert(item.id).second) << "twice in one plan: " << PlanString(p);
      }
    }
    for (SchedSeqId id : p.preempted) ASSERT_EQ(in_plan.count(id), 0u) << PlanString(p);
    const Status inv = s.kv().CheckInvariants();
    ASSERT_TRUE(inv.ok()) << "step " << step << ": " << inv.ToString();
    const SchedulerStats st = s.stats();
    ASSERT_EQ(st.kv.used_blocks > 0, s.num_running() > 0);
    if (!arrivals && !s.has_work()) break;
  }
  EXPECT_FALSE(s.has_work()) << "work left after the drain: running " << s.num_running()
                             << " waiting " << s.num_waiting();
  // No leaked blocks, and every admitted request ended exactly once, for a sensible reason.
  EXPECT_EQ(s.kv().stats().used_blocks, 0);
  EXPECT_EQ(s.kv().num_free_blocks(), prm.num_blocks);
  EXPECT_EQ(eng.ended.size(), submitted.size());
  for (const auto& [id, why] : eng.ended) {
    EXPECT_TRUE(submitted.count(id)) << id;
    EXPECT_NE(why, SeqEnd::kError) << id;
    // Each generated token is the one for its position, and a sequence ends where it should.
    const std::vector<int32_t>& out = eng.emitted[id];
    for (size_t j = 0; j < out.size(); ++j) {
      ASSERT_EQ(out[j], FakeEngine::TokenFor(id, prompt_len[id] + static_cast<int>(j)))
          << "sequence " << id << " token " << j;
    }
    if (why == SeqEnd::kLength) {
      EXPECT_EQ(static_cast<int>(out.size()), max_tokens[id]) << id;
    }
    if (why == SeqEnd::kStop) {
      EXPECT_EQ(static_cast<int>(out.size()), eng.stop_at[id]) << id;
    }
  }
  if (prm.pipelined) {
    EXPECT_GT(eng.ahead_steps, kSteps / 2);
  }
  EXPECT_EQ(s.stats().finished, static_cast<int64_t>(submitted.size()));
  EXPECT_EQ(s.stats().rejected, refused);
  const SchedulerStats st = s.stats();
  std::map<SeqEnd, int> by_reason;
  for (const auto& [id, why] : eng.ended) ++by_reason[why];
  std::printf(
      "seed %llu: %zu served, %lld refused, %lld preemptions, %llu steps, prefix hits %lld/%lld "
      "tokens, %lld evictions; stop %d length %d cancelled %d deadline %d\n",
      static_cast<unsigned long long>(prm.seed), submitted.size(), static_cast<long long>(refused),
      static_cast<long long>(st.preemptions), static_cast<unsigned long long>(st.steps),
      static_cast<long long>(st.kv.prefix_hit_tokens),
      static_cast<long long>(st.kv.prefix_query_tokens), static_cast<long long>(st.kv.evictions),
      by_reason[SeqEnd::kStop], by_reason[SeqEnd::kLength], by_reason[SeqEnd::kCancelled],
      by_reason[SeqEnd::kDeadlineExceeded]);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerPropertyTest,
                         ::testing::Values(Params{1, 64, 16, 512, 32, 256},
                                           Params{2, 24, 4, 64, 8, 16}, Params{3, 12, 8, 32, 4, 8},
                                           Params{4, 200, 16, 128, 16, 64},
                                           Params{5, 16, 4, 17, 16, 1}));

// The same runs with every plan it can made ahead of the step being computed (StepAhead).
INSTANTIATE_TEST_SUITE_P(Lookahead, SchedulerPropertyTest,
                         ::testing::Values(Params{1, 64, 16, 512, 32, 256, true},
                                           Params{2, 24, 4, 64, 8, 16, true},
                                           Params{3, 12, 8, 32, 4, 8, true},
                                           Params{4, 200, 16, 128, 16, 64, true},
                                           Params{5, 16, 4, 17, 16, 1, true}));

}  // namespace
}  // namespace kinfer
