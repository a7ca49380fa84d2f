#include "common/request_path.h"

#include <gtest/gtest.h>

namespace kinfer {
namespace {

TEST(RoutedPathTest, EveryWayOfWritingAPathRoutesAsThePath) {
  for (const char* raw : {"/v1/chat/completions", "/v1/chat/completions/", "/v1/chat/completions//",
                          "/v1/chat/%63ompletions", "/v1/chat/completions%2F", "/v1/chat/completions%2f",
                          "/v1%2Fchat%2Fcompletions", "/%76%31/chat/completions/"}) {
    EXPECT_EQ(RoutedPath(raw), "/v1/chat/completions") << raw;
  }
}

TEST(RoutedPathTest, TheRootAndOtherPathsKeepTheirShape) {
  EXPECT_EQ(RoutedPath("/"), "/");
  EXPECT_EQ(RoutedPath("//"), "/");
  EXPECT_EQ(RoutedPath(""), "");
  EXPECT_EQ(RoutedPath("/v1//chat/completions"), "/v1//chat/completions");  // inner slashes stay
  EXPECT_EQ(RoutedPath("/a%20b"), "/a b");
}

TEST(RoutedPathTest, AnEscapeWithoutTwoHexDigitsIsRefused) {
  for (const char* raw : {"/v1/%", "/v1/%4", "/v1/%zz", "/v1/%4g", "/%/chat"}) {
    EXPECT_EQ(RoutedPath(raw), std::nullopt) << raw;
  }
}

}  // namespace
}  // namespace kinfer
