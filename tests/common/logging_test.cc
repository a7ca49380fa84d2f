#include "common/logging.h"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

namespace kinfer {
namespace {

TEST(LoggingTest, ParsesKnownLevels) {
  int lvl = -1;
  EXPECT_TRUE(ParseLogLevel("debug", &lvl).ok());
  EXPECT_EQ(lvl, static_cast<int>(spdlog::level::debug));
  EXPECT_TRUE(ParseLogLevel("warning", &lvl).ok());
  EXPECT_EQ(lvl, static_cast<int>(spdlog::level::warn));
  EXPECT_FALSE(ParseLogLevel("loud", &lvl).ok());
}

TEST(LoggingTest, InitTwiceIsFine) {
  EXPECT_TRUE(InitLogging("test", "info").ok());
  EXPECT_TRUE(InitLogging("test", "error").ok());
  EXPECT_EQ(spdlog::default_logger()->level(), spdlog::level::err);
  EXPECT_FALSE(InitLogging("test", "nope").ok());
}

}  // namespace
}  // namespace kinfer
