// Focused controls through AT-SPI2 (`history record --atspi`): the role and accessible name of
// the control that takes the focus, and its application. A control's text is never read: only
// whether it holds any, which is written as "[masked]"; password controls are dropped by the
// PrivacyFilter before anything is written. AT-SPI talks D-Bus on a local Unix socket.
#pragma once

#include <memory>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "history/event.h"

namespace uf::history {

// Whether this build has AT-SPI2 (libatspi2.0-dev was found).
bool AtspiBuilt();

class FocusWatcher {
 public:
  // Listens for focus changes on its own thread. Unavailable without an accessibility bus.
  static StatusOr<std::unique_ptr<FocusWatcher>> Start(const Clock* clock);
  virtual ~FocusWatcher() = default;
  // Moves the kFocus events seen since the last call to *out.
  virtual void Drain(std::vector<Event>* out) = 0;
};

}  // namespace uf::history
