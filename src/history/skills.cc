#include "history/skills.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

namespace uf::history {

namespace {

// A gap marker: the recorder stopped, AFK began, or a blocked window was active.
Action Gap() { return Action{}; }
bool IsGap(const Action& a) { return a.verb.empty(); }

std::string Day(double ts) { return IsoTime(ts).substr(0, 10); }

std::string Slug(const std::vector<Action>& steps) {
  std::string s;
  std::set<std::string> seen;
  for (const Action& a : steps) {
    if (!seen.insert(a.app).second) continue;
    if (!s.empty()) s += "-";
    for (char c : a.app) {
      const unsigned char u = static_cast<unsigned char>(c);
      s += std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '-';
    }
  }
  return (s.empty() ? std::string("workflow") : s) + "-" + std::to_string(steps.size()) + "-steps";
}

std::string Describe(const Action& a) {
  const std::string where = "**" + (a.app.empty() ? std::string("(unknown)") : a.app) + "**";
  const std::string role = a.role.empty() ? "" : " (" + a.role + ")";
  if (a.verb == "switch") return "Switch to " + where + role;
  if (a.verb == "type") return "Type in " + where + role;
  if (a.verb == "click") return "Click in " + where + role;
  if (a.verb == "focus") return "Focus a " + (a.role.empty() ? "control" : a.role) + " in " + where;
  return a.verb + " " + where + role;
}

}  // namespace

std::vector<TimedAction> ActionsFromEvents(const std::vector<EventLine>& events) {
  std::vector<TimedAction> out;
  auto push = [&](double ts, Action a) {
    if (!out.empty() && out.back().action == a) return;
    out.push_back({ts, std::move(a)});
  };
  Action window = Gap();
  for (const EventLine& line : events) {
    const Event& e = line.event;
    switch (e.kind) {
      case EventKind::kWindow:
        if (e.blocked || (e.app.empty() && e.title.empty())) {
          window = Gap();
          push(e.ts, Gap());
        } else {
          window = {e.app, e.role, "switch"};
          push(e.ts, window);
        }
        break;
      case EventKind::kInput:
        if (IsGap(window)) break;
        if (e.clicks > 0) push(e.ts, {window.app, window.role, "click"});
        if (e.keys > 0) push(e.ts, {window.app, window.role, "type"});
        break;
      case EventKind::kFocus:
        push(e.ts, {e.app, e.role, "focus"});
        break;
      case EventKind::kAfk:
        if (e.afk) push(e.ts, Gap());
        break;
      case EventKind::kStatus:
        window = Gap();
        push(e.ts, Gap());
        break;
    }
  }
  return out;
}

nlohmann::json ActionsToJson(const std::vector<TimedAction>& actions) {
  nlohmann::json j = nlohmann::json::array();
  for (const TimedAction& t : actions) {
    j.push_back(
        {{"ts", t.ts}, {"app", t.action.app}, {"role", t.action.role}, {"verb", t.action.verb}});
  }
  return j;
}

std::vector<TimedAction> ActionsFromJson(const nlohmann::json& j) {
  std::vector<TimedAction> out;
  if (!j.is_array()) return out;
  for (const nlohmann::json& a : j) {
    if (!a.is_object() || !a.contains("ts") || !a["ts"].is_number()) continue;
    auto str = [&](const char* key) {
      auto it = a.find(key);
      return it != a.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    out.push_back({a["ts"].get<double>(), {str("app"), str("role"), str("verb")}});
  }
  return out;
}

std::vector<SkillOffer> MineSkills(const std::vector<TimedAction>& actions_in,
                                   const SkillOptions& o) {
  std::vector<TimedAction> actions = actions_in;
  std::stable_sort(actions.begin(), actions.end(),
                   [](const TimedAction& a, const TimedAction& b) { return a.ts < b.ts; });
  // Sessions: runs of actions without a gap marker or an idle pause.
  std::vector<std::vector<const TimedAction*>> sessions(1);
  double last = -1e300;
  for (const TimedAction& t : actions) {
    if (IsGap(t.action) || t.ts - last > o.idle_gap_s) {
      if (!sessions.back().empty()) sessions.emplace_back();
    }
    last = t.ts;
    if (!IsGap(t.action)) sessions.back().push_back(&t);
  }
  struct Seen {
    std::set<std::string> days;
    int64_t occurrences = 0;
  };
  std::map<std::vector<Action>, Seen> grams;
  for (const auto& session : sessions) {
    for (size_t i = 0; i < session.size(); ++i) {
      std::vector<Action> gram;
      for (size_t n = 1; n <= static_cast<size_t>(o.max_n) && i + n <= session.size(); ++n) {
        gram.push_back(session[i + n - 1]->action);
        if (n < static_cast<size_t>(o.min_n)) continue;
        Seen& s = grams[gram];
        s.days.insert(Day(session[i]->ts));
        ++s.occurrences;
      }
    }
  }
  std::vector<SkillOffer> offers;
  for (const auto& [steps, seen] : grams) {
    if (static_cast<int>(seen.days.size()) < o.min_days) continue;
    // One application doing one thing over and over is not a workflow.
    std::set<Action> distinct(steps.begin(), steps.end());
    if (distinct.size() < 2) continue;
    offers.push_back({Slug(steps), steps, {seen.days.begin(), seen.days.end()}, seen.occurrences});
  }
  std::sort(offers.begin(), offers.end(), [](const SkillOffer& a, const SkillOffer& b) {
    if (a.days.size() != b.days.size()) return a.days.size() > b.days.size();
    if (a.steps.size() != b.steps.size()) return a.steps.size() > b.steps.size();
    return a.steps < b.steps;
  });
  // Drop sequences contained in an offer already kept that was seen on at least as many days.
  std::vector<SkillOffer> kept;
  for (SkillOffer& offer : offers) {
    bool inside = false;
    for (const SkillOffer& k : kept) {
      if (k.days.size() < offer.days.size()) continue;
      if (std::search(k.steps.begin(), k.steps.end(), offer.steps.begin(), offer.steps.end()) !=
          k.steps.end()) {
        inside = true;
        break;
      }
    }
    if (!inside) kept.push_back(std::move(offer));
    if (static_cast<int>(kept.size()) >= o.max_offers) break;
  }
  // Names must be unique folder names.
  std::map<std::string, int> used;
  for (SkillOffer& k : kept) {
    const int n = used[k.name]++;
    if (n > 0) k.name += "-" + std::to_string(n + 1);
  }
  return kept;
}

std::string SkillMarkdown(const SkillOffer& offer) {
  std::ostringstream md;
  std::string first_days;
  for (const std::string& d : offer.days) first_days += (first_days.empty() ? "" : ", ") + d;
  md << "---\n";
  md << "name: " << offer.name << "\n";
  md << "description: "
     << nlohmann::json(Describe(offer.steps.front()) + ", then " +
                       std::to_string(offer.steps.size() - 1) + " more steps; a workflow seen on " +
                       std::to_string(offer.days.size()) + " days")
            .dump()
     << "\n";
  md << "status: draft\n";
  md << "---\n\n";
  md << "# " << offer.name << "\n\n";
  md << "A draft found in your Computer History: this sequence was seen " << offer.occurrences
     << " times on " << offer.days.size() << " different days (" << first_days
     << "). It becomes a skill only when you confirm it "
        "(`ultrafast history skills --confirm "
     << offer.name << "`); delete the draft to dismiss it.\n\n";
  md << "## Steps\n\n";
  for (size_t i = 0; i < offer.steps.size(); ++i) {
    md << i + 1 << ". " << Describe(offer.steps[i]) << "\n";
  }
  return md.str();
}

}  // namespace uf::history
