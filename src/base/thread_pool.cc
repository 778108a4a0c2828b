#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>

#include "base/cpu_relax.h"

namespace uf {
namespace {

// Spin budgets, in SpinStep()s (a pause is ~40 ns here, a sched_yield 1-3 us). A worker polls
// for the next job for up to ~0.5-1 ms: longer than the gap between the matmuls of a decode step
// or between two decode steps, short enough that an idle pool sleeps almost at once. The caller
// polls for the workers' completion for a quarter of that: work is split evenly, so a long wait
// means a worker was preempted and the caller's core is better given away.
constexpr int kWorkerSpin = 1 << 13;
constexpr int kCallerSpin = 1 << 11;
constexpr int kYieldEvery = 32;

// One step of a spin-wait. Every kYieldEvery steps it also offers the core to another runnable
// thread: when the machine has fewer free cores than the pool has threads, the thread being
// waited for may be queued behind this one on the same core, and pure spinning would then cost
// a whole spin budget per Run (measured: ~0.1-1.3 ms per Run at load 10 on 2 cores).
inline void SpinStep(int spin) {
  if ((spin + 1) % kYieldEvery == 0) {
    sched_yield();
  } else {
    CpuRelax();
  }
}

// Waits until `value` differs from `old` and returns the new value: spins for kWorkerSpin steps,
// then sleeps on the futex, counted in `sleepers` so that the waker makes the system call only
// when someone sleeps (the seq_cst increment pairs with the waker's seq_cst bump and load).
uint32_t WaitForChange(std::atomic<uint32_t>& value, uint32_t old, std::atomic<int>& sleepers) {
  uint32_t v = value.load(std::memory_order_acquire);
  for (int spin = 0; v == old && spin < kWorkerSpin; ++spin) {
    SpinStep(spin);
    v = value.load(std::memory_order_acquire);
  }
  while (v == old) {
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    value.wait(old, std::memory_order_seq_cst);  // returns at once if the value moved
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    v = value.load(std::memory_order_acquire);
  }
  return v;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  epoch_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(static_cast<uint32_t>(n_threads_ - 1), std::memory_order_relaxed);
  // seq_cst pairs with the worker's sleepers_ increment before its futex wait: either we see
  // the sleeper and wake it, or it sees the new epoch and does not sleep.
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();

  fn(0, n_threads_);

  uint32_t left = pending_.load(std::memory_order_acquire);
  for (int spin = 0; left != 0 && spin < kCallerSpin; ++spin) {
    SpinStep(spin);
    left = pending_.load(std::memory_order_acquire);
  }
  while (left != 0) {
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    pending_.wait(left, std::memory_order_acquire);
    caller_sleeping_.store(false, std::memory_order_relaxed);
    left = pending_.load(std::memory_order_acquire);
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, int64_t align,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  align = std::max<int64_t>(1, align);
  const int64_t units = (n + align - 1) / align;
  if (n_threads_ == 1 || units == 1) {
    fn(0, n);
    return;
  }
  Run([&](int i, int nt) {
    // Balanced to within one unit: units * i / nt rather than a ceil-sized chunk, which could
    // leave the last threads idle.
    const int64_t begin = std::min(n, units * i / nt * align);
    const int64_t end = std::min(n, units * (i + 1) / nt * align);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::ReleaseBarrier() {
  // Reset before the release: no thread can arrive at the next Sync before it sees the new
  // generation. The acq_rel arrivals chain every thread's writes before its arrival into the
  // last one's, and this release publishes them (and the completion's) to the waiters.
  barrier_arrived_.store(0, std::memory_order_relaxed);
  barrier_gen_.fetch_add(1, std::memory_order_seq_cst);
  if (barrier_sleepers_.load(std::memory_order_seq_cst) > 0) barrier_gen_.notify_all();
}

void ThreadPool::WaitBarrier(uint32_t gen) {
  // The same spin-then-sleep as a worker waiting for a job: the steps between barriers of a
  // forward are microseconds apart, but a preempted peer must not cost a spinning core.
  WaitForChange(barrier_gen_, gen, barrier_sleepers_);
}

void ThreadPool::WorkerLoop(int index) {
  uint32_t seen = 0;
  for (;;) {
    seen = WaitForChange(epoch_, seen, sleepers_);
    if (stop_.load(std::memory_order_relaxed)) return;
    (*job_)(index, n_threads_);
    // The last worker to finish wakes the caller if it stopped spinning.
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      pending_.notify_one();
    }
  }
}

}  // namespace uf
