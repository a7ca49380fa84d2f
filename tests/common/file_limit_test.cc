#include "common/file_limit.h"

#include <sys/resource.h>

#include <algorithm>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

// Sets the soft RLIMIT_NOFILE for one test and puts the old one back (the hard one is never
// lowered: a process cannot raise it again).
class SoftFileLimit {
 public:
  SoftFileLimit() { getrlimit(RLIMIT_NOFILE, &saved_); }
  ~SoftFileLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }
  bool Set(rlim_t soft) {
    rlimit r = saved_;
    r.rlim_cur = std::min(soft, saved_.rlim_max);
    return r.rlim_cur == soft && setrlimit(RLIMIT_NOFILE, &r) == 0;
  }
  rlim_t hard() const { return saved_.rlim_max; }

 private:
  rlimit saved_{};
};

TEST(FileLimitTest, TheSoftLimitIsRaisedToTheHardOne) {
  SoftFileLimit limit;
  ASSERT_TRUE(limit.Set(256)) << "the hard open-file limit is below 256";
  EXPECT_EQ(OpenFileLimit(), 256u);
  const uint64_t want =
      limit.hard() == RLIM_INFINITY ? uint64_t{1} << 20
                                    : std::min<uint64_t>(limit.hard(), uint64_t{1} << 20);
  EXPECT_EQ(RaiseOpenFileLimit(), want);
  EXPECT_EQ(OpenFileLimit(), want);
}

TEST(FileLimitTest, TheDefaultCapIsHalfTheFilesLessAReserveWithinBounds) {
  SoftFileLimit limit;
  ASSERT_TRUE(limit.Set(200));
  EXPECT_EQ(DefaultMaxConnections(), 36u);  // (200 - 128) / 2
  ASSERT_TRUE(limit.Set(100));
  EXPECT_EQ(DefaultMaxConnections(), 16u);  // never below 16
  if (limit.hard() == RLIM_INFINITY || limit.hard() >= 200000) {
    ASSERT_TRUE(limit.Set(200000));
    EXPECT_EQ(DefaultMaxConnections(), 65536u);  // never above 65536
  }
}

}  // namespace
}  // namespace kinfer
