// ForwardBatch on the real bundled model: a paged KV cache gives exactly the logits of the
// contiguous one, several sequences in one step match each run alone (to the last bits where the
// matrix products take the same kernel, closely where the batch moves them onto the GEMM), and
// malformed steps are refused with a reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"
#include "tests/runtime/bundled_model.h"

namespace kinfer {
namespace {

class LlamaModelBatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KINFER_REQUIRE_MODEL();
    const testing::BundledModel* b = testing::BundledModel::Get();
    ASSERT_NE(b, nullptr);
    model_ = b->model();
  }

  static int Argmax(const float* row, int n) {
    return static_cast<int>(std::max_element(row, row + n) - row);
  }

  LlamaModel* model_ = nullptr;
};

const std::vector<int32_t> kPromptA = {1,    9690, 198,  2683,  359, 253, 5356, 5646, 11173, 3365,
                                       3511, 314,  4193, 19082, 30,  2,   198,  1,    4093,  198,
                                       1,    9690, 198,  2683,  359, 253, 5356, 5646, 11173, 3365,
                                       3511, 314,  4193, 19082, 30,  2,   198,  1,    4093,  198};
const std::vector<int32_t> kPromptB = {1, 4093, 198, 19082, 30, 2, 198, 3511, 314, 4193, 11173};
const std::vector<int32_t> kPromptC = {1,    9690,  198, 5646, 11173, 3365, 2683, 359,
                                       253,  5356,  30,  2,    198,   1,    4093, 198,
                                       4193, 19082, 30,  2,    198,   1,    7};

// Greedy decode of `steps` tokens after `prompt`, alone, in the contiguous cache.
std::vector<int32_t> GreedyAlone(LlamaModel* m, const std::vector<int32_t>& prompt, int steps,
                                 std::vector<std::vector<float>>* logits_per_step) {
  const int nv = m->hparams().n_vocab;
  auto cache = m->NewKvCache(256);
  std::vector<float> logits;
  EXPECT_TRUE(m->Forward(prompt, cache.get(), false, &logits, ForwardMode::kPrompt).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < steps; ++i) {
    logits_per_step->push_back(logits);
    int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    std::vector<int32_t> one = {next};
    EXPECT_TRUE(m->Forward(one, cache.get(), false, &logits, ForwardMode::kDecode).ok());
  }
  (void)nv;
  return out;
}

TEST_F(LlamaModelBatchTest, APagedCacheGivesExactlyTheContiguousLogits) {
  // One sequence, its blocks scattered through the pool: the same kernels run on the same rows,
  // so every logit is bit-identical to the contiguous cache's, prompt and decode steps alike.
  const int nv = model_->hparams().n_vocab;
  std::vector<std::vector<float>> alone;
  std::vector<int32_t> tokens = GreedyAlone(model_, kPromptA, 6, &alone);

  auto paged = model_->NewPagedKvCache(/*block_size=*/16, /*num_blocks=*/12);
  const std::vector<int32_t> blocks = {7, 2, 11, 0};  // 64 positions
  std::vector<float> logits;
  SequenceBatch s;
  s.tokens = kPromptA;
  s.pos0 = 0;
  s.blocks = blocks;
  ASSERT_TRUE(model_->ForwardBatch({&s, 1}, paged.get(), &logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(nv));
  int pos = static_cast<int>(kPromptA.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    ASSERT_EQ(logits, alone[i]) << "step " << i;
    SequenceBatch d;
    d.tokens = std::span<const int32_t>(&tokens[i], 1);
    d.pos0 = pos++;
    d.blocks = blocks;
    d.mode = ForwardMode::kDecode;
    ASSERT_TRUE(model_->ForwardBatch({&d, 1}, paged.get(), &logits).ok());
  }
}

// Runs `prompts` together (one step prefills all, then each step decodes one token of each,
// following the solo runs' tokens so both see the same inputs) and returns the largest logit
// difference from each run alone; *choices_differ counts greedy choices that changed where the
// solo run's top two logits were more than `margin` apart.
double BatchedVsAlone(LlamaModel* m, const std::vector<std::vector<int32_t>>& prompts, int steps,
                      double margin, int* choices_differ) {
  const int nv = m->hparams().n_vocab;
  std::vector<std::vector<int32_t>> want(prompts.size());
  std::vector<std::vector<std::vector<float>>> want_logits(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    want[i] = GreedyAlone(m, prompts[i], steps, &want_logits[i]);
  }
  auto paged = m->NewPagedKvCache(16, static_cast<int>(prompts.size()) * 4);
  std::vector<std::vector<int32_t>> tables(prompts.size());
  // Interleaved blocks: sequence i owns blocks i, i + n, i + 2n, ...
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int b = 0; b < 4; ++b) tables[i].push_back(static_cast<int32_t>(i + b * prompts.size()));
  }
  std::vector<SequenceBatch> step(prompts.size());
  std::vector<int> pos(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    step[i].tokens = prompts[i];
    step[i].blocks = tables[i];
    pos[i] = static_cast<int>(prompts[i].size());
  }
  std::vector<float> logits;
  EXPECT_TRUE(m->ForwardBatch(step, paged.get(), &logits).ok());
  std::vector<int32_t> next(prompts.size());
  double worst = 0;
  *choices_differ = 0;
  for (int k = 0; k < steps; ++k) {
    EXPECT_EQ(logits.size(), prompts.size() * nv);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const float* row = &logits[i * nv];
      const std::vector<float>& ref = want_logits[i][k];
      for (int j = 0; j < nv; ++j) worst = std::max(worst, std::fabs(double(row[j]) - ref[j]));
      std::vector<float> sorted = ref;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const int chosen = static_cast<int>(std::max_element(row, row + nv) - row);
      if (chosen != want[i][k] && sorted[0] - sorted[1] > margin) ++*choices_differ;
      next[i] = want[i][k];
      step[i].tokens = std::span<const int32_t>(&next[i], 1);
      step[i].pos0 = pos[i]++;
      step[i].mode = ForwardMode::kDecode;
    }
    EXPECT_TRUE(m->ForwardBatch(step, paged.get(), &logits).ok());
  }
  return worst;
}

TEST_F(LlamaModelBatchTest, SequencesBatchedTogetherMatchEachAloneExactly) {
  // Three sequences: every decode step has 3 rows, which the matrix-vector kernels take as they
  // take one, and the prompts' rows go through the GEMM as they do alone. So batching changes
  // nothing: every logit of every step is bit-identical to the solo runs'.
  int differ = 0;
  const double worst = BatchedVsAlone(model_, {kPromptA, kPromptB, kPromptC}, 8, 0, &differ);
  EXPECT_EQ(worst, 0.0);
  EXPECT_EQ(differ, 0);
}

TEST_F(LlamaModelBatchTest, ALargerBatchStaysWithinTheKernelsRounding) {
  // Five sequences: with AVX-512 VNNI a decode step's 5 rows take the register-blocked GEMM where
  // a solo decode took the matrix-vector kernel. Their fp32 summation orders differ in the last
  // bits, and a last-bit difference can flip the 8-bit rounding of an activation, which moves a
  // logit by up to about 1 on this model (the same effect docs/architecture.md measures against
  // llama.cpp). Greedy choices stay the same except at near-ties. Batch-invariant kernels
  // (identical order in both paths) are what issue 3's determinism test needs; not done yet.
  const std::vector<int32_t> d(kPromptC.begin() + 3, kPromptC.end());
  const std::vector<int32_t> e(kPromptA.begin() + 7, kPromptA.begin() + 30);
  int differ = 0;
  const double worst =
      BatchedVsAlone(model_, {kPromptA, kPromptB, kPromptC, d, e}, 8, /*margin=*/2.5, &differ);
  RecordProperty("worst_abs_logit_diff", std::to_string(worst));
  std::printf("5 sequences batched vs alone: largest logit difference %.3g\n", worst);
  EXPECT_LT(worst, 2.5);
  EXPECT_EQ(differ, 0) << "a greedy choice with a clear margin changed under batching";
}

// A step in which every sequence advances by one token runs as one pool job
// (LlamaModel::set_one_token_step). For 2 to 8 sequences, some of which want no logits, it
// computes what the general path computes, bit for bit, the keys and values it writes included
// (the next steps read them).
TEST_F(LlamaModelBatchTest, OneTokenStepsOfSeveralSequencesComputeWhatTheGeneralPathDoes) {
  const int nv = model_->hparams().n_vocab;
  const std::vector<std::vector<int32_t>> prompts = {kPromptA,
                                                     kPromptB,
                                                     kPromptC,
                                                     {kPromptA.begin() + 5, kPromptA.end()},
                                                     {kPromptC.begin() + 2, kPromptC.end()},
                                                     {1, 7, 9},
                                                     kPromptB,
                                                     {kPromptA.begin(), kPromptA.begin() + 9}};
  for (size_t n : {2, 3, 5, 8}) {
    SCOPED_TRACE(::testing::Message() << n << " sequences");
    std::unique_ptr<PagedKvCache> caches[2] = {model_->NewPagedKvCache(16, 4 * 8),
                                               model_->NewPagedKvCache(16, 4 * 8)};
    std::vector<std::vector<int32_t>> tables(n);
    for (size_t i = 0; i < n; ++i) {
      for (int b = 0; b < 4; ++b) tables[i].push_back(static_cast<int32_t>(i + b * n));
    }
    std::vector<SequenceBatch> step(n);
    std::vector<int32_t> next(n);
    std::vector<float> logits[2];
    for (int path = 0; path < 2; ++path) {
      for (size_t i = 0; i < n; ++i) {
        step[i] = SequenceBatch{};
        step[i].tokens = prompts[i];
        step[i].blocks = tables[i];
      }
      ASSERT_TRUE(model_->ForwardBatch(step, caches[path].get(), &logits[path]).ok());
    }
    ASSERT_EQ(logits[0], logits[1]);
    for (int k = 0; k < 4; ++k) {
      for (size_t i = 0; i < n; ++i) {
        next[i] = static_cast<int32_t>(100 + 37 * i + k);
        step[i].tokens = std::span<const int32_t>(&next[i], 1);
        step[i].pos0 = static_cast<int>(prompts[i].size()) + k;
        step[i].mode = ForwardMode::kDecode;
        step[i].want_logits = (i + k) % 3 != 1;
      }
      for (int path = 0; path < 2; ++path) {
        model_->set_one_token_step(path == 1);
        ASSERT_TRUE(model_->ForwardBatch(step, caches[path].get(), &logits[path]).ok());
      }
      model_->set_one_token_step(true);
      ASSERT_FALSE(logits[0].empty());
      ASSERT_EQ(logits[0].size() % nv, 0u);
      ASSERT_EQ(logits[0], logits[1]) << "decode step " << k;
    }
  }
}

TEST_F(LlamaModelBatchTest, SequencesThatWantNoLogitsAndPrefixesInTheCache) {
  // A long prompt split over two steps (a chunked prefill), the first wanting no logits, next to
  // another sequence's decode: the second chunk's logits equal a one-shot prefill's.
  const int nv = model_->hparams().n_vocab;
  std::vector<std::vector<float>> alone;
  GreedyAlone(model_, kPromptA, 1, &alone);
  auto paged = model_->NewPagedKvCache(16, 8);
  const std::vector<int32_t> table = {3, 1, 5};
  SequenceBatch first;
  first.tokens = std::span<const int32_t>(kPromptA.data(), 24);
  first.blocks = table;
  first.want_logits = false;
  std::vector<float> logits;
  ASSERT_TRUE(model_->ForwardBatch({&first, 1}, paged.get(), &logits).ok());
  EXPECT_TRUE(logits.empty());
  SequenceBatch second = first;
  second.tokens = std::span<const int32_t>(kPromptA.data() + 24, kPromptA.size() - 24);
  second.pos0 = 24;
  second.want_logits = true;
  ASSERT_TRUE(model_->ForwardBatch({&second, 1}, paged.get(), &logits).ok());
  ASSERT_EQ(logits.size(), static_cast<size_t>(nv));
  double worst = 0;
  for (int j = 0; j < nv; ++j) worst = std::max(worst, std::fabs(double(logits[j]) - alone[0][j]));
  // 24 + 16 rows take the same GEMM path as 40 rows, row by row: equal up to the attention's
  // chunking, which is per row too.
  EXPECT_LT(worst, 1e-4);
  EXPECT_EQ(Argmax(logits.data(), nv), Argmax(alone[0].data(), nv));
}

TEST_F(LlamaModelBatchTest, MalformedStepsAreRefusedWithAReason) {
  auto paged = model_->NewPagedKvCache(16, 4);
  std::vector<float> logits;
  EXPECT_EQ(model_->ForwardBatch({}, paged.get(), &logits).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> one_block = {0};
  SequenceBatch s;
  s.tokens = kPromptA;  // 40 tokens need 3 blocks
  s.blocks = one_block;
  Status st = model_->ForwardBatch({&s, 1}, paged.get(), &logits);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cannot hold 40 positions"), std::string::npos) << st.message();
  const std::vector<int32_t> outside = {0, 1, 9};
  s.blocks = outside;
  st = model_->ForwardBatch({&s, 1}, paged.get(), &logits);
  EXPECT_NE(st.message().find("block 9 is outside"), std::string::npos) << st.message();
  const std::vector<int32_t> bad_token = {1, 999999};
  const std::vector<int32_t> ok_blocks = {0};
  s.tokens = bad_token;
  s.blocks = ok_blocks;
  st = model_->ForwardBatch({&s, 1}, paged.get(), &logits);
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.message();
  auto big = model_->NewPagedKvCache(16, 64);
  std::vector<int32_t> many(LlamaModel::kMaxBatch + 1, 1);
  std::vector<int32_t> blocks(40);
  std::iota(blocks.begin(), blocks.end(), 0);
  s.tokens = many;
  s.blocks = blocks;
  st = model_->ForwardBatch({&s, 1}, big.get(), &logits);
  EXPECT_NE(st.message().find("exceeds"), std::string::npos) << st.message();
  PagedKvCache wrong(3, 64, 16, 4);
  s.tokens = bad_token;
  EXPECT_EQ(model_->ForwardBatch({&s, 1}, &wrong, &logits).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kinfer
