// Persistent worker pool for data-parallel kernels. Run() executes fn(thread_index, n_threads) on
// every thread (the caller is thread 0) and returns when all are done. Workers spin briefly on an
// epoch counter before sleeping, so back-to-back Run() calls in a decode step cost well under a
// microsecond of wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace uf {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(i, size()) for i in [0, size()) concurrently; i == 0 runs on the calling thread.
  // Not reentrant: fn must not call Run() on the same pool.
  void Run(const std::function<void(int thread_index, int n_threads)>& fn);

  // Splits [0, n) into contiguous chunks, one per thread, aligned to `align` items.
  void ParallelFor(int64_t n, int64_t align,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // Default thread count: physical cores available to this process (at least 1).
  static int DefaultThreads();

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace uf
