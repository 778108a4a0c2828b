#include "base/status.h"

#include <gtest/gtest.h>

#include "base/thread_pool.h"

namespace uf {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  UF_ASSIGN_OR_RETURN(*out, Half(x));
  return OkStatus();
}

TEST(StatusTest, PropagatesErrors) {
  int out = 0;
  EXPECT_TRUE(UseHalf(4, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = UseHalf(3, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: odd");
  EXPECT_EQ(s.WithContext("f").message(), "f: odd");
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  EXPECT_DEATH({ (void)Half(3).value(); }, "odd");
}

TEST(ThreadPoolTest, RunsEveryIndexOnce) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 1000; ++rep) {
    std::atomic<int> mask{0};
    pool.Run([&](int i, int n) {
      EXPECT_EQ(n, 3);
      mask.fetch_or(1 << i);
    });
    ASSERT_EQ(mask.load(), 7);
  }
  std::vector<int> hit(1000, 0);
  pool.ParallelFor(1000, 32, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hit[i]++;
  });
  for (int h : hit) EXPECT_EQ(h, 1);
}

}  // namespace
}  // namespace uf
