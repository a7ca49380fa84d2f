// Scheduler::StepAhead: planning the next step while the outstanding one is computed.
#include <gtest/gtest.h>

#include "runtime/sched/scheduler.h"
#include "tests/runtime/sched/sched_test_util.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;

StepResult Tokens1(std::initializer_list<SampledToken> t) { return StepResult{t}; }

TEST_F(SchedulerTest, APlanAheadFeedsTheTokenTheOutstandingStepDraws) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 3));
  StepPlan p = s_->Step(T0());
  ASSERT_EQ(p.prefills.size(), 1u);
  StepPlan a = s_->StepAhead(T0());
  ASSERT_TRUE(s_->has_plan_ahead());
  ASSERT_EQ(a.decodes.size(), 1u);
  EXPECT_EQ(a.decodes[0].start, 6);  // the token the prefill draws, at position 6
  EXPECT_EQ(s_->Find(1)->tokens[6], kPendingToken);
  EXPECT_EQ(s_->Find(1)->generated, 1);
  EXPECT_GE(s_->kv().num_slots(1), 7);
  EXPECT_EQ(s_->kv().num_computed(1), 0);  // committed only once the step is answered

  ASSERT_TRUE(s_->SetPendingTokens(Tokens1({{1, 42, false}})).ok());
  EXPECT_EQ(s_->Find(1)->tokens[6], 42);
  auto done = s_->OnStepDone(Tokens1({{1, 42, false}}));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_TRUE(done->empty());
  EXPECT_FALSE(s_->has_plan_ahead());
  EXPECT_EQ(s_->kv().num_computed(1), 6);
  // The plan ahead is the outstanding one now.
  done = s_->OnStepDone(Tokens1({{1, 43, false}}));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(s_->Find(1)->generated, 2);
  EXPECT_EQ(s_->Find(1)->tokens.back(), 43);
  EXPECT_EQ(s_->kv().num_computed(1), 7);
}

TEST_F(SchedulerTest, OnStepDoneAloneAlsoGivesThePendingTokensTheirValues) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 10));
  ASSERT_FALSE(s_->Step(T0()).idle());
  ASSERT_EQ(s_->StepAhead(T0()).decodes.size(), 1u);
  ASSERT_TRUE(s_->OnStepDone(Tokens1({{1, 42, false}})).ok());
  EXPECT_EQ(s_->Find(1)->tokens[6], 42);
}

TEST_F(SchedulerTest, ALateStopEndsTheSequenceAndItsRowAheadIsThrownAway) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 10));
  Submit(Req(2, 6, 10));
  ASSERT_EQ(s_->Step(T0()).prefills.size(), 2u);
  StepPlan a = s_->StepAhead(T0());
  ASSERT_EQ(a.decodes.size(), 2u);
  ASSERT_TRUE(s_->SetPendingTokens(Tokens1({{1, 5, false}, {2, 6, false}})).ok());
  auto done = s_->OnStepDone(Tokens1({{1, 5, true}, {2, 6, false}}));
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ((*done)[0].id, 1u);
  EXPECT_EQ((*done)[0].reason, SeqEnd::kStop);
  EXPECT_FALSE(s_->Find(1).has_value());
  EXPECT_FALSE(s_->kv().Contains(1));  // its blocks are free at once
  // A token for the thrown-away row is refused; without it the step is answered.
  EXPECT_EQ(s_->OnStepDone(Tokens1({{1, 9, false}, {2, 7, false}})).status().code(),
            StatusCode::kInvalidArgument);
  done = s_->OnStepDone(Tokens1({{2, 7, false}}));
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(s_->Find(2)->generated, 2);
  EXPECT_TRUE(s_->kv().CheckInvariants().ok());
}

TEST_F(SchedulerTest, ASequenceAtMaxTokensCancelledOrPastItsDeadlineIsNotPlannedAhead) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 1));  // its first token is its last
  Submit(Req(2, 6, 10));
  SchedRequest r3 = Req(3, 6, 10);
  r3.deadline = T0() + milliseconds(5);
  Submit(std::move(r3));
  Submit(Req(4, 6, 10));
  ASSERT_EQ(s_->Step(T0()).prefills.size(), 4u);
  s_->Cancel(2);
  StepPlan a = s_->StepAhead(T0() + milliseconds(10));
  ASSERT_EQ(a.decodes.size(), 1u) << PlanString(a);
  EXPECT_EQ(a.decodes[0].id, 4u);
  EXPECT_TRUE(a.finished.empty());  // in flight: they end after the step
  const StepResult r = Tokens1({{1, 5, false}, {2, 5, false}, {3, 5, false}, {4, 5, false}});
  ASSERT_TRUE(s_->SetPendingTokens(r).ok());
  auto done = s_->OnStepDone(r);
  ASSERT_TRUE(done.ok());
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ((*done)[0].reason, SeqEnd::kLength);
  // The plan after the one ahead ends the cancelled one and the expired one.
  a = s_->StepAhead(T0() + milliseconds(10));
  ASSERT_EQ(a.finished.size(), 2u) << PlanString(a);
  EXPECT_EQ(a.finished[0].reason, SeqEnd::kCancelled);
  EXPECT_EQ(a.finished[1].reason, SeqEnd::kDeadlineExceeded);
  ASSERT_EQ(a.decodes.size(), 1u);
}

TEST_F(SchedulerTest, APlanAheadNeverPreemptsItDefersToTheNextStep) {
  // 4 blocks of 4: two sequences of 8 prompt tokens fill the pool.
  Make(Config(4, 4));
  Submit(Req(1, 8, 8, /*priority=*/0));
  Submit(Req(2, 8, 8, /*priority=*/1));
  StepPlan p = s_->Step(T0());
  ASSERT_EQ(p.prefills.size(), 2u) << PlanString(p);
  ASSERT_EQ(s_->kv().num_free_blocks(), 0);
  StepPlan a = s_->StepAhead(T0());
  // Both need a new block to grow and none is free: no preemption ahead.
  EXPECT_TRUE(a.deferred) << PlanString(a);
  EXPECT_TRUE(a.preempted.empty());
  EXPECT_TRUE(a.idle()) << PlanString(a);
  const StepResult r = Tokens1({{1, 6, false}, {2, 7, false}});
  ASSERT_TRUE(s_->SetPendingTokens(r).ok());
  EXPECT_FALSE(s_->has_plan_ahead());
  ASSERT_TRUE(s_->OnStepDone(r).ok());
  // A Step preempts the less important one.
  p = s_->Step(T0());
  EXPECT_EQ(p.preempted, std::vector<SchedSeqId>{2}) << PlanString(p);
  ASSERT_EQ(p.decodes.size(), 1u);
  EXPECT_EQ(p.decodes[0].id, 1u);
}

TEST_F(SchedulerTest, AFailedStepEndsTheSequencesOfThePlanAheadToo) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 10));
  ASSERT_FALSE(s_->Step(T0()).idle());
  Submit(Req(2, 6, 10));
  StepPlan a = s_->StepAhead(T0());
  ASSERT_EQ(a.decodes.size(), 1u);
  ASSERT_EQ(a.prefills.size(), 1u);  // admitted ahead
  auto done = s_->OnStepFailed(Internal("device lost"));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_FALSE(s_->has_work());
  EXPECT_FALSE(s_->has_plan_ahead());
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
  EXPECT_TRUE(s_->Step(T0()).idle());
}

TEST_F(SchedulerTest, AFailedStepAfterAPlanAheadEndsOnlyThatStepsSequences) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 10));
  Submit(Req(2, 6, 10));
  ASSERT_EQ(s_->Step(T0()).prefills.size(), 2u);
  s_->Cancel(2);
  StepPlan a = s_->StepAhead(T0());  // 2 is held out: it ends after this step
  ASSERT_EQ(a.decodes.size(), 1u);
  const StepResult r = Tokens1({{1, 5, false}, {2, 5, false}});
  ASSERT_TRUE(s_->SetPendingTokens(r).ok());
  ASSERT_TRUE(s_->OnStepDone(r).ok());
  // The step planned ahead (1 alone) fails; 2 was not in it.
  auto done = s_->OnStepFailed(Internal("device lost"));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, 1u);
  ASSERT_TRUE(s_->Find(2).has_value());
  StepPlan p = s_->Step(T0());
  ASSERT_EQ(p.finished.size(), 1u);
  EXPECT_EQ(p.finished[0].reason, SeqEnd::kCancelled);
}

TEST_F(SchedulerTest, SetPendingTokensWantsExactlyOneTokenForEachPendingOne) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 10));
  Submit(Req(2, 6, 10));
  ASSERT_FALSE(s_->Step(T0()).idle());
  EXPECT_EQ(s_->SetPendingTokens(Tokens1({{1, 5, false}})).code(),
            StatusCode::kFailedPrecondition);  // nothing planned ahead
  ASSERT_FALSE(s_->StepAhead(T0()).idle());
  EXPECT_EQ(s_->SetPendingTokens(Tokens1({{1, 5, false}})).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s_->SetPendingTokens(Tokens1({{1, 5, false}, {2, -1, false}})).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(s_->SetPendingTokens(Tokens1({{1, 5, false}, {3, 5, false}})).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, PipelinedAndStepByStepRunsGiveEverySequenceTheSameTokens) {
  auto run = [&](bool pipelined) {
    Make(Config(32, 4));
    for (SchedSeqId id = 1; id <= 12; ++id) {
      Submit(Req(id, 3 + static_cast<int>(id % 5) * 4, 4 + static_cast<int>(id % 7),
                 static_cast<int>(id % 3)));
      if (id % 4 == 0) eng_->stop_at[id] = 3;
    }
    for (int i = 0; i < 500 && s_->has_work(); ++i) {
      pipelined ? eng_->RunPipelined(T0()) : eng_->RunStep(T0());
      EXPECT_TRUE(s_->kv().CheckInvariants().ok());
    }
    EXPECT_FALSE(s_->has_work());
    EXPECT_EQ(s_->kv().stats().used_blocks, 0);
    if (pipelined) {
      EXPECT_GT(eng_->ahead_steps, 10);
    }
    return std::make_pair(eng_->emitted, eng_->ended);
  };
  const auto serial = run(false);
  const auto piped = run(true);
  EXPECT_EQ(serial.first, piped.first);
  EXPECT_EQ(serial.second, piped.second);
}

}  // namespace
}  // namespace kinfer
