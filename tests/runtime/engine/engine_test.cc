// The single-sequence engine on the real model and tokenizer: streaming, stop conditions,
// cancellation, admission errors, and determinism (greedy and seeded) across requests.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend/cpu_backend.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"
#include "runtime/sample/json_schema_grammar.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/test_model_path.h"

namespace kinfer {
namespace {

using std::chrono::milliseconds;

struct Collected {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  StreamEvent last;
  int events = 0;
  std::vector<TokenLogprob> logprobs;
};

Collected Drain(RequestStream& s) {
  Collected c;
  StreamEvent ev;
  while (s.Next(&ev, milliseconds(60000))) {
    c.text += ev.text;
    c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    c.logprobs.insert(c.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    ++c.events;
    if (ev.finish != FinishReason::kNone) {
      c.finish = ev.finish;
      c.last = ev;
      break;
    }
  }
  return c;
}

// Greedy, ended by the stop string "5", and a seeded draw for all 24 tokens.
struct ThreeRequests {
  GenerationRequest greedy, stopped, sampled;
};

// Each request's events in `got` are those in `want`: tokens, text, finish and counts.
void ExpectSameEvents(const std::vector<Collected>& want, const std::vector<Collected>& got) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "request " << i);
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    EXPECT_EQ(got[i].text, want[i].text);
    EXPECT_EQ(got[i].finish, want[i].finish);
    EXPECT_EQ(got[i].last.completion_tokens, want[i].last.completion_tokens);
    EXPECT_EQ(got[i].last.prompt_tokens, want[i].last.prompt_tokens);
  }
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::ModelAvailable()) return;
    auto f = GgufFile::Open(testing::ModelPath());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    file_ = new std::shared_ptr<const GgufFile>(std::move(f).value());
    auto t = Tokenizer::FromGguf(**file_);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tokenizer_ = std::move(t).value().release();
    auto m = LlamaModel::Load(*file_, 2);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tokenizer_;
    delete file_;
  }
  void SetUp() override {
    KINFER_REQUIRE_MODEL();
    EngineOptions o;
    o.context_length = 256;
    o.max_queued_requests = 4;
    engine_ = std::make_unique<Engine>(model_, tokenizer_, o);
  }

  // `answer_start` begins the assistant's turn, so that the continuation does not hang on a
  // near-tie in its first token (which the AVX2 and AVX-512 kernels may break differently).
  GenerationRequest Greedy(const std::string& user, int max_tokens,
                           const std::string& answer_start = "") {
    GenerationRequest r;
    r.prompt_tokens = tokenizer_->Encode(
        "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n" + answer_start, false,
        true);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
  }
  ThreeRequests Three() {
    ThreeRequests t;
    // Unprompted, the first token is a near-tie ("1" against "The": 0.06-0.1 nats apart);
    // after "1, 2, 3," each next number leads by about 5 nats, so "5" comes on every ISA.
    t.greedy = Greedy("Count from 1 to 10, separated by commas.", 24, "1, 2, 3,");
    t.stopped = t.greedy;
    t.stopped.stop = {"5"};
    t.sampled = t.greedy;
    t.sampled.sampling.temperature = 0.8f;
    t.sampled.sampling.top_k = 40;
    t.sampled.sampling.seed = 9;
    t.sampled.ignore_eos = true;
    return t;
  }

  static std::shared_ptr<const GgufFile>* file_;
  static Tokenizer* tokenizer_;
  static LlamaModel* model_;
  std::unique_ptr<Engine> engine_;
};
std::shared_ptr<const GgufFile>* EngineTest::file_ = nullptr;
Tokenizer* EngineTest::tokenizer_ = nullptr;
LlamaModel* EngineTest::model_ = nullptr;

TEST_F(EngineTest, GreedyAnswerStreamsTokensAndNamesParis) {
  auto s = engine_->Submit(Greedy("What is the capital of France?", 24));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Collected c = Drain(**s);
  EXPECT_NE(c.finish, FinishReason::kError) << c.last.error.ToString();
  EXPECT_NE(c.text.find("Paris"), std::string::npos) << c.text;
  EXPECT_GT(c.events, 1);
  EXPECT_EQ(c.last.completion_tokens, static_cast<int>(c.tokens.size()));
  EXPECT_GT(c.last.prompt_tokens, 5);
}

// A CPU backend that counts which of the two step calls the engine makes, and can refuse to
// draw (as a device refuses settings its kernel does not cover).
// The CPU backend behind a test's own hooks.
class WrappedCpu : public ModelBackend {
 public:
  explicit WrappedCpu(LlamaModel* model) : cpu_(CpuBackend::Borrow(model)) {}
  const LlamaHParams& hparams() const override { return cpu_->hparams(); }
  std::string name() const override { return "wrapped-cpu"; }
  int max_batch_tokens() const override { return cpu_->max_batch_tokens(); }
  size_t KvBlockBytes(int block_size) const override { return cpu_->KvBlockBytes(block_size); }
  int64_t KvMemoryBudgetBytes(double fraction) const override {
    return cpu_->KvMemoryBudgetBytes(fraction);
  }
  Status InitKvCache(int block_size, int num_blocks) override {
    return cpu_->InitKvCache(block_size, num_blocks);
  }
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override {
    return cpu_->ForwardBatch(seqs, logits);
  }

 protected:
  std::unique_ptr<CpuBackend> cpu_;
};

class CountingBackend final : public WrappedCpu {
 public:
  using WrappedCpu::WrappedCpu;
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override {
    ++logits_steps;
    if (++calls > fail_from) return Internal("the device fell off the bus");
    return cpu_->ForwardBatch(seqs, logits);
  }
  bool CanSample(const DrawParams& p) const override { return !refuse_top_p || p.top_p >= 1.0f; }
  Status ForwardBatchSample(std::span<const SequenceBatch> seqs, std::span<const DrawParams> rows,
                            std::vector<int32_t>* tokens) override {
    ++sample_steps;
    sample_rows += static_cast<int>(rows.size());
    for (const SequenceBatch& s : seqs) drafted_rows += s.num_logits > 1 ? s.num_logits : 0;
    return ModelBackend::ForwardBatchSample(seqs, rows, tokens);  // the default: a logits step too
  }
  Status ForwardBatchSampleMixed(std::span<const SequenceBatch> seqs,
                                 std::span<const DrawParams> rows, std::span<const int32_t> host_rows,
                                 std::vector<int32_t>* tokens,
                                 std::vector<float>* host_logits) override {
    ++mixed_steps;
    mixed_host_rows += static_cast<int>(host_rows.size());
    return ModelBackend::ForwardBatchSampleMixed(seqs, rows, host_rows, tokens, host_logits);
  }
  std::atomic<int> logits_steps{0}, sample_steps{0}, sample_rows{0};
  std::atomic<int> drafted_rows{0};  // sampled rows of sequences with several (a draft's)
  std::atomic<int> mixed_steps{0}, mixed_host_rows{0};
  bool refuse_top_p = false;
  std::atomic<int> calls{0};                      // ForwardBatch calls, the default sampling's too
  std::atomic<int> fail_from{1 << 30};            // calls after this many fail
};

TEST_F(EngineTest, PlainDrawsTakeTheBackendsSamplerWithTheSameTokens) {
  struct Counts {
    int sample_steps = 0, sample_rows = 0, logits_steps = 0, mixed_steps = 0, mixed_host_rows = 0;
    int drafted_rows = 0;
  };
  // Runs the requests at once on a fresh engine; returns each one's output (and its engine's
  // counters in last_stats).
  EngineStats last_stats;
  auto run = [&](bool backend_sampling, bool refuse_top_p, const std::vector<GenerationRequest>& rs,
                 Counts* counts, bool chained = false, bool spec = false,
                 LlamaModel* draft_model = nullptr) {
    CountingBackend backend(model_);
    backend.refuse_top_p = refuse_top_p;
    EngineOptions o;
    o.context_length = 256;
    o.backend_sampling = backend_sampling;
    if (chained) {  // planned ahead: a step's draws are built before its input tokens are known
      o.plan_ahead = EngineOptions::PlanAhead::kAlways;
      o.chain_steps = EngineOptions::ChainSteps::kAlways;
    }
    if (spec) {  // n-gram drafts of up to 4 tokens for every request
      o.spec.default_on = true;
      o.spec.max_tokens = 4;
      o.spec.draft_model = draft_model;
    }
    std::vector<Collected> out;
    {
      Engine engine(&backend, tokenizer_, o);
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const GenerationRequest& r : rs) {
        auto s = engine.Submit(r);
        EXPECT_TRUE(s.ok()) << s.status().ToString();
        if (s.ok()) streams.push_back(*s);
      }
      for (auto& s : streams) out.push_back(Drain(*s));
      last_stats = engine.Stats();
    }
    *counts = {backend.sample_steps, backend.sample_rows, backend.logits_steps, backend.mixed_steps,
               backend.mixed_host_rows, backend.drafted_rows};
    return out;
  };
  GenerationRequest greedy = Greedy("What is the capital of France?", 12);
  greedy.ignore_eos = true;  // exactly 12 tokens
  GenerationRequest hot = greedy;  // a full-vocabulary draw
  hot.sampling.temperature = 1.3f;
  hot.sampling.seed = 3;
  GenerationRequest truncated = greedy;  // llama.cpp's defaults
  truncated.sampling.temperature = 0.8f;
  truncated.sampling.top_k = 40;
  truncated.sampling.top_p = 0.95f;
  truncated.sampling.min_p = 0.05f;
  truncated.sampling.seed = 11;
  GenerationRequest one_left = greedy;  // top-k 1: one survivor, its index counted all the same
  one_left.sampling.temperature = 1.0f;
  one_left.sampling.top_k = 1;
  one_left.sampling.seed = 5;

  for (const GenerationRequest* r : {&greedy, &hot, &truncated, &one_left}) {
    Counts on_n, off_n;
    const std::vector<Collected> on = run(true, false, {*r}, &on_n);
    const std::vector<Collected> off = run(false, false, {*r}, &off_n);
    ASSERT_EQ(on.size(), 1u);
    ASSERT_EQ(off.size(), 1u);
    EXPECT_EQ(on_n.sample_steps, 12);  // the prompt's step draws the first token; 11 decodes
    EXPECT_EQ(on_n.logits_steps, 12);  // the default ForwardBatchSample runs ForwardBatch
    EXPECT_EQ(off_n.sample_steps, 0);
    EXPECT_EQ(on[0].tokens, off[0].tokens) << "temperature " << r->sampling.temperature;
    EXPECT_EQ(on[0].text, off[0].text);
    ASSERT_EQ(on[0].tokens.size(), 12u);
  }
  // Mixed settings in one step: each row gets its own sequence's draw.
  {
    Counts on_n, off_n;
    const std::vector<Collected> on = run(true, false, {greedy, hot, truncated}, &on_n);
    const std::vector<Collected> off = run(false, false, {greedy, hot, truncated}, &off_n);
    ASSERT_EQ(on.size(), 3u);
    ASSERT_EQ(off.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i;
    EXPECT_EQ(on_n.sample_rows, 36);
    EXPECT_LT(on_n.sample_steps, 36);  // batched
  }
  // A logit bias and penalties go with the draw (DrawParams::adjust): the backend applies them,
  // with its rows' input tokens, and the tokens are the host's, also when a step's draws are
  // built before its input tokens are known (planned ahead and chained).
  GenerationRequest penalized = hot;
  penalized.sampling.repetition_penalty = 1.3f;
  GenerationRequest biased = truncated;
  biased.sampling.frequency_penalty = 0.5f;
  biased.sampling.logit_bias = {{11, 2.0f}};
  GenerationRequest repeats = greedy;  // greedy, each token pushed down once it has been seen
  repeats.sampling.presence_penalty = 2.0f;
  repeats.sampling.frequency_penalty = 2.0f;
  repeats.sampling.penalty_last_n = 8;
  GenerationRequest whole = greedy;  // the whole history, the prompt's tokens with it
  whole.sampling.repetition_penalty = 1.5f;
  whole.sampling.penalty_last_n = -1;
  whole.sampling.logit_bias = {{2, -1.0f}, {11, 3.0f}};
  // Logprobs come back with the token (DrawParams::logprobs_out): the same tokens, logprobs,
  // ranks and alternatives as the host's, of the row after its bias and penalties.
  GenerationRequest with_logprobs = greedy;
  with_logprobs.sampling.logprobs = 2;
  GenerationRequest penalized_lps = penalized;  // drawn, penalized, the top 20
  penalized_lps.sampling.logprobs = 20;
  GenerationRequest chosen_only = truncated;  // logprobs 0: the drawn token's alone
  chosen_only.sampling.logprobs = 0;
  // min_tokens bans the end tokens with the draw, up to the token the host stops at: greedy wants
  // an end token (2) as its 8th token, so 7 lets it through where 8 does not.
  GenerationRequest held = greedy;
  held.min_tokens = 12;
  GenerationRequest held7 = greedy, held8 = greedy;
  held7.min_tokens = 7;
  held8.min_tokens = 8;
  {
    Counts plain_n;
    const std::vector<Collected> plain = run(false, false, {greedy}, &plain_n);
    ASSERT_EQ(plain[0].tokens.size(), 12u);
    ASSERT_EQ(plain[0].tokens[7], 2);  // (the premise of held7 and held8)
    for (const GenerationRequest* r : {&penalized, &biased, &repeats, &whole, &with_logprobs,
                                       &penalized_lps, &chosen_only, &held, &held7, &held8}) {
      for (bool chained : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "chained " << chained << " logprobs "
                                          << r->sampling.logprobs);
        Counts on_n, off_n;
        const std::vector<Collected> on = run(true, false, {*r}, &on_n, chained);
        const std::vector<Collected> off = run(false, false, {*r}, &off_n, chained);
        ASSERT_EQ(on.size(), 1u);
        ASSERT_EQ(off.size(), 1u);
        EXPECT_EQ(on_n.sample_steps, 12);
        EXPECT_EQ(on_n.mixed_steps, 0);
        EXPECT_EQ(off_n.sample_steps, 0);
        EXPECT_EQ(on[0].tokens, off[0].tokens);
        ASSERT_EQ(on[0].tokens.size(), 12u);
        if (r == &repeats || r == &whole || r == &held || r == &held8) {
          EXPECT_NE(on[0].tokens, plain[0].tokens);  // the adjustments change the greedy text
        }
        if (r == &held7) {
          EXPECT_EQ(on[0].tokens, plain[0].tokens);
        }
        if (r->sampling.logprobs < 0) continue;
        ASSERT_EQ(on[0].logprobs.size(), 12u);
        ASSERT_EQ(off[0].logprobs.size(), 12u);
        for (size_t k = 0; k < 12; ++k) {
          const TokenLogprob& a = on[0].logprobs[k];
          const TokenLogprob& b = off[0].logprobs[k];
          EXPECT_EQ(a.token, on[0].tokens[k]);
          EXPECT_EQ(a.token, b.token);
          EXPECT_EQ(a.text, b.text);
          EXPECT_EQ(a.logprob, b.logprob) << "token " << k;
          EXPECT_LE(a.logprob, 0.0f);
          EXPECT_EQ(a.rank, b.rank);
          ASSERT_EQ(a.top.size(), static_cast<size_t>(r->sampling.logprobs));
          ASSERT_EQ(b.top.size(), a.top.size());
          for (size_t j = 0; j < a.top.size(); ++j) {
            EXPECT_EQ(a.top[j].token, b.top[j].token);
            EXPECT_EQ(a.top[j].text, b.top[j].text);
            EXPECT_EQ(a.top[j].logprob, b.top[j].logprob);
          }
        }
      }
    }
  }
  // A prompt-lookup draft is verified by the backend: a row per position, each drawn as without
  // a draft (its output index's noise key), after the row's entries, with the draft before
  // it in the penalty window, and walked as the host walks them (draft tokens kept while they
  // are what was drawn). The same tokens and logprobs as the host's verification, and the same
  // tokens as without speculation.
  {
    GenerationRequest copy = Greedy(
        "Repeat this list exactly: apple, banana, cherry, date, elderberry, fig, grape.", 24);
    copy.ignore_eos = true;
    GenerationRequest copy_adjusted = copy;  // penalties, a bias, logprobs and min_tokens
    copy_adjusted.sampling.frequency_penalty = 0.1f;  // (mild: the copy still drafts)
    copy_adjusted.sampling.repetition_penalty = 1.02f;
    copy_adjusted.sampling.penalty_last_n = 8;  // a window shorter than the history
    copy_adjusted.sampling.logit_bias = {{11, 1.5f}};
    copy_adjusted.sampling.logprobs = 3;
    copy_adjusted.min_tokens = 20;
    GenerationRequest copy_hot = copy;  // a sampled draft
    copy_hot.sampling.temperature = 0.7f;
    copy_hot.sampling.seed = 2;  // (one whose text copies the list: it drafts)
    GenerationRequest copy_hot_adjusted = copy_adjusted;  // sampled, truncated and adjusted
    copy_hot_adjusted.sampling.temperature = 0.6f;
    copy_hot_adjusted.sampling.top_k = 40;
    copy_hot_adjusted.sampling.top_p = 0.95f;
    copy_hot_adjusted.sampling.seed = 5;  // (one whose text copies the list: it drafts)
    for (const GenerationRequest* r : {&copy, &copy_adjusted, &copy_hot, &copy_hot_adjusted}) {
      SCOPED_TRACE(::testing::Message() << "temperature " << r->sampling.temperature
                                        << " logprobs " << r->sampling.logprobs);
      Counts on_n, off_n, plain_n;
      const std::vector<Collected> on = run(true, false, {*r}, &on_n, false, true);
      const std::vector<Collected> off = run(false, false, {*r}, &off_n, false, true);
      const std::vector<Collected> plain = run(true, false, {*r}, &plain_n);
      ASSERT_EQ(on.size(), 1u);
      ASSERT_EQ(off.size(), 1u);
      ASSERT_EQ(plain.size(), 1u);
      EXPECT_EQ(on[0].tokens, off[0].tokens);
      EXPECT_EQ(on[0].tokens, plain[0].tokens);
      EXPECT_EQ(on[0].text, off[0].text);
      EXPECT_EQ(on[0].tokens.size(), 24u);
      ASSERT_EQ(on[0].logprobs.size(), off[0].logprobs.size());
      for (size_t k = 0; k < on[0].logprobs.size(); ++k) {
        EXPECT_EQ(on[0].logprobs[k].token, off[0].logprobs[k].token);
        EXPECT_EQ(on[0].logprobs[k].logprob, off[0].logprobs[k].logprob) << "token " << k;
        EXPECT_EQ(on[0].logprobs[k].rank, off[0].logprobs[k].rank);
        ASSERT_EQ(on[0].logprobs[k].top.size(), 3u);
        EXPECT_EQ(on[0].logprobs[k].top[2].token, off[0].logprobs[k].top[2].token);
      }
      EXPECT_EQ(on_n.sample_steps, on_n.logits_steps);  // every step drawn by the backend
      EXPECT_GE(on_n.drafted_rows, 4);  // its drafts' rows among them (two drafts at least)
    }
    // A draft model's sampled draft is verified the same way, on the backend too.
    Counts on_n, off_n;
    const std::vector<Collected> on = run(true, false, {copy_hot}, &on_n, false, true, model_);
    const std::vector<Collected> off = run(false, false, {copy_hot}, &off_n, false, true, model_);
    EXPECT_EQ(on[0].tokens, off[0].tokens);
    EXPECT_EQ(on[0].tokens.size(), 24u);
    EXPECT_EQ(on_n.sample_steps, on_n.logits_steps);
    EXPECT_GE(on_n.drafted_rows, 4);
  }
  // A constraint's mask goes with the draw (DrawParams::mask; TokenConstraint::AppendAllowed):
  // JSON mode and a schema's grammar, greedy and sampled, alone and beside the others, step by
  // step and planned ahead, get the host's tokens. Planned ahead, a constrained row's input is
  // still being drawn: the step ahead is prepared all the same, its mask added once the token is
  // back (Engine::FinishLateMasks), and it is launched then, not chained.
  GenerationRequest json = greedy;
  json.json_object = true;
  // (ignore_eos, a 400 with JSON mode at the API, keeps it going to 12 tokens here)
  GenerationRequest schema = truncated;
  auto grammar = JsonSchemaGrammar(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"city": {"type": "string"}, "people": {"type": "integer"}},
          "required": ["city", "people"]})"));
  ASSERT_TRUE(grammar.ok()) << grammar.status().ToString();
  schema.grammar = *grammar;
  GenerationRequest json_hot = hot;
  json_hot.json_object = true;
  json_hot.sampling.logprobs = 2;
  json_hot.sampling.seed = 2;  // (one whose object starts within the 12 tokens)
  {
    Counts plain_n;
    const std::vector<Collected> plain = run(false, false, {greedy}, &plain_n);
    for (const GenerationRequest* r : {&json, &schema, &json_hot}) {
      for (bool chained : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "chained " << chained << " temperature "
                                          << r->sampling.temperature);
        Counts on_n, off_n;
        const std::vector<Collected> on = run(true, false, {*r}, &on_n, chained);
        const EngineStats on_stats = last_stats;
        const std::vector<Collected> off = run(false, false, {*r}, &off_n, chained);
        if (chained) {  // all but the prompt's step planned ahead; none chained
          EXPECT_EQ(on_stats.steps_planned_ahead, 11);
          EXPECT_EQ(on_stats.steps_chained, 0);
        }
        EXPECT_EQ(on_n.sample_steps, 12);  // every step drawn by the backend, with the mask
        EXPECT_EQ(on_n.mixed_steps, 0);
        EXPECT_EQ(on[0].tokens, off[0].tokens);
        EXPECT_EQ(on[0].text, off[0].text);
        ASSERT_EQ(on[0].tokens.size(), 12u);
        const size_t first = on[0].text.find_first_not_of(" \t\r\n");
        ASSERT_NE(first, std::string::npos) << on[0].text;
        EXPECT_EQ(on[0].text[first], '{') << on[0].text;  // the constraint held
        if (r == &json) {
          EXPECT_NE(on[0].tokens, plain[0].tokens);
        }
        ASSERT_EQ(on[0].logprobs.size(), off[0].logprobs.size());
        for (size_t k = 0; k < on[0].logprobs.size(); ++k) {
          EXPECT_EQ(on[0].logprobs[k].logprob, off[0].logprobs[k].logprob);  // of the masked row
        }
      }
    }
  }
  // Runs `rs` together with the backend's sampling (refusing top-p or not) and without, checks
  // that each request gets the same 12 tokens and text both ways, and returns both runs.
  auto both_ways = [&](const std::vector<GenerationRequest>& rs, bool refuse_top_p, Counts* on_n,
                       Counts* off_n) {
    std::pair<std::vector<Collected>, std::vector<Collected>> out = {
        run(true, refuse_top_p, rs, on_n), run(false, false, rs, off_n)};
    const auto& [on, off] = out;
    EXPECT_EQ(on.size(), rs.size());
    EXPECT_EQ(off.size(), rs.size());
    for (size_t i = 0; i < std::min(on.size(), off.size()); ++i) {
      EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i;
      EXPECT_EQ(on[i].text, off[i].text) << "request " << i;
      EXPECT_EQ(on[i].tokens.size(), 12u) << "request " << i;
    }
    return out;
  };
  // Beside the others: every row drawn by the backend, each with its own settings and mask,
  // step by step and planned ahead (the constrained rows' masks added once their inputs are
  // back).
  {
    Counts on_n, off_n;
    const std::vector<GenerationRequest> rs = {greedy, penalized, truncated, json,
                                               biased, with_logprobs, held8, schema};
    const auto [on, off] = both_ways(rs, false, &on_n, &off_n);
    EXPECT_EQ(on_n.mixed_steps, 0);
    EXPECT_EQ(on_n.sample_steps, on_n.logits_steps);
    Counts ahead_n;
    const std::vector<Collected> ahead = run(true, false, rs, &ahead_n, true);
    ASSERT_EQ(ahead.size(), rs.size());
    for (size_t i = 0; i < rs.size() && i < off.size(); ++i) {
      EXPECT_EQ(ahead[i].tokens, off[i].tokens) << "request " << i;
      EXPECT_EQ(ahead[i].text, off[i].text) << "request " << i;
    }
    EXPECT_EQ(ahead_n.mixed_steps, 0);
    EXPECT_GE(last_stats.steps_planned_ahead, 10) << "of " << last_stats.steps;
  }
  // What the backend refuses (here top-p) makes a step mixed: the backend draws the others'
  // rows, only that row comes back as logits, and every request gets the tokens it gets all on
  // the host.
  {
    GenerationRequest nucleus = hot;  // refused (top-p)
    nucleus.sampling.top_p = 0.9f;
    Counts on_n, off_n;
    const auto [on, off] =
        both_ways({greedy, penalized, json, with_logprobs, held8, nucleus}, true, &on_n, &off_n);
    ASSERT_EQ(on.size(), 6u);
    ASSERT_EQ(off.size(), 6u);
    EXPECT_GE(on_n.mixed_steps, 6) << "of " << on_n.logits_steps;  // (arrivals may split a few)
    EXPECT_EQ(on_n.mixed_host_rows, on_n.mixed_steps);              // nucleus's row
    ASSERT_EQ(on[3].logprobs.size(), 12u);  // with_logprobs, drawn in the mixed steps
    for (size_t k = 0; k < 12; ++k) {
      EXPECT_EQ(on[3].logprobs[k].logprob, off[3].logprobs[k].logprob);
      EXPECT_EQ(on[3].logprobs[k].rank, off[3].logprobs[k].rank);
    }
    EXPECT_EQ(off_n.mixed_steps, 0);
  }
  Counts refused_n, off_n;
  const std::vector<Collected> refused = run(true, true, {greedy, truncated}, &refused_n);
  const std::vector<Collected> off = run(false, false, {greedy, truncated}, &off_n);
  ASSERT_EQ(refused.size(), 2u);
  ASSERT_EQ(off.size(), 2u);
  EXPECT_EQ(refused[1].tokens, off[1].tokens);
  EXPECT_EQ(refused[0].tokens, off[0].tokens);
  EXPECT_LT(refused_n.sample_steps, 12);  // only steps without the top-p request
}

TEST_F(EngineTest, AFailedStepEndsItsRequestsWithTheErrorAndTheEngineGoesOn) {
  for (int mode = 0; mode < 4; ++mode) {
    const bool backend_sampling = mode != 1;
    CountingBackend backend(model_);
    backend.fail_from = 3;  // the prompt's step and two decodes, then the device is gone
    EngineOptions o;
    o.context_length = 256;
    o.backend_sampling = backend_sampling;
    o.plan_ahead = mode >= 2 ? EngineOptions::PlanAhead::kAlways : EngineOptions::PlanAhead::kOff;
    o.chain_steps = mode == 3 ? EngineOptions::ChainSteps::kAlways : EngineOptions::ChainSteps::kOff;
    Engine engine(&backend, tokenizer_, o);
    GenerationRequest r = Greedy("What is the capital of France?", 12);
    r.ignore_eos = true;
    GenerationRequest sampled = r;
    sampled.sampling.temperature = 0.9f;
    sampled.sampling.seed = 4;
    auto a = engine.Submit(r);
    ASSERT_TRUE(a.ok());
    const Collected ca = Drain(**a);
    EXPECT_EQ(ca.finish, FinishReason::kError) << "mode " << mode;
    EXPECT_NE(ca.last.error.message().find("fell off the bus"), std::string::npos)
        << ca.last.error.ToString();
    EXPECT_EQ(ca.tokens.size(), 3u);  // what the steps before the failure produced
    backend.fail_from = 1 << 30;      // the device is back: the engine still serves
    for (const GenerationRequest* req : {&r, &sampled}) {
      auto b = engine.Submit(*req);
      ASSERT_TRUE(b.ok());
      const Collected cb = Drain(**b);
      EXPECT_EQ(cb.finish, FinishReason::kLength);
      EXPECT_EQ(cb.tokens.size(), 12u);
    }
  }
}

// A step result the scheduler refuses (it disagrees with the plan: a bug's symptom) ends the
// step's requests with the error, with a step planned ahead already launched too (plan ahead and
// chained steps), and the engine goes on serving. Before, the loop swapped in the launched step
// and planned on from the failed plans: an assert, or a null dereference.
TEST_F(EngineTest, AStepResultTheSchedulerRefusesEndsItsRequestsAndTheEngineGoesOn) {
  for (int mode = 0; mode < 3; ++mode) {
    auto steps = std::make_shared<std::atomic<int>>(0);
    auto corrupt = std::make_shared<std::atomic<bool>>(true);
    EngineOptions o;
    o.context_length = 256;
    o.plan_ahead = mode >= 1 ? EngineOptions::PlanAhead::kAlways : EngineOptions::PlanAhead::kOff;
    o.chain_steps = mode == 2 ? EngineOptions::ChainSteps::kAlways : EngineOptions::ChainSteps::kOff;
    o.before_step_done_for_tests = [steps, corrupt](StepResult* r) {
      if (++*steps == 3 && *corrupt && !r->sampled.empty()) r->sampled[0].id += 1000;
    };
    Engine engine(model_, tokenizer_, o);
    GenerationRequest r = Greedy("What is the capital of France?", 12);
    r.ignore_eos = true;
    auto a = engine.Submit(r);
    ASSERT_TRUE(a.ok());
    const Collected ca = Drain(**a);
    EXPECT_EQ(ca.finish, FinishReason::kError) << "mode " << mode;
    EXPECT_FALSE(ca.last.error.ok()) << "mode " << mode;
    *corrupt = false;
    auto b = engine.Submit(r);
    ASSERT_TRUE(b.ok());
    const Collected cb = Drain(**b);
    EXPECT_EQ(cb.finish, FinishReason::kLength) << "mode " << mode;
    EXPECT_EQ(cb.tokens.size(), 12u) << "mode " << mode;
  }
}

// A step that fails on a device that failed for good (DeviceHealth: a sticky CUDA error): the
// engine refuses every later request with the reason and asks for a restart (needs_restart: the
// runtime's /health fails), where before it went on failing each step while reporting healthy.
TEST_F(EngineTest, ADeviceThatFailedForGoodMakesTheEngineRefuseAndAskForARestart) {
  class Lost final : public WrappedCpu {
   public:
    using WrappedCpu::WrappedCpu;
    Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override {
      if (++calls > 2) return Internal("an illegal memory access was encountered");
      return cpu_->ForwardBatch(seqs, logits);
    }
    Status DeviceHealth() override {
      return calls > 2 ? Internal("the CUDA device failed (Xid 79)") : Status::Ok();
    }
    std::atomic<int> calls{0};
  };
  Lost backend(model_);
  EngineOptions o;
  o.context_length = 256;
  o.backend_sampling = false;
  Engine engine(&backend, tokenizer_, o);
  GenerationRequest r = Greedy("What is the capital of France?", 12);
  r.ignore_eos = true;
  auto a = engine.Submit(r);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(Drain(**a).finish, FinishReason::kError);
  EXPECT_TRUE(engine.needs_restart());
  EXPECT_NE(engine.health().message().find("Xid 79"), std::string::npos) << engine.health().ToString();
  auto b = engine.Submit(r);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInternal);
  EXPECT_NE(b.status().message().find("Xid 79"), std::string::npos);
  // A step's own failure on a healthy device (the engine goes on: its own test above) does not.
  CountingBackend fine(model_);
  fine.fail_from = 2;
  Engine other(&fine, tokenizer_, o);
  auto c = other.Submit(r);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(Drain(**c).finish, FinishReason::kError);
  EXPECT_FALSE(other.needs_restart());
  EXPECT_TRUE(other.health().ok());
}

// A backend whose KV cache cannot be allocated (a --kv-cache-fraction past the free memory).
class NoRoomForKv final : public WrappedCpu {
 public:
  using WrappedCpu::WrappedCpu;
  Status InitKvCache(int, int) override { return ResourceExhausted("no room for the KV cache"); }
};

// A KV cache that cannot be allocated (a --kv-cache-fraction past the device's free memory):
// the engine says so (health()), every request ends or is refused with that reason as INTERNAL (a
// 500, not a retryable 503), and the refusals do not fill the waiting-token count until the
// reason turns into "too many waiting prompt tokens".
TEST_F(EngineTest, AKvCacheThatCannotBeAllocatedFailsEveryRequestWithTheReason) {
  NoRoomForKv backend(model_);
  EngineOptions o;
  o.context_length = 256;
  o.max_waiting_prompt_tokens = 64;
  Engine engine(&backend, tokenizer_, o);
  for (int i = 0; i < 10; ++i) {
    auto s = engine.Submit(Greedy("Hi", 4));
    Status error = s.ok() ? Drain(**s).last.error : s.status();
    EXPECT_EQ(error.code(), StatusCode::kInternal) << i << ": " << error.ToString();
    EXPECT_NE(error.message().find("no room for the KV cache"), std::string::npos)
        << i << ": " << error.ToString();
  }
  EXPECT_EQ(engine.health().code(), StatusCode::kInternal);
  EXPECT_NE(engine.health().message().find("no room"), std::string::npos);
  Engine fine(model_, tokenizer_, o);
  EXPECT_TRUE(fine.health().ok());
}

// WaitStarted (what kinfer-runtime waits on before it says "ready") returns once the engine
// thread has its KV cache: the reason when it cannot, OK when it can, every time it is asked.
TEST_F(EngineTest, WaitStartedReturnsWhetherTheKvCacheCouldBeSetUp) {
  NoRoomForKv backend(model_);
  EngineOptions o;
  o.context_length = 256;
  Engine broken(&backend, tokenizer_, o);
  for (int i = 0; i < 2; ++i) {
    Status st = broken.WaitStarted();
    EXPECT_EQ(st.code(), StatusCode::kInternal) << st.ToString();
    EXPECT_NE(st.message().find("no room for the KV cache"), std::string::npos) << st.ToString();
  }
  Engine fine(model_, tokenizer_, o);
  EXPECT_TRUE(fine.WaitStarted().ok());
  EXPECT_TRUE(fine.WaitStarted().ok());
  auto s = fine.Submit(Greedy("Hi", 2));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Drain(**s).finish, FinishReason::kLength);
}

// Whether a step's events are pushed by the engine's EventPump (the default) or by the engine
// thread itself, every stream gets the same events: same tokens, text, finish and counts.
TEST_F(EngineTest, StreamingOnThePumpOrInlineGivesTheSameEvents) {
  const auto [greedy, stopped, sampled] = Three();
  std::vector<Collected> runs[2];
  for (int pump = 0; pump < 2; ++pump) {
    EngineOptions o;
    o.context_length = 256;
    o.overlap_streaming = pump == 1;
    Engine engine(model_, tokenizer_, o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest* r : {&greedy, &stopped, &sampled}) {
      auto s = engine.Submit(*r);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    for (auto& s : streams) runs[pump].push_back(Drain(*s));
  }
  ASSERT_EQ(runs[0].size(), 3u);
  ExpectSameEvents(runs[0], runs[1]);
  EXPECT_EQ(runs[1][1].finish, FinishReason::kStop) << runs[1][1].text;  // the stop string
  EXPECT_EQ(runs[1][1].text.find('5'), std::string::npos) << runs[1][1].text;
  EXPECT_EQ(runs[1][2].tokens.size(), 24u);
}

// Planning each step while the one before is computed (EngineOptions::plan_ahead), and launching
// it before the one before has returned its tokens (chain_steps: the backend puts each decode's
// token in from the earlier step's draws), give every request the events it gets step by step:
// a stop string that ends a request a step late (its row ahead is thrown away), max_tokens, a
// seeded draw, requests that arrive while others decode, a request sampled on the host
// (logprobs: those steps are not planned ahead) and a cancellation.
TEST_F(EngineTest, PlanningAheadGivesTheSameEventsAsStepByStep) {
  const auto [greedy, stopped, sampled] = Three();
  GenerationRequest shortest = Greedy("Name a colour.", 2);
  GenerationRequest eos = Greedy("Say yes.", 40);  // ends on the end-of-turn token
  GenerationRequest with_lp = Greedy("Name three fruits.", 6);
  with_lp.sampling.logprobs = 2;
  GenerationRequest cancelled = Greedy("Write a very long essay about the sea.", 200);
  cancelled.ignore_eos = true;
  const std::vector<const GenerationRequest*> first = {&greedy, &stopped, &sampled};
  const std::vector<const GenerationRequest*> later = {&shortest, &eos};
  std::vector<Collected> runs[3];
  EngineStats stats[3];
  for (int ahead = 0; ahead < 3; ++ahead) {  // step by step, planned ahead, chained
    EngineOptions o;
    o.context_length = 256;
    o.plan_ahead = ahead >= 1 ? EngineOptions::PlanAhead::kAlways : EngineOptions::PlanAhead::kOff;
    o.chain_steps = ahead == 2 ? EngineOptions::ChainSteps::kAlways : EngineOptions::ChainSteps::kOff;
    Engine engine(model_, tokenizer_, o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest* r : first) {
      auto s = engine.Submit(*r);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    StreamEvent ev;
    ASSERT_TRUE(streams[0]->Next(&ev, milliseconds(60000)));  // decoding now
    Collected head;
    head.text = ev.text;
    head.tokens = ev.tokens;
    for (const GenerationRequest* r : later) {
      auto s = engine.Submit(*r);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      Collected c = Drain(*streams[i]);
      if (i == 0) {
        c.text = head.text + c.text;
        c.tokens.insert(c.tokens.begin(), head.tokens.begin(), head.tokens.end());
      }
      runs[ahead].push_back(c);
    }
    const GenerationRequest* together[] = {&with_lp, &greedy};
    for (const GenerationRequest* r : together) {
      auto s = engine.Submit(*r);
      ASSERT_TRUE(s.ok());
      streams.push_back(*s);
    }
    runs[ahead].push_back(Drain(*streams[streams.size() - 2]));
    runs[ahead].push_back(Drain(*streams.back()));
    auto c = engine.Submit(cancelled);
    ASSERT_TRUE(c.ok());
    for (int i = 0; i < 4; ++i) ASSERT_TRUE((*c)->Next(&ev, milliseconds(60000)));
    (*c)->Cancel();
    const Collected cc = Drain(**c);
    EXPECT_EQ(cc.finish, FinishReason::kCancelled);
    EXPECT_LT(cc.last.completion_tokens, 200);
    stats[ahead] = engine.Stats();
  }
  ASSERT_EQ(runs[0].size(), 7u);
  for (int m = 1; m < 3; ++m) {
    SCOPED_TRACE(m == 1 ? "planned ahead" : "chained");
    ExpectSameEvents(runs[0], runs[m]);
    EXPECT_EQ(runs[m][1].finish, FinishReason::kStop) << runs[m][1].text;  // a step late
    EXPECT_EQ(runs[m][1].text.find('5'), std::string::npos) << runs[m][1].text;
    EXPECT_EQ(runs[m][2].tokens.size(), 24u);
    EXPECT_EQ(runs[m][3].finish, FinishReason::kLength);
    EXPECT_EQ(runs[m][4].finish, FinishReason::kStop) << runs[m][4].text;
    EXPECT_GT(stats[m].steps_planned_ahead, stats[m].steps / 2)
        << stats[m].steps_planned_ahead << " of " << stats[m].steps;
  }
  EXPECT_EQ(stats[0].steps_planned_ahead, 0);
  EXPECT_EQ(stats[1].steps_chained, 0);
  // Chained: every step planned ahead that the backend draws (all but the logprobs request's).
  EXPECT_GT(stats[2].steps_chained, stats[2].steps / 2)
      << stats[2].steps_chained << " of " << stats[2].steps;
  // Thrown-away rows aside, the steps are the same ones.
  EXPECT_GT(stats[0].steps, 0);
}

// EngineOptions::stream_interval: a request's first token goes out alone, then its events carry
// at least N tokens each, the final one whatever was held; the text, tokens, logprobs and counts
// are those of an event a step. A cancelled request loses none of the tokens it was holding.
TEST_F(EngineTest, AStreamIntervalMergesEventsWithoutChangingTheOutput) {
  const auto [greedy, stopped, sampled] = Three();
  GenerationRequest with_lp = Greedy("Name three fruits.", 7);
  with_lp.sampling.logprobs = 2;
  with_lp.ignore_eos = true;
  with_lp.prompt_logprobs = 1;
  GenerationRequest cancelled = Greedy("Write a very long essay about the sea.", 200);
  cancelled.ignore_eos = true;
  struct Events {
    Collected all;
    std::vector<size_t> tokens;    // per event
    std::vector<size_t> logprobs;  // per event
    size_t prompt_logprobs = 0;
    double queue_seconds = -1;
  };
  auto drain = [](RequestStream& s, int stop_after = 0) {
    Events e;
    StreamEvent ev;
    while (s.Next(&ev, milliseconds(60000))) {
      e.all.text += ev.text;
      e.all.tokens.insert(e.all.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      e.tokens.push_back(ev.tokens.size());
      e.logprobs.push_back(ev.logprobs.size());
      e.prompt_logprobs += ev.prompt_logprobs.size();
      if (e.tokens.size() == 1) e.queue_seconds = ev.queue_seconds;
      if (static_cast<int>(e.tokens.size()) == stop_after) s.Cancel();
      if (ev.finish != FinishReason::kNone) {
        e.all.finish = ev.finish;
        e.all.last = ev;
        break;
      }
    }
    return e;
  };
  std::vector<Events> runs[2];
  for (int held = 0; held < 2; ++held) {
    EngineOptions o;
    o.context_length = 256;
    o.stream_interval = held == 1 ? 4 : 1;
    Engine engine(model_, tokenizer_, o);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerationRequest* r :
         std::vector<const GenerationRequest*>{&greedy, &stopped, &sampled, &with_lp}) {
      auto s = engine.Submit(*r);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      streams.push_back(*s);
    }
    for (auto& s : streams) runs[held].push_back(drain(*s));
    auto c = engine.Submit(cancelled);
    ASSERT_TRUE(c.ok());
    runs[held].push_back(drain(**c, /*stop_after=*/3));
  }
  std::vector<Collected> plain, merged;
  for (int i = 0; i < 4; ++i) {
    plain.push_back(runs[0][i].all);
    merged.push_back(runs[1][i].all);
  }
  ExpectSameEvents(plain, merged);
  for (int held = 0; held < 2; ++held) {
    for (size_t i = 0; i < runs[held].size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "interval " << (held ? 4 : 1) << ", request " << i);
      const Events& e = runs[held][i];
      ASSERT_GE(e.tokens.size(), 2u);
      EXPECT_EQ(e.tokens.front(), 1u);  // the first token at once
      EXPECT_GE(e.queue_seconds, 0.0);
      const size_t want = held ? 4 : 1;
      for (size_t k = 1; k + 1 < e.tokens.size(); ++k) EXPECT_EQ(e.tokens[k], want) << k;
      EXPECT_LE(e.tokens.back(), want);
      EXPECT_EQ(e.all.tokens.size(), static_cast<size_t>(e.all.last.completion_tokens));
    }
  }
  // 24 tokens: 1, then five events of 4, then the last 3 with the end.
  EXPECT_EQ(runs[1][2].tokens.size(), 7u);
  EXPECT_EQ(runs[0][2].tokens.size(), 24u);
  // Logprobs ride with their tokens; the prompt's come once.
  for (int held = 0; held < 2; ++held) {
    const Events& lp = runs[held][3];
    EXPECT_EQ(lp.logprobs, lp.tokens);
    EXPECT_EQ(lp.prompt_logprobs, with_lp.prompt_tokens.size() - 1);
    EXPECT_EQ(lp.all.tokens.size(), 7u);
  }
  // Cancelled after its third event: it ends cancelled, every token it made delivered.
  for (int held = 0; held < 2; ++held) {
    const Events& c = runs[held][4];
    EXPECT_EQ(c.all.finish, FinishReason::kCancelled);
    EXPECT_LT(c.all.last.completion_tokens, 200);
    EXPECT_GE(c.all.tokens.size(), held ? 9u : 3u);
  }
}

// Holds its `gate`-th LaunchSample until Open(): the test then knows which step is in flight
// when it submits.
class GatedBackend final : public WrappedCpu {
 public:
  using WrappedCpu::WrappedCpu;
  Status LaunchSample(std::span<const SequenceBatch> seqs,
                      std::span<const DrawParams> rows) override {
    if (++launches_ == gate) {
      std::unique_lock<std::mutex> l(mu_);
      reached_ = true;
      cv_.notify_all();
      cv_.wait(l, [&] { return open_; });
    }
    return ModelBackend::LaunchSample(seqs, rows);
  }
  bool WaitReached() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(60), [&] { return reached_; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  int gate = 0;

 private:
  std::atomic<int> launches_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool reached_ = false, open_ = false;
};

// A request sampled on the host (logprobs) arrives while a plain one is decoding, so the step
// planned ahead with both is computed only after the step in flight is emitted, and that step
// ends the plain one (a stop token, a step late): the step ahead is computed without it, and
// both requests get what they get alone.
TEST_F(EngineTest, AHostSampledStepPlannedAheadLeavesOutALateStop) {
  GenerationRequest plain = Greedy("Count from 1 to 10, separated by commas.", 16);
  plain.ignore_eos = true;
  GenerationRequest with_lp = Greedy("Name three fruits.", 4);
  with_lp.sampling.logprobs = 1;
  auto alone = [&](const GenerationRequest& r) {
    auto s = engine_->Submit(r);
    EXPECT_TRUE(s.ok());
    return Drain(**s);
  };
  const Collected ref = alone(plain);
  const Collected ref_lp = alone(with_lp);
  ASSERT_EQ(ref.tokens.size(), 16u);
  size_t k = 3;  // the first token from the fourth on that did not come before
  while (k < ref.tokens.size() && std::find(ref.tokens.begin(), ref.tokens.begin() + k,
                                            ref.tokens[k]) != ref.tokens.begin() + k) {
    ++k;
  }
  ASSERT_LT(k, ref.tokens.size());
  GenerationRequest stopping = plain;
  stopping.stop_tokens = {ref.tokens[k]};

  GatedBackend backend(model_);
  backend.gate = static_cast<int>(k) + 1;  // the step that draws token k
  EngineOptions o;
  o.context_length = 256;
  o.plan_ahead = EngineOptions::PlanAhead::kAlways;
  Engine engine(&backend, tokenizer_, o);
  auto a = engine.Submit(stopping);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(backend.WaitReached());
  auto b = engine.Submit(with_lp);  // planned ahead with it, while that step is computed
  ASSERT_TRUE(b.ok());
  backend.Open();
  const Collected ca = Drain(**a);
  const Collected cb = Drain(**b);
  EXPECT_EQ(ca.finish, FinishReason::kStop);
  EXPECT_EQ(ca.tokens, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + k + 1));
  EXPECT_EQ(cb.tokens, ref_lp.tokens);
  EXPECT_EQ(cb.text, ref_lp.text);
  EXPECT_EQ(cb.finish, ref_lp.finish);
  EXPECT_GT(engine.Stats().steps_planned_ahead, 0);
}

TEST_F(EngineTest, MaxTokensEndsWithLength) {
  GenerationRequest r = Greedy("Write a long story about a dragon.", 5);
  auto s = engine_->Submit(r);
  ASSERT_TRUE(s.ok());
  Collected c = Drain(**s);
  EXPECT_EQ(c.finish, FinishReason::kLength);
  EXPECT_EQ(c.tokens.size(), 5u);
  EXPECT_EQ(c.last.completion_tokens, 5);
}

TEST_F(EngineTest, GreedyAndSeededSamplingAreDeterministic) {
  auto a = engine_->Submit(Greedy("Name three colors.", 16));
  ASSERT_TRUE(a.ok());
  Collected first = Drain(**a);
  auto b = engine_->Submit(Greedy("Name three colors.", 16));
  ASSERT_TRUE(b.ok());
  Collected second = Drain(**b);
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_EQ(first.text, second.text);
  // Seeded sampling at temperature 1: same seed, same tokens, whatever ran before.
  auto seeded = [&](uint64_t seed) {
    GenerationRequest r = Greedy("Name three colors.", 16);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    auto s = engine_->Submit(r);
    EXPECT_TRUE(s.ok());
    return Drain(**s).tokens;
  };
  const auto s1 = seeded(42);
  const auto other = seeded(7);
  const auto s2 = seeded(42);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1, other);
}

TEST_F(EngineTest, StopStringEndsGenerationAndIsNotReturned) {
  auto base = engine_->Submit(Greedy("Count from 1 to 10, separated by commas.", 40));
  ASSERT_TRUE(base.ok());
  Collected full = Drain(**base);
  ASSERT_GE(full.text.size(), 4u) << full.text;
  // Stop on a piece of text that the greedy answer contains.
  const std::string stop = full.text.substr(full.text.size() / 2, 2);
  GenerationRequest r = Greedy("Count from 1 to 10, separated by commas.", 40);
  r.stop = {stop};
  auto s = engine_->Submit(r);
  ASSERT_TRUE(s.ok());
  Collected c = Drain(**s);
  EXPECT_EQ(c.finish, FinishReason::kStop);
  EXPECT_EQ(c.text, full.text.substr(0, full.text.find(stop)));
}

TEST_F(EngineTest, CancelStopsAStreamingRequest) {
  GenerationRequest r = Greedy("Write a very long essay about the sea.", 200);
  r.ignore_eos = true;
  auto s = engine_->Submit(r);
  ASSERT_TRUE(s.ok());
  StreamEvent ev;
  ASSERT_TRUE((*s)->Next(&ev, milliseconds(60000)));
  (*s)->Cancel();
  Collected c = Drain(**s);
  EXPECT_EQ(c.finish, FinishReason::kCancelled);
  EXPECT_LT(c.last.completion_tokens, 200);
  // The engine is free for the next request at once.
  auto next = engine_->Submit(Greedy("Hi", 2));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(Drain(**next).tokens.size(), 2u);
}

TEST_F(EngineTest, RejectsRequestsThatCannotFitOrAreMalformed) {
  GenerationRequest r = Greedy("Hello", 10);
  r.max_tokens = 1000;  // context is 256
  auto s = engine_->Submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.status().message().find("256"), std::string::npos);

  GenerationRequest empty;
  EXPECT_EQ(engine_->Submit(empty).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest bad_id = Greedy("x", 1);
  bad_id.prompt_tokens.push_back(1 << 20);
  EXPECT_EQ(engine_->Submit(bad_id).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest zero = Greedy("x", 1);
  zero.max_tokens = 0;
  EXPECT_EQ(engine_->Submit(zero).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, FullQueueIsResourceExhausted) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  Status last;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = Greedy("Tell me a story.", 64);
    r.ignore_eos = true;
    auto s = engine_->Submit(r);
    if (!s.ok()) {
      last = s.status();
      break;
    }
    streams.push_back(*s);
  }
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted);
  for (auto& s : streams) s->Cancel();
  for (auto& s : streams) Drain(*s);
}

}  // namespace
}  // namespace kinfer
