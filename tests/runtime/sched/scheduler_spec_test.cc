// Scheduler: speculative decoding (SetDraft, draft verification in a decode item, KV give-back).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "runtime/sched/scheduler.h"
#include "tests/runtime/sched/sched_test_util.h"

namespace kinfer {
namespace {

// A draft of `k` tokens for decoding sequence `id` whose first `correct` tokens are what the
// FakeEngine's target produces and the rest are not.
std::vector<int32_t> Draft(const Scheduler& s, SchedSeqId id, int k, int correct) {
  const auto v = s.Find(id);
  EXPECT_TRUE(v.has_value() && v->decoding);
  const int len = static_cast<int>(v->tokens.size());
  std::vector<int32_t> d;
  for (int j = 0; j < k; ++j) {
    const int32_t t = FakeEngine::TokenFor(id, len + j);
    d.push_back(j < correct ? t : t + 1);
  }
  return d;
}

class SchedulerSpecTest : public SchedulerTest {
 protected:
  // Runs until `id` decodes (its prompt is computed and its first token sampled).
  void ToDecoding(SchedSeqId id) {
    for (int i = 0; i < 100; ++i) {
      const auto v = s_->Find(id);
      if (v && v->decoding) return;
      Run();
    }
    FAIL() << "sequence " << id << " never reached decoding";
  }
};

TEST_F(SchedulerSpecTest, SetDraftOnlyForDecodingSequences) {
  Make(Config(64, 4));
  EXPECT_FALSE(s_->SetDraft(1, {1, 2}));  // unknown
  Submit(Req(1, 10, 8));
  EXPECT_FALSE(s_->SetDraft(1, {1, 2}));  // waiting
  ToDecoding(1);
  EXPECT_TRUE(s_->SetDraft(1, {1, 2}));
  EXPECT_TRUE(s_->SetDraft(1, {}));  // clears
  const StepPlan p = Run();
  ASSERT_EQ(p.decodes.size(), 1u);
  EXPECT_TRUE(p.decodes[0].draft.empty());
  EXPECT_EQ(p.decodes[0].length, 1);
}

TEST_F(SchedulerSpecTest, AnAcceptedDraftAddsAllItsTokensAndTheBonusInOneStep) {
  Make(Config(64, 4));
  Submit(Req(1, 10, 20));
  ToDecoding(1);
  const auto before = s_->Find(1);
  const int len = static_cast<int>(before->tokens.size());
  ASSERT_TRUE(s_->SetDraft(1, Draft(*s_, 1, 3, 3)));
  const StepPlan p = Run();
  ASSERT_EQ(p.decodes.size(), 1u);
  EXPECT_EQ(p.decodes[0].start, len - 1);
  EXPECT_EQ(p.decodes[0].length, 4);
  EXPECT_EQ(p.num_draft_tokens, 3);
  EXPECT_EQ(p.num_tokens, 4);
  const auto after = s_->Find(1);
  EXPECT_EQ(static_cast<int>(after->tokens.size()), len + 4);  // 3 drafts + 1 bonus
  EXPECT_EQ(after->generated, before->generated + 4);
  EXPECT_EQ(after->num_computed, len + 3);
  EXPECT_TRUE(after->decoding);
  EXPECT_EQ(s_->kv().num_slots(1), len + 3);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(after->tokens[len + j], FakeEngine::TokenFor(1, len + j));
  EXPECT_EQ(s_->stats().draft_tokens, 3);
  EXPECT_EQ(s_->stats().accepted_tokens, 3);
}

TEST_F(SchedulerSpecTest, RejectedDraftTokensGiveTheirKvSlotsAndBlocksBack) {
  Make(Config(64, 4));
  Submit(Req(1, 11, 30));  // 11 prompt tokens: 3 blocks
  ToDecoding(1);
  const auto before = s_->Find(1);
  const int len = static_cast<int>(before->tokens.size());  // 12
  const int free_before = s_->kv().num_free_blocks();
  const size_t blocks_before = s_->BlockTable(1).size();
  ASSERT_TRUE(s_->SetDraft(1, Draft(*s_, 1, 6, 1)));  // one right, five wrong
  const StepPlan p = Run();
  EXPECT_EQ(p.decodes[0].length, 7);
  const auto after = s_->Find(1);
  // One accepted draft token and the target's correction; the KV of the last token and of the
  // accepted draft token is kept (positions len - 1 and len).
  EXPECT_EQ(static_cast<int>(after->tokens.size()), len + 2);
  EXPECT_EQ(after->num_computed, len + 1);
  EXPECT_EQ(s_->kv().num_slots(1), len + 1);
  EXPECT_EQ(after->tokens[len], FakeEngine::TokenFor(1, len));
  EXPECT_EQ(after->tokens[len + 1], FakeEngine::TokenFor(1, len + 1));
  // The step took blocks for 6 more positions; only what the accepted token needs is kept.
  EXPECT_EQ(s_->BlockTable(1).size(), static_cast<size_t>(s_->kv().BlocksForTokens(len + 1)));
  EXPECT_LT(s_->BlockTable(1).size(), static_cast<size_t>(s_->kv().BlocksForTokens(len + 6)));
  EXPECT_EQ(s_->kv().num_free_blocks(),
            free_before - static_cast<int>(s_->BlockTable(1).size() - blocks_before));
  EXPECT_EQ(s_->stats().draft_tokens, 6);
  EXPECT_EQ(s_->stats().accepted_tokens, 1);
  // The next plain decode starts right after the kept positions.
  const StepPlan q = Run();
  ASSERT_EQ(q.decodes.size(), 1u);
  EXPECT_EQ(q.decodes[0].start, len + 1);
  EXPECT_EQ(q.decodes[0].length, 1);
}

TEST_F(SchedulerSpecTest, ADraftIsCutToMaxTokens) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 5));
  ToDecoding(1);  // 1 generated
  ASSERT_TRUE(s_->SetDraft(1, Draft(*s_, 1, 8, 8)));
  const StepPlan p = Run();
  // 4 more tokens allowed: 3 drafts + the bonus.
  EXPECT_EQ(p.decodes[0].draft.size(), 3u);
  EXPECT_EQ(eng_->ended[1], SeqEnd::kLength);
  EXPECT_FALSE(s_->Find(1).has_value());
}

TEST_F(SchedulerSpecTest, AStopInsideTheDraftEndsTheSequenceThere) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 20));
  ToDecoding(1);  // generated 1
  eng_->stop_at[1] = 3;  // the third generated token stops
  ASSERT_TRUE(s_->SetDraft(1, Draft(*s_, 1, 5, 5)));
  Run();
  EXPECT_EQ(eng_->ended[1], SeqEnd::kStop);
  EXPECT_EQ(eng_->accepted_total, 1);  // the draft before the stop token
  EXPECT_EQ(s_->kv().stats().used_blocks, 0);
  // The stop token was drafted: it counts as accepted; the three drafts after it are not counted.
  EXPECT_EQ(s_->stats().draft_tokens, 2);
  EXPECT_EQ(s_->stats().accepted_tokens, 2);
}

TEST_F(SchedulerSpecTest, DraftsNeverPreemptAndOnlyUseFreeBlocks) {
  Make(Config(/*num_blocks=*/6, /*block_size=*/4));  // 24 positions
  Submit(Req(1, 7, 16, /*priority=*/0));
  Submit(Req(2, 7, 16, /*priority=*/1));
  ToDecoding(1);
  ToDecoding(2);
  // Each holds 2 blocks (8 slots); 2 blocks are free: 8 more positions in all.
  ASSERT_EQ(s_->kv().num_free_blocks(), 2);
  ASSERT_TRUE(s_->SetDraft(1, Draft(*s_, 1, 12, 12)));
  ASSERT_TRUE(s_->SetDraft(2, Draft(*s_, 2, 12, 12)));
  const StepPlan p = Run();
  EXPECT_TRUE(p.preempted.empty());
  ASSERT_EQ(p.decodes.size(), 2u);
  // Both still decode; the drafts fit in the free room (the more important one first).
  int drafted = 0;
  for (const auto& d : p.decodes) drafted += static_cast<int>(d.draft.size());
  EXPECT_LE(drafted, 8);
  EXPECT_GT(p.decodes[0].draft.size(), 0u);
  EXPECT_EQ(p.decodes[0].id, 1u);
  EXPECT_TRUE(s_->Find(1).has_value());
  EXPECT_TRUE(s_->Find(2).has_value());
}

TEST_F(SchedulerSpecTest, DraftsTakeOnlyTheBudgetLeftAfterPromptChunks) {
  SchedulerConfig c = Config(256, 16);
  c.max_batch_tokens = 12;
  c.max_running = 4;
  c.max_prefill_chunk = 8;
  Make(c);
  Submit(Req(1, 5, 40));
  ToDecoding(1);
  Submit(Req(2, 30, 4));  // arrives while 1 decodes
  ASSERT_TRUE(s_->SetDraft(1, Draft(*s_, 1, 8, 8)));
  const StepPlan p = Run();
  const ScheduledSeq* chunk = FindItem(p.prefills, 2);
  ASSERT_NE(chunk, nullptr);
  EXPECT_EQ(chunk->length, 8);                 // its full first chunk
  EXPECT_EQ(p.decodes[0].draft.size(), 3u);     // 12 - 1 decode - 8 prompt
  EXPECT_EQ(p.num_tokens, 12);
}

TEST_F(SchedulerSpecTest, PreemptionDropsTheDraft) {
  Make(Config(/*num_blocks=*/5, /*block_size=*/4));
  Submit(Req(1, 7, 12, /*priority=*/1));
  ToDecoding(1);
  ASSERT_TRUE(s_->SetDraft(1, {1, 2, 3}));
  // A more important request that needs the whole pool preempts it before drafts are planned.
  Submit(Req(2, 15, 4, /*priority=*/0));
  const StepPlan p = Run();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], 1u);
  EXPECT_EQ(p.num_draft_tokens, 0);
  Drain();
  EXPECT_EQ(eng_->ended[1], SeqEnd::kLength);
  EXPECT_EQ(eng_->ended[2], SeqEnd::kLength);
}

TEST_F(SchedulerSpecTest, AResultAcceptingMoreThanTheDraftIsRefused) {
  Make(Config(64, 4));
  Submit(Req(1, 6, 20));
  ToDecoding(1);
  ASSERT_TRUE(s_->SetDraft(1, {5, 6}));
  const StepPlan p = s_->Step(T0());
  ASSERT_EQ(p.decodes.size(), 1u);
  StepResult r;
  r.sampled.push_back(SampledToken{1, 7, false, 3});
  EXPECT_EQ(s_->OnStepDone(r).status().code(), StatusCode::kInvalidArgument);
  r.sampled[0].accepted = -1;
  EXPECT_EQ(s_->OnStepDone(r).status().code(), StatusCode::kInvalidArgument);
  r.sampled[0].accepted = 2;
  EXPECT_TRUE(s_->OnStepDone(r).ok());
  EXPECT_EQ(s_->Find(1)->generated, 4);
}

// With drafts of random length and quality offered every step to random sequences, every
// sequence generates exactly the tokens it generates without speculation, and the KV invariants
// hold at every step (checked by Run()).
TEST_F(SchedulerSpecTest, OutputIsTheSameWithAndWithoutDrafts) {
  auto run_all = [&](bool spec, uint32_t seed) {
    SchedulerConfig c = Config(/*num_blocks=*/40, /*block_size=*/4);
    c.max_batch_tokens = 24;
    c.max_running = 6;
    c.max_prefill_chunk = 8;
    Make(c);
    std::mt19937 rng(seed);
    for (SchedSeqId id = 1; id <= 10; ++id) {
      Submit(Req(id, 3 + static_cast<int>(rng() % 20), 4 + static_cast<int>(rng() % 20),
                 static_cast<int>(rng() % 3)));
    }
    for (int step = 0; step < 2000 && s_->has_work(); ++step) {
      if (spec) {
        for (SchedSeqId id = 1; id <= 10; ++id) {
          const auto v = s_->Find(id);
          if (!v || !v->decoding || rng() % 4 == 0) continue;
          const int k = 1 + static_cast<int>(rng() % 6);
          s_->SetDraft(id, Draft(*s_, id, k, static_cast<int>(rng() % (k + 1))));
        }
      }
      Run();
    }
    EXPECT_FALSE(s_->has_work());
    for (SchedSeqId id = 1; id <= 10; ++id) EXPECT_EQ(eng_->ended[id], SeqEnd::kLength) << id;
    return std::make_pair(eng_->emitted, s_->stats());
  };
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    const auto [plain, plain_stats] = run_all(false, seed);
    const auto [spec, spec_stats] = run_all(true, seed);
    EXPECT_EQ(plain, spec) << "seed " << seed;
    EXPECT_EQ(plain.size(), 10u);
    EXPECT_GT(spec_stats.accepted_tokens, 0) << "seed " << seed;
    EXPECT_LT(spec_stats.steps, plain_stats.steps) << "seed " << seed;
  }
}

}  // namespace
}  // namespace kinfer
