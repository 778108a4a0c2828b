// Persistent worker pool for data-parallel kernels. Run() executes fn(thread_index, n_threads) on
// every thread (the caller is thread 0) and returns when all are done.
//
// Cost model: a decode step of a 1B model makes ~100 Run() calls, so a dispatch must cost about a
// microsecond, not a context switch. Workers spin on an epoch counter (with pause) for a bounded
// time after each job and only then sleep on a futex (std::atomic::wait); Run() issues the wake-up
// system call only when some worker actually sleeps. The caller waits for the workers the same
// way: spin, then sleep. On an oversubscribed machine the bounded spin gives the core back.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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
  // Not reentrant: fn must not call Run() on the same pool. One caller at a time.
  void Run(const std::function<void(int thread_index, int n_threads)>& fn);

  // A barrier for the threads of the running job: returns on every thread once all size() of
  // them have called it. With a completion, the last thread to arrive runs completion() before
  // any is released (serial work between two parallel steps, without ending the job). Lets a
  // caller chain the steps of a whole forward pass in one Run: a barrier costs about what a
  // dispatch's wake-up does, and the workers never return to the pool's idle loop between them.
  // Only from inside fn of Run, by every thread the same number of times.
  void Sync() {
    Sync([] {});
  }
  template <typename F>
  void Sync(const F& completion) {
    if (n_threads_ == 1) {
      completion();
      return;
    }
    const uint32_t gen = barrier_gen_.load(std::memory_order_acquire);
    if (barrier_arrived_.fetch_add(1, std::memory_order_acq_rel) ==
        static_cast<uint32_t>(n_threads_ - 1)) {
      completion();
      ReleaseBarrier();
    } else {
      WaitBarrier(gen);
    }
  }

  // Splits [0, n) into contiguous chunks, one per thread, aligned to `align` items (a static
  // split: every thread streams its own share of memory; no work stealing).
  void ParallelFor(int64_t n, int64_t align,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // Default thread count: the CPUs this process may run on (at least 1).
  static int DefaultThreads();

 private:
  void WorkerLoop(int index);
  void ReleaseBarrier();
  void WaitBarrier(uint32_t gen);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  // Each on its own cache line: workers poll epoch_ while the caller polls pending_.
  alignas(64) std::atomic<uint32_t> epoch_{0};    // bumped once per Run (and at shutdown)
  alignas(64) std::atomic<int> sleepers_{0};      // workers blocked (or about to) on epoch_
  alignas(64) std::atomic<uint32_t> pending_{0};  // workers still running the current job
  std::atomic<bool> caller_sleeping_{false};
  alignas(64) std::atomic<uint32_t> barrier_arrived_{0};  // threads at the current Sync
  alignas(64) std::atomic<uint32_t> barrier_gen_{0};      // bumped when a Sync releases
  std::atomic<int> barrier_sleepers_{0};                  // threads blocked on barrier_gen_
  std::atomic<bool> stop_{false};
};

}  // namespace uf
