// Speculative decoding in the engine on the real model (issue 3, item 6): n-gram (prompt lookup)
// drafts are verified in one step and greedy output is token for token the same with them on and
// off, alone and batched; a draft model that is the target itself has every draft accepted; with
// sampling, the same seed gives the same output as without speculation, also when the KV cache is
// too small for every draft (drafts cut to what fits, preemption), and the draft model's drafts
// are all accepted; max_tokens and stop rules hold exactly when a draft overshoots them.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine/engine.h"
#include "runtime/model/llama_model.h"
#include "runtime/spec/draft_model_proposer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/bundled_model.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::kNone;
  int completion_tokens = 0;
};

Result Drain(RequestStream& s) {
  Result r;
  StreamEvent ev;
  while (s.Next(&ev, milliseconds(120000))) {
    r.tokens.insert(r.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    r.text += ev.text;
    if (ev.finish != FinishReason::kNone) {
      r.finish = ev.finish;
      r.completion_tokens = ev.completion_tokens;
      EXPECT_TRUE(ev.error.ok()) << ev.error.ToString();
      break;
    }
  }
  return r;
}

// Stats are published after the step that ended the last request: poll briefly.
EngineStats SettledStats(const Engine& e) {
  for (int i = 0; i < 200 && e.Stats().running > 0; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  std::this_thread::sleep_for(milliseconds(20));
  return e.Stats();
}

class SpecDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KINFER_REQUIRE_MODEL();
    const testing::BundledModel* b = testing::BundledModel::Get();
    ASSERT_NE(b, nullptr);
    model_ = b->model();
    tokenizer_ = b->tokenizer();
  }
  static EngineOptions Options(bool spec_default) {
    EngineOptions o;
    o.context_length = 768;
    o.max_running = 16;
    o.max_batch_tokens = 256;
    o.spec.default_on = spec_default;
    o.spec.max_tokens = 4;
    return o;
  }
  GenerationRequest Chat(const std::string& user, int max_tokens) {
    GenerationRequest r;
    r.prompt_tokens = tokenizer_->Encode(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + user +
            "<|im_end|>\n<|im_start|>assistant\n",
        false, true);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  // Prompts whose answers copy from the prompt (where prompt lookup pays) and ordinary ones.
  std::vector<GenerationRequest> Prompts() {
    return {
        Chat("Repeat this list exactly: apple, banana, cherry, date, elderberry, fig, grape, "
             "honeydew, kiwi, lemon, mango, nectarine.",
             48),
        Chat("Copy this sentence word for word: The quick brown fox jumps over the lazy dog "
             "while the cat sleeps on the warm windowsill.",
             40),
        Chat("Fix the typo and print the code again:\nfor (int i = 0; i < n; ++i) {\n  sum += "
             "valeus[i];\n}\nreturn sum;",
             48),
        Chat("What is the capital of France?", 24),
        Chat("Count from one to fifteen in words, separated by commas.", 48),
    };
  }
  // Submits every request to `e` at once, then drains each in turn.
  static std::vector<Result> RunTogether(Engine& e, const std::vector<GenerationRequest>& reqs) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest& r : reqs) {
      auto s = e.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) streams.push_back(*s);
    }
    std::vector<Result> out;
    for (auto& s : streams) out.push_back(Drain(*s));
    return out;
  }
  // Runs `r` on an engine without speculation and on one with it: the same tokens, text, finish
  // and count.
  static void ExpectTheSameOnAndOff(Engine& off, Engine& on, const GenerationRequest& r,
                                    const std::string& what) {
    auto a = off.Submit(r);
    ASSERT_TRUE(a.ok()) << what;
    const Result plain = Drain(**a);
    auto b = on.Submit(r);
    ASSERT_TRUE(b.ok()) << what;
    const Result spec = Drain(**b);
    EXPECT_EQ(plain.tokens, spec.tokens) << what << ": " << plain.text << "\n---\n" << spec.text;
    EXPECT_EQ(plain.text, spec.text) << what;
    EXPECT_EQ(plain.finish, spec.finish) << what;
    EXPECT_EQ(plain.completion_tokens, spec.completion_tokens) << what;
  }
  Result Run(EngineOptions o, GenerationRequest r) {
    Engine e(model_, tokenizer_, o);
    auto s = e.Submit(std::move(r));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return Drain(**s);
  }

  LlamaModel* model_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;
};

TEST_F(SpecDecodeTest, GreedyNgramOutputIsIdenticalWithSpeculationOnAndOff) {
  Engine off(model_, tokenizer_, Options(false));
  Engine on(model_, tokenizer_, Options(true));
  for (const GenerationRequest& r : Prompts()) ExpectTheSameOnAndOff(off, on, r, "");
  const EngineStats so = SettledStats(off);
  const EngineStats sn = SettledStats(on);
  EXPECT_EQ(so.spec_draft_tokens, 0);
  EXPECT_GT(sn.spec_draft_tokens, 0);
  EXPECT_GT(sn.spec_accepted_tokens, 0);  // the copying prompts accept drafts
  EXPECT_LE(sn.spec_accepted_tokens, sn.spec_draft_tokens);
}

// Penalties under speculation: every draft row's penalty window is the history before its input
// token, whatever the window's length -- 0 (no window: the first row's window once started past
// its input, a span of (size_t)-1 tokens), 1, 8 or the whole history -- so the output is the
// plain decode's, token for token.
TEST_F(SpecDecodeTest, PenaltiesOfAnyWindowGiveTheSameTokensWithSpeculation) {
  Engine off(model_, tokenizer_, Options(false));
  Engine on(model_, tokenizer_, Options(true));
  for (int last_n : {0, 1, 8, -1}) {
    GenerationRequest r = Prompts()[0];
    r.sampling.repetition_penalty = 1.3f;
    r.sampling.frequency_penalty = 0.2f;
    r.sampling.penalty_last_n = last_n;
    ExpectTheSameOnAndOff(off, on, r, "last_n " + std::to_string(last_n));
  }
  EXPECT_GT(SettledStats(on).spec_draft_tokens, 0);
}

TEST_F(SpecDecodeTest, ARequestOptsInOrOutWhateverTheServerDefault) {
  Engine e(model_, tokenizer_, Options(false));
  GenerationRequest r = Prompts()[0];
  r.speculative_tokens = kSpeculativeServerMax;  // "speculative": true
  auto s = e.Submit(r);
  ASSERT_TRUE(s.ok());
  const Result on = Drain(**s);
  const EngineStats after_on = SettledStats(e);
  EXPECT_GT(after_on.spec_draft_tokens, 0);
  r.speculative_tokens = 0;
  auto t = e.Submit(r);
  ASSERT_TRUE(t.ok());
  const Result off = Drain(**t);
  EXPECT_EQ(on.tokens, off.tokens);
  EXPECT_EQ(SettledStats(e).spec_draft_tokens, after_on.spec_draft_tokens);

  Engine d(model_, tokenizer_, Options(true));
  r.speculative_tokens = 0;
  auto u = d.Submit(r);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(Drain(**u).tokens, on.tokens);
  EXPECT_EQ(SettledStats(d).spec_draft_tokens, 0);
}

TEST_F(SpecDecodeTest, ConcurrentSpeculatingRequestsEachProduceTheirSoloTokens) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    for (const GenerationRequest& r : Prompts()) reqs.push_back(r);
  }
  std::vector<Result> solo;
  for (const GenerationRequest& r : Prompts()) solo.push_back(Run(Options(false), r));
  Engine e(model_, tokenizer_, Options(true));
  const std::vector<Result> together = RunTogether(e, reqs);
  ASSERT_EQ(together.size(), reqs.size());
  for (size_t i = 0; i < together.size(); ++i) {
    EXPECT_EQ(together[i].tokens, solo[i % solo.size()].tokens) << "request " << i;
  }
  const EngineStats st = SettledStats(e);
  EXPECT_GT(st.spec_accepted_tokens, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
}

TEST_F(SpecDecodeTest, ADraftModelThatIsTheTargetHasEveryDraftAccepted) {
  EngineOptions o = Options(true);
  o.spec.draft_model = model_;
  Engine e(model_, tokenizer_, o);
  for (GenerationRequest r : {Prompts()[3], Prompts()[4]}) {
    r.ignore_eos = true;  // past the end of generation too: the draft model drafts it as well
    const Result plain = Run(Options(false), r);
    auto s = e.Submit(r);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(Drain(**s).tokens, plain.tokens);
  }
  const EngineStats st = SettledStats(e);
  EXPECT_GT(st.spec_draft_tokens, 20);
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
}

TEST_F(SpecDecodeTest, SampledOutputWithADraftModelIsSeededAndEveryDraftIsAccepted) {
  EngineOptions o = Options(true);
  o.spec.draft_model = model_;
  GenerationRequest r = Prompts()[3];
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 1234;
  r.max_tokens = 32;
  r.ignore_eos = true;
  Engine e(model_, tokenizer_, o);
  auto a = e.Submit(r);
  ASSERT_TRUE(a.ok());
  const Result first = Drain(**a);
  auto b = e.Submit(r);
  ASSERT_TRUE(b.ok());
  const Result second = Drain(**b);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_EQ(first.completion_tokens, 32);
  EXPECT_EQ(first.tokens, Run(Options(false), r).tokens);  // the text without speculation
  const EngineStats st = SettledStats(e);
  EXPECT_GT(st.spec_draft_tokens, 0);
  // The same model, the same numerics and the target's noise: the draft model draws
  // what the target draws, every time.
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);
}

// A seeded, sampled request's text does not depend on speculation or on load: drafts cut short
// by a small KV cache (Scheduler::ScheduleDrafts) or dropped by preemption change how many tokens
// a step confirms, never which. (Before the draw's noise was keyed by output index, a draft row
// took two and a plain row one, so a cut draft changed the text.)
TEST_F(SpecDecodeTest, SeededSampledOutputIsTheSameWithoutSpeculationAndUnderKvPressure) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = Prompts()[static_cast<size_t>(i) % Prompts().size()];
    r.sampling.temperature = 0.9f;
    if (i % 2 == 1) r.sampling.top_k = 40;
    if (i % 3 == 2) r.sampling.top_p = 0.9f;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    r.max_tokens = 40;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  std::vector<Result> solo;
  for (const GenerationRequest& r : reqs) solo.push_back(Run(Options(false), r));
  EngineOptions tight = Options(true);
  tight.context_length = 256;
  tight.kv_cache_tokens = 256;  // six sequences of ~90 positions, with drafts: not all fit
  tight.max_batch_tokens = 24;  // nor do six decodes with 4 drafts each in one step
  Engine e(model_, tokenizer_, tight);
  const std::vector<Result> together = RunTogether(e, reqs);
  ASSERT_EQ(together.size(), reqs.size());
  for (size_t i = 0; i < together.size(); ++i) {
    EXPECT_EQ(together[i].tokens, solo[i].tokens) << "request " << i;
  }
  const EngineStats st = SettledStats(e);
  EXPECT_GT(st.spec_accepted_tokens, 0);
  EXPECT_GT(st.spec_draft_tokens, st.spec_accepted_tokens);  // some drafts were wrong
  EXPECT_GT(st.preemptions, 0);  // the cache was that tight (4 here on 2026-12-07)
}

TEST_F(SpecDecodeTest, MaxTokensAndStopStringsHoldExactlyUnderSpeculation) {
  GenerationRequest r = Prompts()[0];
  for (int max_tokens : {1, 2, 3, 7, 13}) {
    r.max_tokens = max_tokens;
    const Result plain = Run(Options(false), r);
    const Result spec = Run(Options(true), r);
    EXPECT_EQ(spec.tokens, plain.tokens) << max_tokens;
    EXPECT_EQ(spec.completion_tokens, plain.completion_tokens) << max_tokens;
    EXPECT_EQ(spec.finish, plain.finish) << max_tokens;
  }
  r.max_tokens = 48;
  r.stop = {"cherry"};
  const Result plain = Run(Options(false), r);
  const Result spec = Run(Options(true), r);
  EXPECT_EQ(plain.text, spec.text);
  EXPECT_EQ(spec.finish, FinishReason::kStop);
  EXPECT_EQ(plain.completion_tokens, spec.completion_tokens);
}

// The draft model proposer alone: after a partly accepted draft it keeps its computed prefix and
// proposes from the new history; Release drops the sequence; caches grow with their sequences.
TEST_F(SpecDecodeTest, DraftModelProposerProposesTheTargetsGreedyContinuation) {
  DraftModelProposer p(model_);
  GenerationRequest r = Prompts()[3];
  const Result plain = Run(Options(false), r);
  ASSERT_GE(plain.tokens.size(), 6u);
  std::vector<int32_t> history = r.prompt_tokens;
  history.push_back(plain.tokens[0]);
  DraftRequest dr;
  dr.seq = 7;
  dr.history = history;
  dr.max_tokens = 4;
  dr.max_positions = static_cast<int>(history.size()) + 16;
  DraftProposal d = p.Propose(dr);
  ASSERT_EQ(d.tokens.size(), 4u);
  EXPECT_EQ(d.tokens, std::vector<int32_t>(plain.tokens.begin() + 1, plain.tokens.begin() + 5));
  // Two accepted, then the target's own token: the next proposal continues from there.
  history.insert(history.end(), plain.tokens.begin() + 1, plain.tokens.begin() + 4);
  dr.history = history;
  dr.max_tokens = 2;
  d = p.Propose(dr);
  EXPECT_EQ(d.tokens, std::vector<int32_t>(plain.tokens.begin() + 4, plain.tokens.begin() + 6));
  EXPECT_EQ(p.num_sequences(), 1u);
  p.Release(7);
  EXPECT_EQ(p.num_sequences(), 0u);

  // A sequence that may run to the end of the context (max_tokens left out) does not take a
  // whole context of draft KV at its first draft: its cache starts at what it needs (at least
  // 256 positions) and doubles as the sequence grows, proposing the same tokens.
  std::vector<int32_t> first = r.prompt_tokens;
  first.push_back(plain.tokens[0]);
  dr.seq = 3;
  dr.history = first;
  dr.max_tokens = 4;
  dr.max_positions = model_->hparams().n_ctx_train;  // 8192
  d = p.Propose(dr);
  EXPECT_EQ(d.tokens, std::vector<int32_t>(plain.tokens.begin() + 1, plain.tokens.begin() + 5));
  EXPECT_EQ(p.capacity_positions(), 256);
  std::vector<int32_t> long_history = first;
  while (long_history.size() < 300) {
    const int32_t t = first[long_history.size() % first.size()];
    long_history.push_back(t);
  }
  dr.history = long_history;
  EXPECT_EQ(p.Propose(dr).tokens.size(), 4u);
  EXPECT_EQ(p.capacity_positions(), 512);
}


// Sampling, the proposer draws token j with the target's noise key for output index
// first_index + j: the target itself as the draft model proposes the target's seeded tokens.
TEST_F(SpecDecodeTest, DraftModelProposerSamplesWithTheTargetsNoise) {
  DraftModelProposer p(model_);
  GenerationRequest r = Prompts()[4];
  r.sampling.temperature = 2.0f;  // many likely tokens: another seed draws others
  r.sampling.seed = 99;
  r.max_tokens = 12;
  const Result plain = Run(Options(false), r);
  ASSERT_EQ(plain.tokens.size(), 12u);
  std::vector<int32_t> history = r.prompt_tokens;
  history.insert(history.end(), plain.tokens.begin(), plain.tokens.begin() + 3);
  DraftRequest dr;
  dr.seq = 1;
  dr.history = history;
  dr.max_tokens = 5;
  dr.sampling = &r.sampling;
  dr.seed = 99;
  dr.first_index = 3;
  dr.max_positions = static_cast<int>(r.prompt_tokens.size()) + r.max_tokens;
  EXPECT_EQ(p.Propose(dr).tokens,
            std::vector<int32_t>(plain.tokens.begin() + 3, plain.tokens.begin() + 8));
  // Another seed's noise proposes another continuation.
  dr.seq = 2;
  dr.seed = 100;
  EXPECT_NE(p.Propose(dr).tokens,
            std::vector<int32_t>(plain.tokens.begin() + 3, plain.tokens.begin() + 8));
}

}  // namespace
}  // namespace kinfer
