// Where tests find the bundled model: $KINFER_MODEL, else the build's default path.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kinfer::testing {

inline std::string ModelPath() {
  if (const char* env = std::getenv("KINFER_MODEL"); env && *env) return env;
  return KINFER_DEFAULT_MODEL;
}

inline bool ModelAvailable() { return std::filesystem::exists(ModelPath()); }

inline std::string SourcePath(const std::string& rel) {
  return std::string(KINFER_SOURCE_DIR) + "/" + rel;
}

}  // namespace kinfer::testing

// Skips the test, saying why, when the bundled model has not been fetched (scripts/setup.sh).
#define KINFER_REQUIRE_MODEL()                                                              \
  do {                                                                                      \
    if (!::kinfer::testing::ModelAvailable())                                               \
      GTEST_SKIP() << "model " << ::kinfer::testing::ModelPath()                            \
                   << " not found: run scripts/setup.sh (or set KINFER_MODEL)";             \
  } while (0)
