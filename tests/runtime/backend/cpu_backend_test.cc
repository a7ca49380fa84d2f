// CpuBackend on the bundled model: its ForwardBatch is LlamaModel::ForwardBatch bit for bit, the
// cache sizing is sane (and the memory it is sized from counts a cgroup limit), and misuse is
// refused with a reason.
#include "runtime/backend/cpu_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/model/llama_model.h"
#include "runtime/sample/draw_noise.h"
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

TEST_F(CpuBackendTest, ALaunchedStepIsForwardBatchSampleInTwoHalvesOneAtATime) {
  ASSERT_TRUE(backend_->InitKvCache(16, 8).ok());
  const std::vector<int32_t> prompt = {1, 9690, 198, 2683, 359, 253};
  const std::vector<int32_t> table = {0};
  SequenceBatch s;
  s.tokens = prompt;
  s.blocks = table;
  DrawParams greedy;
  greedy.temperature = 0.0f;
  DrawParams hot;
  hot.temperature = 1.0f;
  hot.noise_key = DrawKey(37, 0);
  std::vector<int32_t> got, want;
  EXPECT_EQ(backend_->FinishSample(&got).code(), StatusCode::kFailedPrecondition);
  for (const DrawParams& p : {greedy, hot}) {
    ASSERT_TRUE(backend_
                    ->ForwardBatchSample(std::span<const SequenceBatch>(&s, 1),
                                         std::span<const DrawParams>(&p, 1), &want)
                    .ok());
    ASSERT_TRUE(backend_
                    ->LaunchSample(std::span<const SequenceBatch>(&s, 1),
                                   std::span<const DrawParams>(&p, 1))
                    .ok());
    EXPECT_EQ(backend_
                  ->LaunchSample(std::span<const SequenceBatch>(&s, 1),
                                 std::span<const DrawParams>(&p, 1))
                  .code(),
              StatusCode::kFailedPrecondition);  // one step at a time
    ASSERT_TRUE(backend_->FinishSample(&got).ok());
    EXPECT_EQ(got, want);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(backend_->FinishSample(&got).code(), StatusCode::kFailedPrecondition);
  }
  // A launch that fails leaves nothing launched.
  const std::vector<DrawParams> two = {greedy, greedy};
  EXPECT_EQ(backend_->LaunchSample(std::span<const SequenceBatch>(&s, 1), two).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->FinishSample(&got).code(), StatusCode::kFailedPrecondition);
}

// A chained step (LaunchSampleChained) is the step with the launched step's draws put in as the
// chained sequences' last tokens; the tokens come back in launch order; misuse is refused with
// the launched step left launched.
TEST_F(CpuBackendTest, AChainedStepTakesItsTokensFromTheLaunchedStepsDraws) {
  ASSERT_TRUE(backend_->InitKvCache(16, 8).ok());
  auto reference = CpuBackend::Create(file_, 2);
  ASSERT_TRUE(reference.ok());
  ASSERT_TRUE((*reference)->InitKvCache(16, 8).ok());
  const std::vector<int32_t> a = {1, 9690, 198, 2683, 359, 253};
  const std::vector<int32_t> b = {1, 4093, 198, 1, 9690};
  const std::vector<int32_t> ta = {0}, tb = {1};
  DrawParams hot;
  hot.temperature = 0.9f;
  hot.noise_key = DrawKey(61, 0);
  DrawParams greedy;
  greedy.temperature = 0.0f;
  const std::vector<DrawParams> draws = {hot, greedy};
  std::vector<SequenceBatch> first(2);
  first[0].tokens = a;
  first[0].blocks = ta;
  first[1].tokens = b;
  first[1].blocks = tb;
  // The reference: step by step, the drawn tokens written in by hand.
  std::vector<int32_t> want1, want2;
  ASSERT_TRUE((*reference)->ForwardBatchSample(first, draws, &want1).ok());
  ASSERT_EQ(want1.size(), 2u);
  std::vector<SequenceBatch> second(2);  // the sequences swapped: chain rows 1 and 0
  const std::vector<int32_t> in_b = {want1[1]}, in_a = {want1[0]};
  second[0].tokens = in_b;
  second[0].pos0 = static_cast<int>(b.size());
  second[0].blocks = tb;
  second[1].tokens = in_a;
  second[1].pos0 = static_cast<int>(a.size());
  second[1].blocks = ta;
  ASSERT_TRUE((*reference)->ForwardBatchSample(second, draws, &want2).ok());

  const std::vector<int32_t> chain = {1, 0};
  const std::vector<int32_t> pending = {-1};
  std::vector<SequenceBatch> chained = second;
  chained[0].tokens = pending;
  chained[1].tokens = pending;
  EXPECT_EQ(backend_->LaunchSampleChained(chained, draws, chain).code(),
            StatusCode::kFailedPrecondition);  // nothing launched to chain to
  ASSERT_TRUE(backend_->LaunchSample(first, draws).ok());
  const std::vector<int32_t> short_chain = {1};
  const std::vector<int32_t> bad_row = {2, 0};
  EXPECT_EQ(backend_->LaunchSampleChained(chained, draws, short_chain).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->LaunchSampleChained(chained, draws, bad_row).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(backend_->LaunchSampleChained(chained, draws, chain).ok());
  EXPECT_EQ(backend_->LaunchSampleChained(chained, draws, chain).code(),
            StatusCode::kFailedPrecondition);  // two at most
  EXPECT_EQ(backend_->LaunchSample(first, draws).code(), StatusCode::kFailedPrecondition);
  std::vector<int32_t> got1, got2, none;
  ASSERT_TRUE(backend_->FinishSample(&got1).ok());
  ASSERT_TRUE(backend_->FinishSample(&got2).ok());
  EXPECT_EQ(backend_->FinishSample(&none).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(got1, want1);
  EXPECT_EQ(got2, want2);
}

// ForwardBatchSampleMixed (the default, which every backend but CUDA's runs): the rows not on
// the host are ForwardBatchSample's draws, the host rows are -1 and their logits ForwardBatch's,
// in host_rows order; misuse is refused.
TEST_F(CpuBackendTest, AMixedStepDrawsSomeRowsAndHandsBackTheOthersLogits) {
  ASSERT_TRUE(backend_->InitKvCache(16, 8).ok());
  auto reference = CpuBackend::Create(file_, 2);
  ASSERT_TRUE(reference.ok());
  ASSERT_TRUE((*reference)->InitKvCache(16, 8).ok());
  const std::vector<int32_t> a = {1, 9690, 198, 2683, 359, 253}, b = {1, 4093, 198, 1, 9690},
                             c = {1, 2683, 359};
  const std::vector<int32_t> ta = {0}, tb = {1}, tc = {2};
  DrawParams hot;
  hot.temperature = 0.9f;
  hot.noise_key = DrawKey(61, 0);
  const std::vector<DrawParams> draws = {hot, DrawParams{}, hot};
  std::vector<SequenceBatch> step(3);
  step[0].tokens = a;
  step[0].blocks = ta;
  step[1].tokens = b;
  step[1].blocks = tb;
  step[2].tokens = c;
  step[2].blocks = tc;
  std::vector<float> logits;
  std::vector<int32_t> drawn;
  ASSERT_TRUE((*reference)->ForwardBatch(step, &logits).ok());
  ASSERT_TRUE(backend_->ForwardBatchSample(step, draws, &drawn).ok());  // (same positions again)
  const size_t nv = static_cast<size_t>(backend_->hparams().n_vocab);
  ASSERT_EQ(logits.size(), 3 * nv);

  const std::vector<int32_t> host = {0, 2};
  std::vector<int32_t> tokens;
  std::vector<float> host_logits;
  ASSERT_TRUE(backend_->ForwardBatchSampleMixed(step, draws, host, &tokens, &host_logits).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{-1, drawn[1], -1}));
  ASSERT_EQ(host_logits.size(), 2 * nv);
  EXPECT_TRUE(std::equal(logits.begin(), logits.begin() + nv, host_logits.begin()));
  EXPECT_TRUE(std::equal(logits.begin() + 2 * nv, logits.end(), host_logits.begin() + nv));
  // No host rows: ForwardBatchSample's tokens.
  ASSERT_TRUE(backend_->ForwardBatchSampleMixed(step, draws, {}, &tokens, &host_logits).ok());
  EXPECT_EQ(tokens, drawn);
  EXPECT_TRUE(host_logits.empty());

  const std::vector<int32_t> unordered = {2, 0}, outside = {3}, twice = {1, 1};
  for (const std::vector<int32_t>* bad : {&unordered, &outside, &twice}) {
    EXPECT_EQ(backend_->ForwardBatchSampleMixed(step, draws, *bad, &tokens, &host_logits).code(),
              StatusCode::kInvalidArgument);
  }
  const std::vector<DrawParams> two(2);
  EXPECT_EQ(backend_->ForwardBatchSampleMixed(step, two, host, &tokens, &host_logits).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(backend_->LaunchSample(step, draws).ok());
  EXPECT_EQ(backend_->ForwardBatchSampleMixed(step, draws, host, &tokens, &host_logits).code(),
            StatusCode::kFailedPrecondition);
  ASSERT_TRUE(backend_->FinishSample(&tokens).ok());
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

namespace kinfer {
namespace {

constexpr char kMeminfo[] =
    "MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   20000000 kB\n";

TEST(MemAvailableFromTest, MeminfoAloneWithoutACgroupLimit) {
  EXPECT_EQ(MemAvailableFrom(kMeminfo, "", "", ""), 20000000LL * 1024);
  EXPECT_EQ(MemAvailableFrom(kMeminfo, "max\n", "123456\n", ""), 20000000LL * 1024);  // v2
  // v1's "no limit": 2^63 rounded down to pages.
  EXPECT_EQ(MemAvailableFrom(kMeminfo, "9223372036854771712\n", "123456\n", ""), 20000000LL * 1024);
  EXPECT_EQ(MemAvailableFrom("", "", "", ""), 0);
}

TEST(MemAvailableFromTest, APodLimitLowersItToLimitLessTheWorkingSet) {
  const int64_t gib = int64_t{1} << 30;
  // A 4 GiB limit, 3 GiB used of which 1 GiB is inactive page cache: 2 GiB working set, 2 left.
  const std::string limit = std::to_string(4 * gib) + "\n";
  const std::string usage = std::to_string(3 * gib) + "\n";
  const std::string v2_stat = "anon 100\nfile 200\ninactive_file " + std::to_string(gib) + "\n";
  EXPECT_EQ(MemAvailableFrom(kMeminfo, limit, usage, v2_stat), 2 * gib);
  // v1 names the hierarchical figure total_inactive_file (and has inactive_file for the group).
  const std::string v1_stat = "inactive_file 7\ntotal_inactive_file " + std::to_string(gib) + "\n";
  EXPECT_EQ(MemAvailableFrom(kMeminfo, limit, usage, v1_stat), 2 * gib);
  // No stat: all of the usage counts.
  EXPECT_EQ(MemAvailableFrom(kMeminfo, limit, usage, ""), gib);
  // Over the limit (usage can exceed it briefly): nothing left, never negative.
  EXPECT_EQ(MemAvailableFrom(kMeminfo, limit, std::to_string(5 * gib), ""), 0);
  // A limit larger than the machine leaves the machine's figure.
  EXPECT_EQ(MemAvailableFrom(kMeminfo, std::to_string(100 * gib), usage, v2_stat),
            20000000LL * 1024);
}

TEST(MemAvailableFromTest, TheLiveFiguresAreReadable) {
  const int64_t avail = HostMemAvailableBytes();
  EXPECT_GT(avail, 0);
  std::ifstream in("/proc/meminfo");
  std::stringstream meminfo;
  meminfo << in.rdbuf();
  // The cgroup can only lower the machine's figure (which moves a little between the two reads).
  EXPECT_LE(avail, MemAvailableFrom(meminfo.str(), "", "", "") + (int64_t{256} << 20));
}

}  // namespace
}  // namespace kinfer
