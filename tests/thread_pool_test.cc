// Correctness of the persistent thread pool: every index runs exactly once per Run, Runs issued
// back to back (workers spinning) and after idle gaps (workers asleep on the futex) all
// complete, and ParallelFor covers [0, n) exactly once with aligned chunk boundaries. No timing
// assertions: the pool's speed is measured by `ultrafast bench`, not by unit tests.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace uf {
namespace {

TEST(ThreadPoolTest, SizeIsAtLeastOne) {
  EXPECT_EQ(ThreadPool(0).size(), 1);
  EXPECT_EQ(ThreadPool(-3).size(), 1);
  EXPECT_EQ(ThreadPool(3).size(), 3);
  EXPECT_GE(ThreadPool::DefaultThreads(), 1);
}

TEST(ThreadPoolTest, EveryIndexRunsOnceWithTheRightCount) {
  for (int n : {1, 2, 3, 4, 8}) {
    ThreadPool pool(n);
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> bad_count{0};
    pool.Run([&](int i, int nt) {
      if (nt != n || i < 0 || i >= n) {
        bad_count.fetch_add(1);
        return;
      }
      hits[i].fetch_add(1);
    });
    EXPECT_EQ(bad_count.load(), 0) << n << " threads";
    for (int i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
  }
}

TEST(ThreadPoolTest, IndexZeroRunsOnTheCallingThread) {
  ThreadPool pool(3);
  std::thread::id id0;
  pool.Run([&](int i, int) {
    if (i == 0) id0 = std::this_thread::get_id();
  });
  EXPECT_EQ(id0, std::this_thread::get_id());
}

// Many back-to-back Runs: each must see the previous one's writes (Run is a full barrier) and
// no worker may skip or repeat a job.
TEST(ThreadPoolTest, ManyBackToBackRunsAreEachComplete) {
  for (int n : {2, 3, 4}) {
    ThreadPool pool(n);
    std::vector<int64_t> per_thread(n, 0);  // each slot written by one thread only
    int64_t sum_check = 0;
    constexpr int kRuns = 3000;
    for (int r = 0; r < kRuns; ++r) {
      pool.Run([&](int i, int) { per_thread[i] += 1; });
      // Plain (non-atomic) reads: valid only if Run waited for every worker.
      int64_t s = 0;
      for (int64_t v : per_thread) s += v;
      sum_check += s == static_cast<int64_t>(r + 1) * n ? 0 : 1;
    }
    EXPECT_EQ(sum_check, 0) << n << " threads";
    for (int i = 0; i < n; ++i) EXPECT_EQ(per_thread[i], kRuns) << "thread " << i;
  }
}

// Runs separated by idle gaps long enough for the workers to stop spinning and sleep: the
// futex wake-up path must deliver every job.
TEST(ThreadPoolTest, RunsAfterWorkersFellAsleepComplete) {
  ThreadPool pool(4);
  for (int r = 0; r < 20; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(r % 2 == 0 ? 5 : 0));
    std::atomic<int> count{0};
    pool.Run([&](int, int) { count.fetch_add(1); });
    ASSERT_EQ(count.load(), 4) << "run " << r;
  }
}

// A job where the caller finishes long before a worker: the caller must sleep and be woken,
// not return early.
TEST(ThreadPoolTest, CallerWaitsForASlowWorker) {
  ThreadPool pool(2);
  for (int r = 0; r < 5; ++r) {
    std::atomic<bool> done{false};
    pool.Run([&](int i, int) {
      if (i == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        done.store(true);
      }
    });
    EXPECT_TRUE(done.load()) << "run " << r;
  }
}

TEST(ThreadPoolTest, ParallelForCoversEveryItemOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n :
         {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{16}, int64_t{100}, int64_t{1001}}) {
      for (int64_t align : {int64_t{0}, int64_t{1}, int64_t{4}, int64_t{16}}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> misaligned{0};
        pool.ParallelFor(n, align, [&](int64_t b, int64_t e) {
          if (align > 1 && b % align != 0) misaligned.fetch_add(1);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        EXPECT_EQ(misaligned.load(), 0);
        int wrong = 0;
        for (int64_t i = 0; i < n; ++i) wrong += hits[i].load() != 1;
        EXPECT_EQ(wrong, 0) << "n=" << n << " align=" << align << " threads=" << threads;
      }
    }
  }
}

// The split is balanced: with n a multiple of threads * align, every thread gets the same share
// (a ceil-sized split would starve the last thread).
TEST(ThreadPoolTest, ParallelForSplitIsBalanced) {
  ThreadPool pool(3);
  pool.Run([](int, int) {});
  std::atomic<int> calls{0};
  std::vector<std::atomic<int64_t>> sizes(3);
  pool.ParallelFor(3 * 16 * 5, 16,
                   [&](int64_t b, int64_t e) { sizes[calls.fetch_add(1)].store(e - b); });
  ASSERT_EQ(calls.load(), 3);
  for (auto& s : sizes) EXPECT_EQ(s.load(), 16 * 5);
}

TEST(ThreadPoolTest, DestroyWhileIdleAndAfterUseDoesNotHang) {
  for (int r = 0; r < 50; ++r) {
    ThreadPool pool(1 + r % 4);
    if (r % 2 == 0) pool.Run([](int, int) {});
  }
  SUCCEED();
}

// Sync inside one Run: every thread's writes before a barrier are visible to every thread after
// it (plain, non-atomic data), the completion runs exactly once per barrier while the others
// wait, and the barrier is reusable thousands of times in a row, also when a thread arrives
// long after the others have gone to sleep.
TEST(ThreadPoolSyncTest, PhasesSeeEachOthersWritesAndCompletionsRunOnce) {
  for (int n : {1, 2, 3, 4}) {
    ThreadPool pool(n);
    constexpr int kPhases = 2000;
    std::vector<int> slots(n, 0);
    std::vector<int> sums(kPhases, -1);
    int completions = 0;  // written only by completions, read after the Run
    std::atomic<bool> bad{false};
    pool.Run([&](int i, int nt) {
      for (int p = 0; p < kPhases; ++p) {
        slots[i] = p * 10 + i;
        pool.Sync([&] {
          int s = 0;
          for (int j = 0; j < nt; ++j) s += slots[j];
          sums[p] = s;
          ++completions;
        });
        // After the barrier every thread reads every slot of this phase.
        for (int j = 0; j < nt; ++j) {
          if (slots[j] != p * 10 + j) bad.store(true);
        }
        pool.Sync();  // nobody overwrites a slot before all have read it
      }
    });
    EXPECT_FALSE(bad.load()) << n << " threads";
    EXPECT_EQ(completions, kPhases) << n << " threads";
    for (int p = 0; p < kPhases; ++p) {
      ASSERT_EQ(sums[p], n * p * 10 + n * (n - 1) / 2) << n << " threads, phase " << p;
    }
  }
}

TEST(ThreadPoolSyncTest, ALateThreadWakesSleepingPeers) {
  ThreadPool pool(3);
  std::atomic<int> after{0};
  pool.Run([&](int i, int) {
    // Long enough for the others' bounded spin to end and put them to sleep on the futex.
    if (i == 2) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pool.Sync();
    after.fetch_add(1);
  });
  EXPECT_EQ(after.load(), 3);
}

}  // namespace
}  // namespace uf
