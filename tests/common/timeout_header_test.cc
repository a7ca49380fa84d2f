#include "common/timeout_header.h"

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using std::chrono::milliseconds;

TEST(TimeoutHeaderTest, UnitsAndPlainSeconds) {
  EXPECT_EQ(ParseTimeoutHeader("500ms"), milliseconds(500));
  EXPECT_EQ(ParseTimeoutHeader("2s"), milliseconds(2000));
  EXPECT_EQ(ParseTimeoutHeader("1.5"), milliseconds(1500));
  EXPECT_EQ(ParseTimeoutHeader("1m"), milliseconds(60000));
  EXPECT_EQ(ParseTimeoutHeader(" 3s\t"), milliseconds(3000));
  EXPECT_EQ(ParseTimeoutHeader("0.0001"), milliseconds(1));  // rounds up, never to 0
  EXPECT_EQ(ParseTimeoutHeader("86400"), milliseconds(86400000));
}

TEST(TimeoutHeaderTest, RefusesWhatEitherSideWouldNotHonour) {
  for (const char* bad : {"", " ", "0", "0s", "-1s", "-2", "soon", "5 parsecs", "nan", "inf", "1ns",
                          "1us", "5h", "2d", "1e9", "86401", "ms", "s", "1 s"}) {
    EXPECT_FALSE(ParseTimeoutHeader(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace kinfer
