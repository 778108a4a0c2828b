// What the activity recorder writes: one JSON object per line of a segment's events.jsonl. No
// event carries keystrokes or typed text; input is counted, never captured.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace uf::history {

enum class EventKind {
  kWindow,  // the active window changed (or its title did): app, title, role
  kInput,   // keys and clicks counted over [ts, ts + duration)
  kAfk,     // afk turned on (no input for the AFK threshold) or off
  kFocus,   // a focused control (AT-SPI or injected): role, name; its text is masked
  kStatus,  // the recorder itself: started, stopped, display_lost, display_back
};

struct Event {
  EventKind kind = EventKind::kStatus;
  double ts = 0.0;        // unix seconds
  double duration = 0.0;  // kInput: the interval the counts cover
  std::string app;        // kWindow / kFocus: WM_CLASS class (the application)
  std::string title;      // kWindow: _NET_WM_NAME, else WM_NAME
  std::string role;       // kWindow: WM_WINDOW_ROLE or window type; kFocus: the control's role
  std::string name;       // kFocus: the control's accessible name
  std::string text;       // kFocus: typed text; PrivacyFilter masks it before anything is written
  std::string state;      // kStatus: what happened to the recorder
  int64_t keys = 0;       // kInput
  int64_t clicks = 0;     // kInput
  bool afk = false;       // kAfk
  bool blocked = false;   // kWindow: a block list matched; app, title and role are blank
};

std::string_view EventKindName(EventKind kind);
nlohmann::json EventToJson(const Event& e);
// InvalidArgument naming what is wrong for lines that are not events.
StatusOr<Event> EventFromJson(const nlohmann::json& j);

}  // namespace uf::history
