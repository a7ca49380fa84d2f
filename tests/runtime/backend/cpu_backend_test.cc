// CpuBackend on the bundled model: its ForwardBatch is LlamaModel::ForwardBatch bit for bit, the
// cache sizing is sane, and misuse is refused with a reason.
#include "runtime/backend/cpu_backend.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/model/llama_model.h"
#include "tests/runtime/backend/backend_test_util.h"

namespace kinfer {
namespace {

class CpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KINFER_REQUIRE_MODEL();
    file_ = testing::ModelFile();
    ASSERT_NE(file_, nullptr);
    auto b = CpuBackend::Create(file_, 2);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend_ = std::move(b).value();
  }
  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<CpuBackend> backend_;
};

TEST_F(CpuBackendTest, ForwardBatchIsTheModelsForwardBatchBitForBit) {
  ASSERT_TRUE(backend_->InitKvCache(16, 8).ok());
  auto m = LlamaModel::Load(file_, 2);
  ASSERT_TRUE(m.ok());
  auto cache = (*m)->NewPagedKvCache(16, 8);
  const std::vector<int32_t> a = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511};
  const std::vector<int32_t> b = {1, 4093, 198, 1, 9690};
  const std::vector<int32_t> ta = {3, 1}, tb = {5};
  for (int step = 0; step < 2; ++step) {
    std::vector<SequenceBatch> seqs(2);
    seqs[0].tokens = step == 0 ? std::span<const int32_t>(a) : std::span<const int32_t>(a).subspan(0, 1);
    seqs[0].pos0 = step == 0 ? 0 : static_cast<int>(a.size());
    seqs[0].blocks = ta;
    seqs[0].num_logits = step == 0 ? 3 : 1;
    seqs[1].tokens = step == 0 ? std::span<const int32_t>(b) : std::span<const int32_t>(b).subspan(1, 1);
    seqs[1].pos0 = step == 0 ? 0 : static_cast<int>(b.size());
    seqs[1].blocks = tb;
    std::vector<float> want, got;
    ASSERT_TRUE((*m)->ForwardBatch(seqs, cache.get(), &want).ok());
    ASSERT_TRUE(backend_->ForwardBatch(seqs, &got).ok());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(got, want) << "step " << step;
  }
}

TEST_F(CpuBackendTest, ForwardBeforeInitKvCacheIsAFailedPrecondition) {
  const std::vector<int32_t> a = {1, 2};
  const std::vector<int32_t> t = {0};
  SequenceBatch s;
  s.tokens = a;
  s.blocks = t;
  std::vector<float> out;
  EXPECT_EQ(backend_->ForwardBatch(std::span<const SequenceBatch>(&s, 1), &out).code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(CpuBackendTest, KvSizingIsSane) {
  const LlamaHParams& hp = backend_->hparams();
  EXPECT_EQ(backend_->name(), "cpu");
  EXPECT_EQ(backend_->KvBlockBytes(16), 2u * hp.n_layer * 16 * hp.n_embd_kv() * 2);
  const int64_t avail = HostMemAvailableBytes();
  ASSERT_GT(avail, 0);
  const int64_t half = backend_->KvMemoryBudgetBytes(0.5);
  EXPECT_GT(half, 0);
  EXPECT_LE(half, avail);
  EXPECT_EQ(backend_->KvMemoryBudgetBytes(0.0), 0);
  EXPECT_LE(backend_->KvMemoryBudgetBytes(2.0), avail + avail / 10);  // clamped to 1
  EXPECT_EQ(backend_->InitKvCache(0, 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->InitKvCache(16, 0).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(backend_->InitKvCache(16, 4).ok());
  EXPECT_EQ(backend_->cache()->bytes(), backend_->KvBlockBytes(16) * 4);
}

}  // namespace
}  // namespace kinfer
