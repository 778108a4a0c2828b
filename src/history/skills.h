// Workflows that repeat, offered as Skills: events become actions (application, window role,
// verb), sessions split at idle gaps, and contiguous action n-grams (n = 3..8) are counted by
// the days they were seen on. A sequence seen on at least 3 different days is offered as a
// SKILL.md draft; nothing becomes a skill until the person confirms it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "history/segment_store.h"

namespace uf::history {

struct Action {
  std::string app;   // WM_CLASS
  std::string role;  // window role or focused control role
  std::string verb;  // switch, type, click, focus
  bool operator==(const Action&) const = default;
  bool operator<(const Action& o) const {
    return std::tie(app, role, verb) < std::tie(o.app, o.role, o.verb);
  }
};

struct TimedAction {
  double ts = 0.0;
  Action action;
};

// The actions of a segment's events, repeats of the same action collapsed. Blocked windows and
// the recorder's own events are gaps: they end a session.
std::vector<TimedAction> ActionsFromEvents(const std::vector<EventLine>& events);
nlohmann::json ActionsToJson(const std::vector<TimedAction>& actions);
std::vector<TimedAction> ActionsFromJson(const nlohmann::json& j);

struct SkillOptions {
  double idle_gap_s = 300.0;  // a pause this long starts a new session
  int min_n = 3, max_n = 8;
  int min_days = 3;
  int max_offers = 10;
};

struct SkillOffer {
  std::string name;  // a slug: what SKILL.md's folder is called
  std::vector<Action> steps;
  std::vector<std::string> days;  // UTC dates it was seen on
  int64_t occurrences = 0;
};

// Sequences seen on at least min_days days, longest first among those seen equally often; a
// sequence inside a longer offered one seen on as many days is not offered again.
std::vector<SkillOffer> MineSkills(const std::vector<TimedAction>& actions,
                                   const SkillOptions& options);
std::string SkillMarkdown(const SkillOffer& offer);

}  // namespace uf::history
