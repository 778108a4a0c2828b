// ../shared (tiny models, goldens, tokenizer vectors, chat templates) lies beside the repository
// in this project's own checkouts; a clone anywhere else lacks it. Tests that read it skip, saying
// what is missing, instead of failing; test binaries never read it while ctest lists their tests
// (discovery runs at test time, DISCOVERY_MODE PRE_TEST), so the build never depends on it.
// Where ../shared is present, a file missing from it is a failure, not a skip.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <system_error>

namespace testing_shared {

inline constexpr char kDir[] = "../shared";

inline bool Present() {
  std::error_code ec;
  return std::filesystem::is_directory(kDir, ec);
}

}  // namespace testing_shared

// Skips the running test when ../shared is absent. Works in a test body, SetUp and
// SetUpTestSuite; the skip message says what is missing and where it was looked for.
#define UF_REQUIRE_SHARED()                                                                 \
  if (!::testing_shared::Present())                                                         \
  GTEST_SKIP() << "../shared (test models, goldens, tokenizer vectors) is not beside this " \
                  "checkout"
