// The X11 collector (xcb): the active window from PropertyNotify on the root's
// _NET_ACTIVE_WINDOW, its title (_NET_WM_NAME, else WM_NAME), application (WM_CLASS) and role
// (WM_WINDOW_ROLE, else _NET_WM_WINDOW_TYPE); key presses and clicks counted from XInput2 raw
// events, never which keys; idle time from MIT-SCREEN-SAVER. It opens one socket, the X
// connection, and nothing else.
#pragma once

#include <memory>
#include <string>

#include "base/clock.h"
#include "history/recorder.h"

namespace uf::history {

// Whether this build has the X11 collector (the xcb development packages were found).
bool X11CollectorBuilt();

// Connects to display (empty: $DISPLAY). Unavailable when the display cannot be opened or lacks
// XInput2 or MIT-SCREEN-SAVER. clock->Now() (unix seconds) stamps the events.
StatusOr<std::unique_ptr<Collector>> ConnectX11(const std::string& display, const Clock* clock);

}  // namespace uf::history
