// Scheduler: admission, lifecycle, budget and chunked prefill, priorities, determinism.
#include "runtime/sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "tests/runtime/sched/sched_test_util.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

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

// kinfer-runtime's default budget is 256 tokens: with the share the engine derives from it
// (PrefillChunkFor: half the budget), a short prompt behind a long one still starts in step 1
// (with the share at the whole budget, it waited for the long prompt's whole prefill).
TEST_F(SchedulerTest, AtTheRuntimesDefaultBudgetAShortPromptStillStartsInStepOne) {
  EXPECT_EQ(PrefillChunkFor(512, 256), 256);
  EXPECT_EQ(PrefillChunkFor(256, 256), 128);
  EXPECT_EQ(PrefillChunkFor(2048, 256), 256);
  EXPECT_EQ(PrefillChunkFor(3, 256), 1);
  EXPECT_EQ(PrefillChunkFor(1, 256), 1);
  SchedulerConfig c = Config(512, 16);
  c.max_batch_tokens = 256;
  c.max_prefill_chunk = PrefillChunkFor(256, 256);
  Make(c);
  Submit(Req(1, 6000, 4));
  Submit(Req(2, 20, 4), T0() + milliseconds(1));
  const StepPlan p = Run(T0() + milliseconds(2));
  const ScheduledSeq* shrt = FindItem(p.prefills, 2);
  ASSERT_NE(shrt, nullptr);
  EXPECT_EQ(shrt->length, 20);
  EXPECT_TRUE(shrt->sample);
  EXPECT_EQ(p.num_tokens, 256);
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
