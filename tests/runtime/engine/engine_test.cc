// The single-sequence engine on the real model and tokenizer: streaming, stop conditions,
// cancellation, admission errors, and determinism (greedy and seeded) across requests.
#include "runtime/engine/engine.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend/cpu_backend.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"
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
};

Collected Drain(RequestStream& s) {
  Collected c;
  StreamEvent ev;
  while (s.Next(&ev, milliseconds(60000))) {
    c.text += ev.text;
    c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    ++c.events;
    if (ev.finish != FinishReason::kNone) {
      c.finish = ev.finish;
      c.last = ev;
      break;
    }
  }
  return c;
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

  GenerationRequest Greedy(const std::string& user, int max_tokens) {
    GenerationRequest r;
    r.prompt_tokens = tokenizer_->Encode(
        "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n", false, true);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
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

// A CPU backend that counts which of the two step calls the engine makes.
class CountingBackend final : public ModelBackend {
 public:
  explicit CountingBackend(LlamaModel* model) : cpu_(CpuBackend::Borrow(model)) {}
  const LlamaHParams& hparams() const override { return cpu_->hparams(); }
  std::string name() const override { return "counting"; }
  int max_batch_tokens() const override { return cpu_->max_batch_tokens(); }
  size_t KvBlockBytes(int block_size) const override { return cpu_->KvBlockBytes(block_size); }
  int64_t KvMemoryBudgetBytes(double fraction) const override { return cpu_->KvMemoryBudgetBytes(fraction); }
  Status InitKvCache(int block_size, int num_blocks) override { return cpu_->InitKvCache(block_size, num_blocks); }
  Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) override {
    ++logits_steps;
    return cpu_->ForwardBatch(seqs, logits);
  }
  Status ForwardBatchArgmax(std::span<const SequenceBatch> seqs, std::vector<int32_t>* tokens) override {
    ++argmax_steps;
    return ModelBackend::ForwardBatchArgmax(seqs, tokens);  // the default: counts a logits step too
  }
  std::atomic<int> logits_steps{0}, argmax_steps{0};

 private:
  std::unique_ptr<CpuBackend> cpu_;
};

TEST_F(EngineTest, GreedyStepsTakeTheBackendsArgmaxWithTheSameTokens) {
  auto run = [&](bool backend_argmax, const GenerationRequest& r, int* argmax_steps, int* logits_steps) {
    CountingBackend backend(model_);
    EngineOptions o;
    o.context_length = 256;
    o.backend_argmax = backend_argmax;
    Collected c;
    {
      Engine engine(&backend, tokenizer_, o);
      auto s = engine.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) c = Drain(**s);
    }
    *argmax_steps = backend.argmax_steps;
    *logits_steps = backend.logits_steps;
    return c;
  };
  GenerationRequest greedy = Greedy("What is the capital of France?", 12);
  greedy.ignore_eos = true;  // exactly 12 tokens
  int argmax = 0, logits = 0;
  const Collected on = run(true, greedy, &argmax, &logits);
  EXPECT_EQ(argmax, 12);  // the prompt's step samples the first token; 11 decode steps follow
  EXPECT_EQ(logits, 12);  // the default ForwardBatchArgmax runs ForwardBatch underneath
  const Collected off = run(false, greedy, &argmax, &logits);
  EXPECT_EQ(argmax, 0);
  EXPECT_EQ(on.tokens, off.tokens);
  EXPECT_EQ(on.text, off.text);
  EXPECT_EQ(on.finish, off.finish);
  ASSERT_EQ(on.tokens.size(), 12u);

  // What needs the logits on the host never takes it: a temperature, penalties, logprobs.
  GenerationRequest sampled = greedy;
  sampled.sampling.temperature = 0.7f;
  sampled.sampling.seed = 3;
  GenerationRequest penalized = greedy;
  penalized.sampling.repetition_penalty = 1.3f;
  GenerationRequest with_logprobs = greedy;
  with_logprobs.sampling.logprobs = 2;
  for (const GenerationRequest* r : {&sampled, &penalized, &with_logprobs}) {
    run(true, *r, &argmax, &logits);
    EXPECT_EQ(argmax, 0);
    EXPECT_GT(logits, 0);
  }
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
