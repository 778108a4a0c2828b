#include "base/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace uf {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spin iterations before a worker falls back to the condition variable. Roughly 50-100 us.
constexpr int kSpinIterations = 20000;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    epoch_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0, n_threads_);
  while (pending_.load(std::memory_order_acquire) != 0) CpuRelax();
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, int64_t align,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  align = std::max<int64_t>(1, align);
  const int64_t units = (n + align - 1) / align;
  Run([&](int i, int nt) {
    const int64_t per = (units + nt - 1) / nt;
    const int64_t begin = std::min(n, i * per * align);
    const int64_t end = std::min(n, (i + 1) * per * align);
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t e = epoch_.load(std::memory_order_acquire);
    for (int spin = 0; e == seen && spin < kSpinIterations; ++spin) {
      CpuRelax();
      e = epoch_.load(std::memory_order_acquire);
    }
    if (e == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return epoch_.load(std::memory_order_acquire) != seen; });
      e = epoch_.load(std::memory_order_acquire);
    }
    seen = e;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace uf
