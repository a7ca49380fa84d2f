// Scheduler: preemption, deadlock freedom, cancellation, deadlines, prefix caching.
#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "tests/runtime/sched/sched_test_util.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// ---- preemption -----------------------------------------------------------------------------

TEST_F(SchedulerTest, OutOfBlocksPreemptsTheLowestPriorityThenLatestArrival) {
  // 12 blocks of 4. Three sequences of 12 prompt tokens (3 blocks each) decode until the pool is
  // full; the victim must be the standard-class request that arrived last.
  SchedulerConfig c = Config(12, 4);
  c.priority_aging = seconds(0);
  Make(c);
  Submit(Req(1, 12, 30, /*priority=*/1), T0());
  Submit(Req(2, 12, 30, /*priority=*/1), T0() + milliseconds(1));
  Submit(Req(3, 12, 30, /*priority=*/0), T0() + milliseconds(2));
  SchedTime now = T0() + milliseconds(3);
  Run(now);
  ASSERT_EQ(s_->num_running(), 3);
  SchedSeqId first_victim = 0;
  for (int i = 0; i < 40 && first_victim == 0; ++i) {
    const StepPlan p = Run(now);
    if (!p.preempted.empty()) first_victim = p.preempted[0];
  }
  EXPECT_EQ(first_victim, 2u);
  EXPECT_EQ(s_->Find(2)->state, SeqState::kWaiting);
  EXPECT_EQ(s_->Find(2)->preemptions, 1);
  EXPECT_GE(s_->stats().preemptions, 1);
  // Everyone still finishes, with all their tokens.
  Drain(1000, now);
  EXPECT_EQ(eng_->ended.size(), 3u);
  for (const auto& [id, why] : eng_->ended) EXPECT_EQ(why, SeqEnd::kLength) << id;
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
}

TEST_F(SchedulerTest, APreemptedSequenceIsRecomputedAndContinuesWhereItStopped) {
  SchedulerConfig c = Config(8, 4);
  c.priority_aging = seconds(0);
  Make(c);
  Submit(Req(1, 8, 20, 0), T0());
  Submit(Req(2, 8, 20, 1), T0());
  // Record seq 2's tokens as generated; after the preemption they must be kept, then extended.
  std::vector<int32_t> before;
  bool recomputed = false;
  int steps = 0;
  while (eng_->ended.count(2) == 0 && steps++ < 500) {
    const StepPlan p = Run();
    if (!p.preempted.empty() && p.preempted[0] == 2) {
      before.assign(s_->Find(2)->tokens.begin(), s_->Find(2)->tokens.end());
    }
    if (!before.empty() && !recomputed) {
      if (const ScheduledSeq* chunk = FindItem(p.prefills, 2)) {
        recomputed = true;
        // Re-prefill of prompt + generated: the cached full blocks are skipped.
        EXPECT_EQ(chunk->start % 4, 0);
        EXPECT_EQ(chunk->start + chunk->length, static_cast<int>(before.size()));
        EXPECT_TRUE(chunk->sample);
        const auto now_tokens = s_->Find(2)->tokens;
        ASSERT_GE(now_tokens.size(), before.size());
        EXPECT_TRUE(std::equal(before.begin(), before.end(), now_tokens.begin()));
      }
    }
  }
  EXPECT_FALSE(before.empty()) << "sequence 2 was never preempted";
  EXPECT_TRUE(recomputed);
  EXPECT_EQ(eng_->ended.at(2), SeqEnd::kLength);
}

TEST_F(SchedulerTest, AMoreImportantArrivalPreemptsLessImportantRunningSequences) {
  SchedulerConfig c = Config(16, 4);
  c.priority_aging = seconds(0);
  Make(c);
  Submit(Req(1, 30, 3, 2), T0());  // 8 blocks, enough for all its tokens
  Submit(Req(2, 30, 3, 2), T0());  // 8 blocks: the pool is full
  Run();
  ASSERT_EQ(s_->num_running(), 2);
  // Same class: waits.
  Submit(Req(3, 6, 2, 2), T0());
  StepPlan p = Run();
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(FindItem(p.prefills, 3), nullptr);
  // A critical arrival does not wait: the latest batch sequence gives way.
  Submit(Req(4, 6, 2, 0), T0());
  p = Run();
  ASSERT_NE(FindItem(p.prefills, 4), nullptr) << PlanString(p);
  EXPECT_EQ(p.preempted, (std::vector<SchedSeqId>{2}));
  EXPECT_EQ(FindItem(p.decodes, 2), nullptr);  // un-scheduled from this step
  EXPECT_LE(p.num_tokens, c.max_batch_tokens);
  Drain();
  EXPECT_EQ(eng_->ended.size(), 4u);
}

// A victim's blocks that are the newcomer's own cached prefix free nothing for it (freed, the
// newcomer takes them back as hits): counted, the low-class sequence holding the shared prefix
// was preempted and the newcomer still did not fit, so it waited behind while the victim had lost
// its KV for nothing. 16 blocks of 4: A (class 0) holds 8; L (class 2) holds 8, 7 of them the
// 28-token prefix H (class 0) shares. H needs 2 blocks beyond its 7 hits: preempting L gives it
// only 1, so nothing is preempted, and H is admitted once A's blocks come back.
TEST_F(SchedulerTest, AVictimHoldingTheNewcomersCachedPrefixIsNotPreemptedInVain) {
  SchedulerConfig c = Config(16, 4);
  c.priority_aging = seconds(0);
  c.max_batch_tokens = 64;
  c.max_prefill_chunk = 64;
  Make(c);
  Submit(Req(1, 29, 3, /*priority=*/0, /*first_token=*/500));
  SchedRequest low = Req(2, 28, 4, /*priority=*/2, /*first_token=*/100);
  low.prompt.push_back(999);
  Submit(low);
  Run();
  Run();
  ASSERT_EQ(s_->num_running(), 2);
  ASSERT_EQ(s_->kv().num_free_blocks(), 0);
  SchedRequest high = Req(3, 28, 1, /*priority=*/0, /*first_token=*/100);
  for (int i = 0; i < 8; ++i) high.prompt.push_back(700 + i);
  ASSERT_EQ(s_->kv().Lookup(high.prompt, 0).blocks, 7);
  Submit(high);
  for (int i = 0; i < 50 && eng_->ended.count(3) == 0; ++i) {
    const StepPlan p = Run();
    EXPECT_TRUE(p.preempted.empty()) << "step " << i << ": " << PlanString(p);
  }
  EXPECT_EQ(eng_->ended.count(3), 1u);
  EXPECT_EQ(s_->stats().preemptions, 0);
  Drain(1000);
  EXPECT_EQ(eng_->ended.size(), 3u);
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
}

TEST_F(SchedulerTest, NoDeadlockWhenBlocksAreScarce) {
  // 10 blocks of 4 = 40 positions; 12 requests that each need up to 32 positions alone.
  SchedulerConfig c = Config(10, 4);
  c.max_running = 8;
  Make(c);
  for (SchedSeqId id = 1; id <= 12; ++id) {
    Submit(Req(id, 10 + static_cast<int>(id % 3) * 5, 20 - static_cast<int>(id % 3) * 5,
               static_cast<int>(id % 3)));
  }
  const int steps = Drain(5000);
  EXPECT_LT(steps, 5000);
  EXPECT_EQ(eng_->ended.size(), 12u);
  for (const auto& [id, why] : eng_->ended) EXPECT_EQ(why, SeqEnd::kLength) << id;
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
}

TEST_F(SchedulerTest, ASequenceThatFillsThePoolAloneStillFinishes) {
  Make(Config(4, 4));     // 16 positions
  Submit(Req(1, 10, 7));  // 16 positions exactly
  Submit(Req(2, 10, 7));
  Drain(200);
  EXPECT_EQ(eng_->ended.at(1), SeqEnd::kLength);
  EXPECT_EQ(eng_->ended.at(2), SeqEnd::kLength);
}

// ---- cancellation and deadlines -------------------------------------------------------------

TEST_F(SchedulerTest, CancellationTakesEffectAtTheNextStepAndFreesBlocks) {
  Make(Config(64, 4));
  Submit(Req(1, 20, 50));
  Submit(Req(2, 20, 50));
  Run();
  Run();
  const int used = s_->kv().stats().used_blocks;
  EXPECT_GT(used, 0);
  EXPECT_TRUE(s_->Cancel(1));
  EXPECT_TRUE(s_->Cancel(1));  // idempotent
  EXPECT_FALSE(s_->Cancel(99));
  const StepPlan p = Run();
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].id, 1u);
  EXPECT_EQ(p.finished[0].reason, SeqEnd::kCancelled);
  EXPECT_EQ(FindItem(p.decodes, 1), nullptr);
  EXPECT_LT(s_->kv().stats().used_blocks, used);
  EXPECT_FALSE(s_->Find(1).has_value());
}

TEST_F(SchedulerTest, CancellingASequenceInFlightEndsItAfterTheStep) {
  Make(Config(64, 4));
  Submit(Req(1, 20, 50));
  StepPlan p = s_->Step(T0());
  ASSERT_EQ(p.prefills.size(), 1u);
  EXPECT_TRUE(s_->Cancel(1));
  StepResult r;
  r.sampled.push_back(SampledToken{1, 5, false});
  ASSERT_TRUE(s_->OnStepDone(r).ok());
  p = s_->Step(T0());
  EXPECT_TRUE(p.idle());
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].reason, SeqEnd::kCancelled);
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
  // Its full blocks stay cached for a retry.
  EXPECT_GT(s_->kv().stats().cached_blocks, 0);
}

TEST_F(SchedulerTest, CancellingAWaitingRequestFreesItsQueueSpace) {
  SchedulerConfig c = Config();
  c.max_running = 1;
  Make(c);
  Submit(Req(1, 5, 50));
  Submit(Req(2, 7, 50));
  Run();
  EXPECT_EQ(s_->stats().waiting_prompt_tokens, 7);
  s_->Cancel(2);
  const StepPlan p = Run();
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(s_->stats().waiting_prompt_tokens, 0);
  EXPECT_EQ(s_->num_waiting(), 0);
}

TEST_F(SchedulerTest, APassedDeadlineEndsWaitingAndRunningSequences) {
  SchedulerConfig c = Config();
  c.max_running = 1;
  Make(c);
  SchedRequest a = Req(1, 5, 50);
  a.deadline = T0() + seconds(5);
  SchedRequest b = Req(2, 5, 50);
  b.deadline = T0() + seconds(3);
  Submit(a);
  Submit(b);
  Run(T0());
  Run(T0() + seconds(1));
  StepPlan p = Run(T0() + seconds(3));
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].id, 2u);  // waiting
  EXPECT_EQ(p.finished[0].reason, SeqEnd::kDeadlineExceeded);
  p = Run(T0() + seconds(5));
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].id, 1u);  // running
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
}

// ---- prefix caching -------------------------------------------------------------------------

TEST_F(SchedulerTest, ACachedPrefixSkipsPrefillAtAdmission) {
  Make(Config(64, 4));
  const std::vector<int32_t> system = Tokens(500, 16);
  SchedRequest first = Req(1, 0, 2);
  first.prompt = system;
  first.prompt.push_back(1);
  Submit(first);
  Drain();
  // A second turn with the same prefix: 16 cached tokens.
  SchedRequest second = Req(2, 0, 2);
  second.prompt = system;
  for (int32_t t : {1, 2, 3, 4, 5}) second.prompt.push_back(t);
  Submit(second);
  const StepPlan p = Run();
  ASSERT_EQ(p.prefills.size(), 1u);
  EXPECT_EQ(p.prefills[0].start, 16);
  EXPECT_EQ(p.prefills[0].length, 5);
  EXPECT_EQ(s_->Find(2)->cached_tokens, 16);
  const KvStats kv = s_->kv().stats();
  EXPECT_EQ(kv.prefix_query_tokens, 17 + 21);
  EXPECT_EQ(kv.prefix_hit_tokens, 16);
}

TEST_F(SchedulerTest, ConcurrentRequestsShareTheCommonPrefixBlocks) {
  Make(Config(64, 4));
  SchedRequest a = Req(1, 0, 30);
  a.prompt = Tokens(500, 17);
  Submit(a);
  Run();  // a's prompt is computed and cached
  SchedRequest b = Req(2, 0, 30);
  b.prompt = Tokens(500, 16);
  b.prompt.push_back(9);
  Submit(b);
  Run();
  const auto ta = s_->kv().BlockTable(1);
  const auto tb = s_->kv().BlockTable(2);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ta[i], tb[i]);
    EXPECT_EQ(s_->kv().ref_count(ta[i]), 2);
  }
  EXPECT_NE(ta[4], tb[4]);
}

TEST_F(SchedulerTest, DifferentTenantSaltsDoNotShareTheCache) {
  Make(Config(64, 4));
  SchedRequest a = Req(1, 0, 2);
  a.prompt = Tokens(500, 17);
  a.cache_salt = 1;
  Submit(a);
  Drain();
  SchedRequest b = a;
  b.id = 2;
  b.cache_salt = 2;
  Submit(b);
  const StepPlan p = Run();
  EXPECT_EQ(p.prefills[0].start, 0);
}

}  // namespace
}  // namespace kinfer
