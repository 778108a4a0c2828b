// The recording loop, independent of where events come from: a Collector (the X11 one, or a
// scripted one in tests) reports window changes, input counts and idle time; the Recorder
// applies the PrivacyFilter, counts input per second, turns idle time into AFK events, starts a
// new segment with the window that is still active, deletes expired segments, and survives the
// collector's display going away by reconnecting.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "history/event.h"
#include "history/privacy.h"
#include "history/segment_store.h"

namespace uf::history {

class Collector {
 public:
  virtual ~Collector() = default;
  // Waits up to timeout_s for activity and appends it to *out: kWindow events (the full state
  // of the newly active window), kInput events (counts since the last one; duration unused),
  // kFocus events. Unavailable once the display has gone away.
  virtual Status Poll(double timeout_s, std::vector<Event>* out) = 0;
  // Seconds since the last user input.
  virtual StatusOr<double> IdleSeconds() = 0;
};

// Connects a collector; Unavailable while there is nothing to connect to.
using CollectorFactory = std::function<StatusOr<std::unique_ptr<Collector>>()>;

struct RecorderOptions {
  double afk_after_s = 180.0;  // ActivityWatch's default
  double retention_s = kDefaultRetentionSeconds;
  double reconnect_interval_s = 2.0;
  double run_for_s = 0.0;  // stop after this long; 0 = until *stop
};

class Recorder {
 public:
  // clock->Now() is unix seconds. Everything must outlive the recorder.
  Recorder(RecorderOptions options, CollectorFactory connect, const PrivacyFilter* filter,
           SegmentWriter* writer, const Clock* clock);

  // Records until *stop (or run_for_s). Fails only if the first connection fails or the store
  // cannot be written; a display that goes away later is waited for.
  Status Run(const std::atomic<bool>* stop);

 private:
  Status Write(Event e);
  Status Tick(Collector* c, double now);
  Status Flush(double now);

  RecorderOptions options_;
  CollectorFactory connect_;
  const PrivacyFilter* filter_;
  SegmentWriter* writer_;
  const Clock* clock_;

  bool have_window_ = false;
  Event window_;  // the active window as written (blank if blocked)
  Verdict window_verdict_ = Verdict::kKeep;
  int64_t keys_ = 0, clicks_ = 0;
  double counts_since_ = 0.0;
  bool afk_ = false;
  double last_purge_ = -1e300;
};

}  // namespace uf::history
