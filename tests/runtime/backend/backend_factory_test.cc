// CreateBackend: "cpu" gives the CPU backend, "auto" falls back to it with one log line when no
// CUDA device works, "cuda" without one is a clear error, anything else is refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/backend/model_backend.h"
#include "tests/runtime/backend/backend_test_util.h"

namespace kinfer {
namespace {

std::vector<std::string>* g_lines = nullptr;
void Capture(std::string_view line) { g_lines->emplace_back(line); }

class BackendFactoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_lines = &lines_;
    opts_.log = Capture;
  }
  std::vector<std::string> lines_;
  BackendOptions opts_;
};

TEST_F(BackendFactoryTest, UnknownDeviceIsInvalidArgument) {
  auto b = CreateBackend("tpu", nullptr, 1, opts_);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("cpu, cuda or auto"), std::string::npos);
}

TEST_F(BackendFactoryTest, CpuGivesTheCpuBackend) {
  KINFER_REQUIRE_MODEL();
  auto b = CreateBackend("cpu", testing::ModelFile(), 2, opts_);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "cpu");
  EXPECT_TRUE(lines_.empty());
}

TEST_F(BackendFactoryTest, CudaWithoutADeviceIsAClearError) {
  if (CudaDeviceUsable().ok()) GTEST_SKIP() << "a CUDA device works here";
  auto b = CreateBackend("cuda", testing::ModelFile(), 2, opts_);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.status().message().rfind("no CUDA device: ", 0), 0u) << b.status().message();
  if (!CudaBackendCompiled()) {
    EXPECT_NE(b.status().message().find("no CUDA backend"), std::string::npos);
  }
}

TEST_F(BackendFactoryTest, AutoFallsBackToTheCpuWithOneLogLine) {
  KINFER_REQUIRE_MODEL();
  if (CudaDeviceUsable().ok()) GTEST_SKIP() << "a CUDA device works here";
  auto b = CreateBackend("auto", testing::ModelFile(), 2, opts_);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "cpu");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].rfind("backend: cpu (auto: no CUDA device: ", 0), 0u) << lines_[0];
}

TEST_F(BackendFactoryTest, AutoPicksCudaWhenADeviceWorks) {
  KINFER_REQUIRE_MODEL();
  const Status usable = CudaDeviceUsable();
  if (!usable.ok()) GTEST_SKIP() << usable.message();
  auto b = CreateBackend("auto", testing::ModelFile(), 2, opts_);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "cuda");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].rfind("backend: cuda (", 0), 0u) << lines_[0];
}

}  // namespace
}  // namespace kinfer
