#include "history/recorder.h"

#include <algorithm>
#include <thread>

#include "base/log.h"

namespace uf::history {

namespace {
constexpr double kTickSeconds = 1.0;  // input counts and AFK are decided once a second
constexpr double kPurgeEverySeconds = 60.0;

bool SameWindow(const Event& a, const Event& b) {
  return a.blocked == b.blocked && a.app == b.app && a.title == b.title && a.role == b.role;
}
}  // namespace

Recorder::Recorder(RecorderOptions options, CollectorFactory connect, const PrivacyFilter* filter,
                   SegmentWriter* writer, const Clock* clock)
    : options_(options),
      connect_(std::move(connect)),
      filter_(filter),
      writer_(writer),
      clock_(clock) {}

Status Recorder::Write(Event e) {
  const Verdict v = filter_->Apply(&e);
  if (e.kind == EventKind::kWindow) {
    if (have_window_ && SameWindow(window_, e)) return OkStatus();
    window_ = e;
    window_verdict_ = v;
    have_window_ = true;
  }
  return writer_->Write(e, v);
}

Status Recorder::Flush(double now) {
  if (keys_ > 0 || clicks_ > 0) {
    Event e;
    e.kind = EventKind::kInput;
    e.ts = counts_since_;
    e.duration = std::max(0.0, now - counts_since_);
    e.keys = keys_;
    e.clicks = clicks_;
    UF_RETURN_IF_ERROR(Write(std::move(e)));
  }
  keys_ = clicks_ = 0;
  counts_since_ = now;
  return writer_->Sync();
}

Status Recorder::Tick(Collector* c, double now) {
  // A new segment starts with the window still active, so each segment reads on its own.
  if (have_window_ && writer_->segment_start() >= 0 &&
      SegmentStart(now) != writer_->segment_start()) {
    Event again = window_;
    again.ts = SegmentStart(now);
    UF_RETURN_IF_ERROR(writer_->Write(again, window_verdict_));
    if (afk_) {
      Event away;
      away.kind = EventKind::kAfk;
      away.ts = again.ts;
      away.afk = true;
      UF_RETURN_IF_ERROR(writer_->Write(away, Verdict::kKeep));
    }
  }
  UF_RETURN_IF_ERROR(Flush(now));
  if (c != nullptr) {
    auto idle = c->IdleSeconds();
    if (idle.ok()) {
      const bool afk = *idle >= options_.afk_after_s;
      if (afk != afk_) {
        Event e;
        e.kind = EventKind::kAfk;
        e.afk = afk;
        // AFK began at the last input; it ended now.
        e.ts = afk ? now - *idle : now;
        UF_RETURN_IF_ERROR(Write(std::move(e)));
        afk_ = afk;
      }
    }
  }
  if (now - last_purge_ >= kPurgeEverySeconds) {
    last_purge_ = now;
    auto removed = PurgeExpired(writer_->dir(), now, options_.retention_s);
    if (!removed.ok()) return removed.status();
  }
  return OkStatus();
}

Status Recorder::Run(const std::atomic<bool>* stop) {
  const double started = clock_->Now();
  auto done = [&] {
    return (stop != nullptr && stop->load()) ||
           (options_.run_for_s > 0 && clock_->Now() - started >= options_.run_for_s);
  };
  UF_ASSIGN_OR_RETURN(std::unique_ptr<Collector> collector, connect_());
  auto status_event = [&](const char* state) {
    Event e;
    e.kind = EventKind::kStatus;
    e.ts = clock_->Now();
    e.state = state;
    return Write(std::move(e));
  };
  UF_RETURN_IF_ERROR(status_event("started"));
  counts_since_ = clock_->Now();
  double next_tick = counts_since_ + kTickSeconds;
  std::vector<Event> events;
  while (!done()) {
    if (collector == nullptr) {
      // The display went away: wait for it, without spinning.
      std::this_thread::sleep_for(std::chrono::duration<double>(options_.reconnect_interval_s));
      auto again = connect_();
      if (!again.ok()) continue;
      collector = std::move(again).value();
      have_window_ = false;
      afk_ = false;
      UF_RETURN_IF_ERROR(status_event("display_back"));
      next_tick = clock_->Now() + kTickSeconds;
      continue;
    }
    events.clear();
    const double wait = std::clamp(next_tick - clock_->Now(), 0.0, kTickSeconds);
    const Status polled = collector->Poll(wait, &events);
    for (Event& e : events) {
      if (e.kind == EventKind::kInput) {
        keys_ += e.keys;
        clicks_ += e.clicks;
      } else {
        UF_RETURN_IF_ERROR(Write(std::move(e)));
      }
    }
    if (!polled.ok()) {
      UF_LOG(WARNING) << "history record: " << polled.ToString() << "; waiting for it to return";
      UF_RETURN_IF_ERROR(Flush(clock_->Now()));
      collector.reset();
      UF_RETURN_IF_ERROR(status_event("display_lost"));
      continue;
    }
    const double now = clock_->Now();
    if (now >= next_tick) {
      UF_RETURN_IF_ERROR(Tick(collector.get(), now));
      next_tick = now + kTickSeconds;
    }
  }
  UF_RETURN_IF_ERROR(Flush(clock_->Now()));
  return status_event("stopped");
}

}  // namespace uf::history
