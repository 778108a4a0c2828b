#include "history/event.h"

namespace uf::history {

namespace {
constexpr EventKind kKinds[] = {EventKind::kWindow, EventKind::kInput, EventKind::kAfk,
                                EventKind::kFocus, EventKind::kStatus};
}  // namespace

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kWindow:
      return "window";
    case EventKind::kInput:
      return "input";
    case EventKind::kAfk:
      return "afk";
    case EventKind::kFocus:
      return "focus";
    case EventKind::kStatus:
      return "status";
  }
  return "status";
}

nlohmann::json EventToJson(const Event& e) {
  nlohmann::json j = {{"ts", e.ts}, {"kind", EventKindName(e.kind)}};
  switch (e.kind) {
    case EventKind::kWindow:
      if (e.blocked) {
        j["blocked"] = true;
      } else {
        j["app"] = e.app;
        j["title"] = e.title;
        j["role"] = e.role;
      }
      break;
    case EventKind::kInput:
      j["duration"] = e.duration;
      j["keys"] = e.keys;
      j["clicks"] = e.clicks;
      break;
    case EventKind::kAfk:
      j["afk"] = e.afk;
      break;
    case EventKind::kFocus:
      j["app"] = e.app;
      j["role"] = e.role;
      j["name"] = e.name;
      if (!e.text.empty()) j["text"] = e.text;
      break;
    case EventKind::kStatus:
      j["state"] = e.state;
      break;
  }
  return j;
}

StatusOr<Event> EventFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgumentError("an event must be a JSON object");
  if (!j.contains("ts") || !j["ts"].is_number()) return InvalidArgumentError("event without ts");
  if (!j.contains("kind") || !j["kind"].is_string()) {
    return InvalidArgumentError("event without kind");
  }
  Event e;
  e.ts = j["ts"].get<double>();
  const std::string kind = j["kind"].get<std::string>();
  bool known = false;
  for (EventKind k : kKinds) {
    if (EventKindName(k) == kind) {
      e.kind = k;
      known = true;
    }
  }
  if (!known) return InvalidArgumentError("unknown event kind '" + kind + "'");
  auto str = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  e.app = str("app");
  e.title = str("title");
  e.role = str("role");
  e.name = str("name");
  e.text = str("text");
  e.state = str("state");
  e.duration = num("duration");
  e.keys = static_cast<int64_t>(num("keys"));
  e.clicks = static_cast<int64_t>(num("clicks"));
  auto flag = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_boolean() && it->get<bool>();
  };
  e.afk = flag("afk");
  e.blocked = flag("blocked");
  return e;
}

}  // namespace uf::history
