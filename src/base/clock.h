// Monotonic time. Code that schedules takes a Clock* so tests can inject a FakeClock.
#pragma once

#include <chrono>
#include <cstdint>

namespace uf {

// Seconds since an arbitrary epoch, monotonic.
inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() const = 0;  // seconds, monotonic
};

class SystemClock final : public Clock {
 public:
  double Now() const override { return NowSeconds(); }
};

class FakeClock final : public Clock {
 public:
  double Now() const override { return now_; }
  void Advance(double seconds) { now_ += seconds; }
  void Set(double seconds) { now_ = seconds; }

 private:
  double now_ = 0.0;
};

}  // namespace uf
