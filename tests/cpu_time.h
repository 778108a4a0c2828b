// CPU time of the calling thread, for tests that bound how much work something does ("no
// quadratic path"): unlike wall-clock time it does not grow when other processes share the cores.
#pragma once

#include <ctime>

namespace uf::testing_time {

inline double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

}  // namespace uf::testing_time
