// The continuous-batching engine on the real model (issue 3): 32 concurrent greedy requests of
// mixed lengths produce exactly the tokens each produces alone; a second conversation turn reuses
// the first turn's KV blocks; a tiny KV pool forces preemption and every request still ends with
// its solo tokens; a cancelled request stops within a step and frees its blocks; priorities order
// admission.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend/cpu_backend.h"
#include "runtime/engine/engine.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/bundled_model.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> prompt_lps;
  FinishReason finish = FinishReason::kNone;
  Status error;
  double queue_seconds = -1;
};

Result Drain(RequestStream& s) {
  Result r;
  StreamEvent ev;
  while (s.Next(&ev, milliseconds(120000))) {
    if (ev.queue_seconds >= 0) r.queue_seconds = ev.queue_seconds;
    r.tokens.insert(r.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    for (TokenLogprob& t : ev.prompt_logprobs) r.prompt_lps.push_back(std::move(t));
    if (ev.finish != FinishReason::kNone) {
      r.finish = ev.finish;
      r.error = ev.error;
      break;
    }
  }
  return r;
}

// The final event reaches the stream before the engine thread reports the step back to the
// scheduler and publishes its stats: poll briefly.
bool AllBlocksReleased(const Engine& e) {
  for (int i = 0; i < 200; ++i) {
    if (e.Stats().kv_blocks_used == 0 && e.Stats().running == 0) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

class BatchingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KINFER_REQUIRE_MODEL();
    const testing::BundledModel* b = testing::BundledModel::Get();
    ASSERT_NE(b, nullptr);
    model_ = b->model();
    tokenizer_ = b->tokenizer();
  }

  static EngineOptions Options() {
    EngineOptions o;
    o.context_length = 512;
    o.max_queued_requests = 64;
    o.max_running = 32;
    o.max_batch_tokens = 256;
    return o;
  }
  GenerationRequest Chat(const std::string& user, int max_tokens) {
    GenerationRequest r;
    r.prompt_tokens = tokenizer_->Encode(
        "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n", false, true);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  std::vector<GenerationRequest> Mixed(int n) {
    const std::vector<std::string> topics = {
        "What is the capital of France?",      "Name three colors.",
        "Write a haiku about the sea.",        "Explain what a CPU does in two sentences.",
        "List the days of the week.",          "Why is the sky blue? Answer briefly.",
        "Tell me a fun fact about octopuses.", "Count from one to ten in words."};
    std::vector<GenerationRequest> out;
    for (int i = 0; i < n; ++i) {
      std::string prompt = topics[i % topics.size()];
      for (int k = 0; k < i % 5; ++k) prompt += " Please be precise and clear.";
      out.push_back(Chat(prompt, 6 + (i * 7) % 23));
    }
    return out;
  }
  // Each request alone, in a fresh engine (nothing cached, nothing beside it).
  std::vector<Result> Alone(const std::vector<GenerationRequest>& reqs, EngineOptions o) {
    std::vector<Result> out;
    for (const GenerationRequest& r : reqs) {
      Engine e(model_, tokenizer_, o);
      auto s = e.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      out.push_back(Drain(**s));
    }
    return out;
  }
  std::vector<Result> Together(Engine& e, const std::vector<GenerationRequest>& reqs) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest& r : reqs) {
      auto s = e.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    std::vector<Result> out;
    for (auto& s : streams) out.push_back(Drain(*s));
    return out;
  }

  const Tokenizer* tokenizer_ = nullptr;
  LlamaModel* model_ = nullptr;
};

TEST_F(BatchingTest, ThirtyTwoConcurrentGreedyRequestsMatchEachAlone) {
  const std::vector<GenerationRequest> reqs = Mixed(32);
  const std::vector<Result> alone = Alone(reqs, Options());
  Engine e(model_, tokenizer_, Options());
  const std::vector<Result> together = Together(e, reqs);
  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].finish, alone[i].finish) << "request " << i;
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
  }
  EXPECT_TRUE(AllBlocksReleased(e)) << "every block released";
}

TEST_F(BatchingTest, TheSecondTurnReusesTheFirstTurnsBlocks) {
  Engine e(model_, tokenizer_, Options());
  GenerationRequest t1 = Chat("Tell me a fun fact about octopuses.", 24);
  auto s1 = e.Submit(t1);
  ASSERT_TRUE(s1.ok());
  Result r1 = Drain(**s1);
  ASSERT_NE(r1.finish, FinishReason::kError);
  const int64_t hits_before = e.Stats().prefix_cache_hits_tokens;
  // Turn 2: the whole first turn, the answer, and a new question.
  GenerationRequest t2 = t1;
  t2.prompt_tokens.insert(t2.prompt_tokens.end(), r1.tokens.begin(), r1.tokens.end());
  std::vector<int32_t> more = tokenizer_->Encode(
      "<|im_end|>\n<|im_start|>user\nAnd another one?<|im_end|>\n<|im_start|>assistant\n", false,
      true);
  t2.prompt_tokens.insert(t2.prompt_tokens.end(), more.begin(), more.end());
  auto s2 = e.Submit(t2);
  ASSERT_TRUE(s2.ok());
  Result r2 = Drain(**s2);
  ASSERT_NE(r2.finish, FinishReason::kError);
  const int64_t reused = e.Stats().prefix_cache_hits_tokens - hits_before;
  // Turn 1's prompt and its answer fill whole 16-token blocks that turn 2 finds again (all but
  // the answer's last token, which never went through the model as an input).
  const int64_t shared = static_cast<int64_t>(t1.prompt_tokens.size() + r1.tokens.size() - 1);
  EXPECT_EQ(reused, shared / 16 * 16) << "turn 2 recomputed what turn 1 left cached";
  // And the reuse changes nothing: turn 2 alone, from a cold cache, gives the same tokens.
  EXPECT_EQ(r2.tokens, Alone({t2}, Options())[0].tokens);
}

TEST_F(BatchingTest, ATinyKvPoolPreemptsAndEveryRequestStillEndsWithItsSoloTokens) {
  const std::vector<GenerationRequest> reqs = Mixed(8);
  const std::vector<Result> alone = Alone(reqs, Options());
  EngineOptions o = Options();
  o.context_length = 128;
  o.kv_cache_tokens = 128;  // 8 blocks for 8 requests of ~30-60 positions each
  Engine e(model_, tokenizer_, o);
  const std::vector<Result> together = Together(e, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i].finish, alone[i].finish) << "request " << i;
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "request " << i;
  }
  EXPECT_GT(e.Stats().preemptions, 0) << "the pool was meant to run out";
  EXPECT_TRUE(AllBlocksReleased(e));
}

TEST_F(BatchingTest, PromptLogprobsAreTheSameChunkedBatchedAndPreempted) {
  // Every request scores its prompt (completions' echo with logprobs). Alone, each prompt is one
  // chunk; together, 16-token chunks over a pool small enough to preempt. Each prompt token after
  // the first gets one entry, once, with the same logprob and alternatives either way.
  std::vector<GenerationRequest> reqs = Mixed(8);
  for (GenerationRequest& r : reqs) r.prompt_logprobs = 2;
  GenerationRequest plain = Chat("Name three colors.", 4);  // asks for none, gets none
  const std::vector<Result> alone = Alone(reqs, Options());
  EngineOptions o = Options();
  o.context_length = 128;
  o.kv_cache_tokens = 128;
  o.max_batch_tokens = 16;
  Engine e(model_, tokenizer_, o);
  reqs.push_back(plain);
  const std::vector<Result> together = Together(e, reqs);
  EXPECT_TRUE(together.back().prompt_lps.empty());
  for (size_t i = 0; i + 1 < reqs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i);
    const std::vector<int32_t>& prompt = reqs[i].prompt_tokens;
    ASSERT_EQ(alone[i].prompt_lps.size(), prompt.size() - 1);
    ASSERT_EQ(together[i].prompt_lps.size(), prompt.size() - 1);
    for (size_t k = 0; k + 1 < prompt.size(); ++k) {
      const TokenLogprob& a = alone[i].prompt_lps[k];
      const TokenLogprob& b = together[i].prompt_lps[k];
      EXPECT_EQ(a.token, prompt[k + 1]);
      EXPECT_EQ(b.token, prompt[k + 1]);
      EXPECT_FLOAT_EQ(b.logprob, a.logprob) << "position " << k + 1;
      EXPECT_LE(a.logprob, 0.0f);
      ASSERT_EQ(a.top.size(), 2u);
      ASSERT_EQ(b.top.size(), 2u);
      EXPECT_EQ(b.top[0].token, a.top[0].token);
      EXPECT_FLOAT_EQ(b.top[0].logprob, a.top[0].logprob);
      EXPECT_GE(a.top[0].logprob, a.logprob);  // the best is at least the prompt's own token
    }
    EXPECT_EQ(together[i].tokens, alone[i].tokens);
  }
  EXPECT_GT(e.Stats().preemptions, 0) << "the pool was meant to run out";
  EXPECT_TRUE(AllBlocksReleased(e));
}

TEST_F(BatchingTest, ACancelledRequestStopsWithinAStepAndFreesItsBlocks) {
  Engine e(model_, tokenizer_, Options());
  GenerationRequest r = Chat("Write a long story about a dragon.", 400);
  auto s = e.Submit(r);
  ASSERT_TRUE(s.ok());
  StreamEvent ev;
  ASSERT_TRUE((*s)->Next(&ev, milliseconds(30000)));  // generating
  for (int i = 0; i < 100 && e.Stats().kv_blocks_used == 0; ++i) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_GT(e.Stats().kv_blocks_used, 0);
  (*s)->Cancel();
  Result rest = Drain(**s);
  EXPECT_EQ(rest.finish, FinishReason::kCancelled);
  EXPECT_LT(rest.tokens.size(), 25u) << "kept generating long after the cancel";
  EXPECT_TRUE(AllBlocksReleased(e));
}

TEST_F(BatchingTest, TheKvPoolCanBeSizedFromAMemoryBudget) {
  // kv_cache_fraction sizes the pool from the backend's budget (the host's MemAvailable on the
  // CPU) instead of kv_cache_tokens; never below one full context.
  auto backend = CpuBackend::Borrow(model_);
  const size_t block_bytes = backend->KvBlockBytes(16);
  EngineOptions o = Options();
  o.kv_cache_fraction = 0.002;
  const int64_t budget = backend->KvMemoryBudgetBytes(o.kv_cache_fraction);
  ASSERT_GT(budget, 0);
  Engine e(backend.get(), tokenizer_, o);
  auto s = e.Submit(Chat("Name three colors.", 4));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Drain(**s).finish, FinishReason::kLength);
  const int64_t blocks = e.Stats().kv_blocks_total;
  const int64_t expected =
      std::max<int64_t>(budget / static_cast<int64_t>(block_bytes), (o.context_length + 15) / 16);
  // MemAvailable moves between the two reads: within a quarter.
  EXPECT_GT(blocks, expected * 3 / 4);
  EXPECT_LT(blocks, expected * 5 / 4);
  // A budget too small for one context still holds one.
  EngineOptions tiny = Options();
  tiny.kv_cache_fraction = 1e-9;
  Engine t(backend.get(), tokenizer_, tiny);
  auto u = t.Submit(Chat("Name three colors.", 4));
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(Drain(**u).finish, FinishReason::kLength);
  EXPECT_EQ(t.Stats().kv_blocks_total, (tiny.context_length + 15) / 16);
}

TEST_F(BatchingTest, MoreImportantRequestsAreAdmittedFirst) {
  // One running slot: a batch-class request queued first still waits for a critical one queued
  // after it (smaller priority = more important, as the sidecar's classes).
  EngineOptions o = Options();
  o.max_running = 1;
  Engine e(model_, tokenizer_, o);
  GenerationRequest head = Chat("Count from one to ten in words.", 40);
  GenerationRequest batch = Chat("Name three colors.", 4);
  batch.priority = 2;
  GenerationRequest critical = Chat("Name three colors.", 4);
  critical.priority = 0;
  auto h = e.Submit(head);
  ASSERT_TRUE(h.ok());
  StreamEvent ev;
  ASSERT_TRUE((*h)->Next(&ev, milliseconds(30000)));  // the head is running
  auto b = e.Submit(batch);
  auto c = e.Submit(critical);
  ASSERT_TRUE(b.ok() && c.ok());
  Result rb = Drain(**b);
  Result rc = Drain(**c);
  Drain(**h);
  EXPECT_LT(rc.queue_seconds, rb.queue_seconds) << "the critical request waited longer";
}

}  // namespace
}  // namespace kinfer
