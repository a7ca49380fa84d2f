#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "tests/runtime/sched/sched_test_util.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

SchedulerConfig Config(int num_blocks = 256, int block_size = 16) {
  SchedulerConfig c;
  c.kv.num_blocks = num_blocks;
  c.kv.block_size = block_size;
  c.watermark_blocks = 0;
  return c;
}

SchedRequest Req(SchedSeqId id, int prompt_len, int max_tokens, int priority = 0,
                 int32_t first_token = -1) {
  SchedRequest r;
  r.id = id;
  r.prompt = Tokens(first_token >= 0 ? first_token : static_cast<int32_t>(id) * 10000, prompt_len);
  r.max_tokens = max_tokens;
  r.priority = priority;
  return r;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Make(SchedulerConfig c) {
    ASSERT_TRUE(ValidateSchedulerConfig(c).ok()) << ValidateSchedulerConfig(c).ToString();
    s_ = std::make_unique<Scheduler>(std::move(c));
    eng_ = std::make_unique<FakeEngine>(s_.get());
  }
  void Submit(SchedRequest r, SchedTime now = T0()) {
    const Status st = s_->Submit(std::move(r), now);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  StepPlan Run(SchedTime now = T0()) {
    StepPlan p = eng_->RunStep(now);
    EXPECT_LE(p.num_tokens, s_->config().max_batch_tokens) << PlanString(p);
    int sum = 0;
    for (const auto& d : p.decodes) sum += d.length;
    for (const auto& c : p.prefills) sum += c.length;
    EXPECT_EQ(sum, p.num_tokens) << PlanString(p);
    const Status inv = s_->kv().CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv.ToString();
    return p;
  }
  // Steps until nothing is left (or `max_steps`); returns the number of steps.
  int Drain(int max_steps = 10000, SchedTime now = T0()) {
    int n = 0;
    while (s_->has_work() && n < max_steps) {
      Run(now);
      ++n;
    }
    return n;
  }
  static const ScheduledSeq* FindItem(const std::vector<ScheduledSeq>& v, SchedSeqId id) {
    for (const auto& i : v) {
      if (i.id == id) return &i;
    }
    return nullptr;
  }
  std::unique_ptr<Scheduler> s_;
  std::unique_ptr<FakeEngine> eng_;
};

// ---- configuration and admission ------------------------------------------------------------

TEST(SchedulerConfigTest, RejectsBadFields) {
  SchedulerConfig c = Config();
  EXPECT_TRUE(ValidateSchedulerConfig(c).ok());
  auto bad = [&](auto edit) {
    SchedulerConfig x = Config();
    edit(x);
    return !ValidateSchedulerConfig(x).ok();
  };
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.max_batch_tokens = 0; }));
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.max_running = x.max_batch_tokens; }));
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.max_prefill_chunk = 0; }));
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.max_waiting = 0; }));
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.max_waiting_prompt_tokens = 0; }));
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.priority_aging = seconds(-1); }));
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.kv.num_blocks = 0; }));
  EXPECT_TRUE(bad([](SchedulerConfig& x) { x.watermark_blocks = x.kv.num_blocks; }));
}

TEST_F(SchedulerTest, SubmitRejectsMalformedAndDuplicateRequests) {
  Make(Config());
  EXPECT_EQ(s_->Submit(Req(1, 0, 4), T0()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s_->Submit(Req(1, 4, 0), T0()).code(), StatusCode::kInvalidArgument);
  Submit(Req(1, 4, 4));
  EXPECT_EQ(s_->Submit(Req(1, 4, 4), T0()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s_->stats().rejected, 3);
}

TEST_F(SchedulerTest, ARequestThatCanNeverFitIsRefusedWithOutOfRange) {
  Make(Config(/*num_blocks=*/4, /*block_size=*/16));  // 64 positions
  // 60 + 5 - 1 = 64 positions: fits exactly.
  EXPECT_TRUE(s_->Submit(Req(1, 60, 5), T0()).ok());
  const Status st = s_->Submit(Req(2, 60, 6), T0());
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
  EXPECT_EQ(s_->num_waiting(), 1);
  EXPECT_EQ(Drain(), 5);  // one prefill step (first token), four decodes
  EXPECT_EQ(eng_->ended[1], SeqEnd::kLength);
}

TEST_F(SchedulerTest, AdmissionIsBoundedByWaitingRequestsAndPromptTokens) {
  SchedulerConfig c = Config();
  c.max_waiting = 3;
  c.max_waiting_prompt_tokens = 100;
  Make(c);
  Submit(Req(1, 40, 4));
  Submit(Req(2, 40, 4));
  EXPECT_EQ(s_->Submit(Req(3, 30, 4), T0()).code(), StatusCode::kResourceExhausted);
  Submit(Req(4, 20, 4));
  EXPECT_EQ(s_->Submit(Req(5, 1, 4), T0()).code(), StatusCode::kResourceExhausted);  // count
  EXPECT_EQ(s_->Submit(Req(6, 101, 4), T0()).code(), StatusCode::kOutOfRange);       // never fits
  EXPECT_EQ(s_->stats().waiting_prompt_tokens, 100);
  // Admission drains the queue; then it accepts again.
  Run();
  EXPECT_EQ(s_->num_waiting(), 0);
  EXPECT_EQ(s_->stats().waiting_prompt_tokens, 0);
  EXPECT_TRUE(s_->Submit(Req(5, 1, 4), T0()).ok());
  EXPECT_EQ(s_->stats().rejected, 3);
}

// ---- the basic lifecycle --------------------------------------------------------------------

TEST_F(SchedulerTest, OneRequestPrefillsThenDecodesUntilMaxTokens) {
  Make(Config(64, 4));
  Submit(Req(1, 10, 3));
  StepPlan p = Run();
  ASSERT_EQ(p.prefills.size(), 1u);
  EXPECT_EQ(p.prefills[0].start, 0);
  EXPECT_EQ(p.prefills[0].length, 10);
  EXPECT_TRUE(p.prefills[0].sample);
  EXPECT_TRUE(p.decodes.empty());
  EXPECT_EQ(s_->kv().BlockTable(1).size(), 3u);
  p = Run();
  ASSERT_EQ(p.decodes.size(), 1u);
  EXPECT_EQ(p.decodes[0].start, 10);  // feeds the first sampled token at position 10
  EXPECT_EQ(s_->Find(1)->generated, 2);
  p = Run();
  EXPECT_EQ(p.decodes[0].start, 11);
  EXPECT_EQ(eng_->ended.at(1), SeqEnd::kLength);
  EXPECT_FALSE(s_->Find(1).has_value());
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
  EXPECT_TRUE(Run().idle());
}

TEST_F(SchedulerTest, EngineStopEndsTheSequence) {
  Make(Config());
  Submit(Req(1, 5, 100));
  eng_->stop_at[1] = 2;
  EXPECT_EQ(Drain(), 2);
  EXPECT_EQ(eng_->ended.at(1), SeqEnd::kStop);
}

TEST_F(SchedulerTest, OnStepDoneRejectsAResultThatDoesNotMatchThePlan) {
  Make(Config());
  Submit(Req(1, 5, 4));
  Submit(Req(2, 5, 4));
  StepPlan p = s_->Step(T0());
  ASSERT_EQ(p.prefills.size(), 2u);
  StepResult missing;
  missing.sampled.push_back(SampledToken{1, 7, false});
  EXPECT_EQ(s_->OnStepDone(missing).status().code(), StatusCode::kInvalidArgument);
  StepResult extra = missing;
  extra.sampled.push_back(SampledToken{2, 7, false});
  extra.sampled.push_back(SampledToken{3, 7, false});
  EXPECT_EQ(s_->OnStepDone(extra).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s_->Find(1)->generated, 0);  // nothing applied
  extra.sampled.pop_back();
  ASSERT_TRUE(s_->OnStepDone(extra).ok());
  EXPECT_EQ(s_->Find(1)->generated, 1);
  EXPECT_EQ(s_->OnStepDone(extra).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, AFailedStepEndsItsSequencesWithTheError) {
  Make(Config());
  Submit(Req(1, 5, 4));
  StepPlan p = s_->Step(T0());
  ASSERT_FALSE(p.idle());
  auto done = s_->OnStepFailed(Internal("backend"));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].reason, SeqEnd::kError);
  EXPECT_EQ(done[0].status.code(), StatusCode::kInternal);
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
  EXPECT_FALSE(s_->has_work());
}

// ---- budget and chunked prefill -------------------------------------------------------------

TEST_F(SchedulerTest, LongPromptIsChunkedBesideDecodesWithinTheBudget) {
  SchedulerConfig c = Config(512, 16);
  c.max_batch_tokens = 128;
  c.max_prefill_chunk = 64;
  Make(c);
  Submit(Req(1, 8, 100));
  Submit(Req(2, 8, 100));
  Run();  // both short prompts in one step
  Submit(Req(3, 1000, 4));
  int steps = 0;
  while (s_->Find(3)->generated == 0) {
    const StepPlan p = Run();
    ++steps;
    EXPECT_EQ(p.decodes.size(), 2u) << PlanString(p);  // decodes never wait for the prefill
    const ScheduledSeq* chunk = FindItem(p.prefills, 3);
    ASSERT_NE(chunk, nullptr) << PlanString(p);
    // Alone in prefill, it takes everything the decodes leave (the cap is a share, not a limit).
    EXPECT_EQ(chunk->length, std::min(126, 1000 - chunk->start)) << PlanString(p);
    EXPECT_LE(p.num_tokens, 128);
  }
  EXPECT_EQ(steps, 8);  // ceil(1000 / 126)
}

TEST_F(SchedulerTest, ShortPromptBehindALongOneStartsInTheSameStep) {
  SchedulerConfig c = Config(512, 16);
  c.max_batch_tokens = 512;
  c.max_prefill_chunk = 256;
  Make(c);
  Submit(Req(1, 3000, 4));
  Submit(Req(2, 20, 4), T0() + milliseconds(1));
  const StepPlan p = Run(T0() + milliseconds(2));
  const ScheduledSeq* lng = FindItem(p.prefills, 1);
  const ScheduledSeq* shrt = FindItem(p.prefills, 2);
  ASSERT_NE(lng, nullptr);
  ASSERT_NE(shrt, nullptr);
  EXPECT_EQ(shrt->length, 20);
  EXPECT_TRUE(shrt->sample);         // its first token comes out of step 1
  EXPECT_EQ(lng->length, 512 - 20);  // capped share first, then the leftover
  EXPECT_EQ(p.num_tokens, 512);
}

TEST_F(SchedulerTest, LongPromptProgressesEveryStepUnderAStreamOfShortPrompts) {
  SchedulerConfig c = Config(4096, 16);
  c.max_batch_tokens = 256;
  c.max_prefill_chunk = 128;
  c.max_running = 64;
  Make(c);
  Submit(Req(1, 2000, 2));
  SchedSeqId next = 100;
  SchedTime now = T0();
  int steps = 0;
  while (s_->Find(1)->generated == 0) {
    // Each step, more short prompts than the budget can take arrive behind it.
    for (int i = 0; i < 6; ++i) Submit(Req(next++, 40, 2), now);
    const StepPlan p = Run(now);
    now += milliseconds(10);
    ++steps;
    const ScheduledSeq* chunk = FindItem(p.prefills, 1);
    ASSERT_NE(chunk, nullptr) << "step " << steps << ": " << PlanString(p);
    // It is first among prefills (oldest), so it always gets its full share.
    const int budget_after_decodes = 256 - static_cast<int>(p.decodes.size());
    EXPECT_GE(chunk->length, std::min({128, 2000 - chunk->start, budget_after_decodes}))
        << PlanString(p);
    ASSERT_LT(steps, 100);
  }
  EXPECT_LE(steps, 16);  // 2000 / 128 = 15.6
}

TEST_F(SchedulerTest, DecodeTokensAreReservedBeforePrefillTakesTheBudget) {
  SchedulerConfig c = Config(256, 4);
  c.max_batch_tokens = 8;
  c.max_running = 7;
  c.max_prefill_chunk = 8;
  Make(c);
  for (SchedSeqId id = 1; id <= 6; ++id) Submit(Req(id, 1, 50));
  Run();                   // six one-token prompts in one step
  Submit(Req(7, 100, 2));  // a long prompt arrives: it gets what the six decodes leave
  for (int i = 0; i < 5; ++i) {
    const StepPlan p = Run();
    EXPECT_EQ(p.decodes.size(), 6u) << PlanString(p);
    ASSERT_EQ(p.prefills.size(), 1u) << PlanString(p);
    EXPECT_EQ(p.prefills[0].length, 2) << PlanString(p);
    EXPECT_EQ(p.num_tokens, 8);
  }
}

TEST_F(SchedulerTest, AdmissionBesideRunningSequencesKeepsRoomForTheWholePromptAndTheWatermark) {
  SchedulerConfig c = Config(16, 4);
  c.max_batch_tokens = 64;
  c.max_prefill_chunk = 8;
  c.watermark_blocks = 1;
  Make(c);
  Submit(Req(1, 20, 9));  // 5 blocks, grows to 7
  Run();
  // 44 prompt tokens = 11 blocks; 11 are free but the watermark asks for one more. The first
  // chunk alone (2 blocks) would fit: admitting it would only preempt later.
  Submit(Req(2, 44, 2));
  for (int i = 0; i < 3; ++i) {
    const StepPlan p = Run();
    EXPECT_EQ(FindItem(p.prefills, 2), nullptr) << PlanString(p);
    EXPECT_TRUE(p.preempted.empty());
  }
  Drain();
  EXPECT_EQ(eng_->ended.at(2), SeqEnd::kLength);
  EXPECT_EQ(s_->stats().preemptions, 0);
}

TEST_F(SchedulerTest, RunningSequencesAreCapped) {
  SchedulerConfig c = Config();
  c.max_running = 2;
  Make(c);
  for (SchedSeqId id = 1; id <= 4; ++id) Submit(Req(id, 5, 3));
  const StepPlan p = Run();
  EXPECT_EQ(p.prefills.size(), 2u);
  EXPECT_EQ(s_->num_running(), 2);
  EXPECT_EQ(s_->num_waiting(), 2);
  for (int i = 0; i < 20 && s_->has_work(); ++i) {
    Run();
    EXPECT_LE(s_->num_running(), 2);
  }
  EXPECT_EQ(eng_->ended.size(), 4u);
}

// ---- priority -------------------------------------------------------------------------------

// With one slot, the admission order is the scheduling order.
std::vector<SchedSeqId> AdmissionOrder(SchedulerTest* t, Scheduler* s, FakeEngine* eng,
                                       SchedTime now) {
  std::vector<SchedSeqId> order;
  for (int i = 0; i < 200 && s->has_work(); ++i) {
    const StepPlan p = eng->RunStep(now);
    for (const auto& c : p.prefills) {
      if (c.start == 0) order.push_back(c.id);
    }
  }
  return order;
}

TEST_F(SchedulerTest, MoreImportantClassesGoFirstAndFcfsWithinAClass) {
  SchedulerConfig c = Config();
  c.max_running = 1;
  c.priority_aging = seconds(0);
  Make(c);
  // Arrivals: batch, standard, critical, standard, batch, critical (1 ms apart).
  const int prio[] = {2, 1, 0, 1, 2, 0};
  for (int i = 0; i < 6; ++i) Submit(Req(i + 1, 4, 1, prio[i]), T0() + milliseconds(i));
  const auto order = AdmissionOrder(this, s_.get(), eng_.get(), T0() + seconds(1));
  EXPECT_EQ(order, (std::vector<SchedSeqId>{3, 6, 2, 4, 1, 5}));
}

TEST_F(SchedulerTest, AgingLetsALongWaitingLowClassRequestOvertakeNewerImportantOnes) {
  SchedulerConfig c = Config();
  c.max_running = 1;
  c.priority_aging = seconds(10);
  Make(c);
  Submit(Req(1, 4, 1, /*priority=*/2), T0());  // batch
  // A steady stream of critical requests, one per second, each taking one step.
  SchedTime now = T0();
  SchedSeqId next = 100;
  int batch_started_at = -1;
  for (int sec = 0; sec < 60 && batch_started_at < 0; ++sec) {
    now = T0() + seconds(sec);
    Submit(Req(next++, 4, 1, 0), now);
    const StepPlan p = Run(now);
    if (FindItem(p.prefills, 1) != nullptr) batch_started_at = sec;
  }
  // After 20 s it competes as class 0 and is older than every critical request still waiting.
  EXPECT_EQ(batch_started_at, 20);
}

TEST_F(SchedulerTest, WithoutAgingALowClassRequestWaitsBehindAnyMoreImportantOne) {
  SchedulerConfig c = Config();
  c.max_running = 1;
  c.priority_aging = seconds(0);
  Make(c);
  Submit(Req(1, 4, 1, 2), T0());
  SchedSeqId next = 100;
  for (int sec = 0; sec < 60; ++sec) {
    Submit(Req(next++, 4, 1, 0), T0() + seconds(sec));
    Submit(Req(next++, 4, 1, 0), T0() + seconds(sec));
    const StepPlan p = Run(T0() + seconds(sec));
    EXPECT_EQ(FindItem(p.prefills, 1), nullptr);
  }
}

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

// ---- determinism ----------------------------------------------------------------------------

std::vector<std::string> Scenario() {
  SchedulerConfig c = Config(24, 4);
  c.max_batch_tokens = 32;
  c.max_prefill_chunk = 12;
  c.max_running = 6;
  Scheduler s(c);
  FakeEngine eng(&s);
  std::vector<std::string> plans;
  SchedTime now = T0();
  for (int step = 0; step < 300; ++step) {
    if (step < 40 && step % 3 == 0) {
      const SchedSeqId id = 1 + step;
      SchedRequest r = Req(id, 5 + step % 17, 3 + step % 11, step % 3);
      r.prompt[0] = step % 2;  // some shared first blocks
      EXPECT_TRUE(s.Submit(r, now).ok());
    }
    if (step == 20) s.Cancel(10);
    plans.push_back(PlanString(eng.RunStep(now)));
    now += milliseconds(20);
  }
  return plans;
}

TEST(SchedulerDeterminismTest, TheSameInputsGiveTheSamePlans) {
  const auto a = Scenario();
  const auto b = Scenario();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "step " << i;
}

}  // namespace
}  // namespace kinfer
