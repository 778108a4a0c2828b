#include "history/summarizer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/log.h"

namespace uf::history {

namespace fs = std::filesystem;

namespace {

std::string Clock(double t) { return IsoTime(t).substr(11, 8); }

// "1 click", "2 clicks".
std::string Count(int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string Duration(double seconds) {
  const int64_t s = std::llround(std::max(0.0, seconds));
  std::ostringstream out;
  if (s >= 3600)
    out << s / 3600 << "h " << (s % 3600) / 60 << "m";
  else if (s >= 60)
    out << s / 60 << "m " << s % 60 << "s";
  else
    out << s << "s";
  return out.str();
}

// A JSON string is a valid YAML flow scalar: titles and names cannot break the front matter.
std::string Quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Window titles inside Markdown: one line, no markup of their own.
std::string Plain(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n' || c == '\r')
      out += ' ';
    else if (c == '*' || c == '_' || c == '`' || c == '[' || c == ']' || c == '<' || c == '>' ||
             c == '|' || c == '\\')
      out += std::string("\\") + c;
    else
      out += c;
  }
  return out;
}

std::vector<std::pair<std::string, double>> ByTime(const std::map<std::string, double>& m) {
  std::vector<std::pair<std::string, double>> v(m.begin(), m.end());
  // Longest first; equal times by name, so the same history always reads the same.
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  return v;
}

std::string AppList(const std::map<std::string, double>& m) {
  std::string s = "[";
  bool first = true;
  for (const auto& [app, seconds] : ByTime(m)) {
    s += (first ? "" : ", ") + Quoted(app);
    first = false;
  }
  return s + "]";
}

double MTime(const fs::path& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return -1;
  return st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
}

}  // namespace

SegmentSummary SummarizeSegment(const std::string& name, double start,
                                const std::vector<EventLine>& events, const SegmentCounts& counts,
                                double now) {
  SegmentSummary s;
  s.name = name;
  s.start = start;
  s.counts = counts;
  s.actions = ActionsFromEvents(events);
  const double segment_end = std::min(start + kSegmentSeconds, std::max(start, now));
  bool open = false;  // a stretch is running
  bool afk = false;
  double afk_since = 0.0;
  double last = start;
  auto accrue = [&](double t) {
    t = std::clamp(t, start, segment_end);
    if (open && !afk && t > last) s.stretches.back().active_seconds += t - last;
    if (t > last) last = t;
  };
  auto close = [&](double t) {
    accrue(t);
    if (open) s.stretches.back().end = std::clamp(t, start, segment_end);
    open = false;
  };
  double first_ts = segment_end;
  for (const EventLine& line : events) {
    const Event& e = line.event;
    first_ts = std::min(first_ts, std::max(e.ts, start));
    switch (e.kind) {
      case EventKind::kWindow: {
        close(e.ts);
        Stretch st;
        st.start = std::clamp(e.ts, start, segment_end);
        st.app = e.blocked ? "(blocked)" : e.app.empty() ? "(desktop)" : e.app;
        st.title = e.blocked ? "" : e.title;
        st.first_line = st.last_line = line.line;
        s.stretches.push_back(std::move(st));
        open = true;
        break;
      }
      case EventKind::kInput:
        s.keys += e.keys;
        s.clicks += e.clicks;
        if (open) {
          s.stretches.back().keys += e.keys;
          s.stretches.back().clicks += e.clicks;
          s.stretches.back().last_line = line.line;
        }
        break;
      case EventKind::kAfk:
        accrue(e.ts);
        if (e.afk && !afk) {
          afk = true;
          afk_since = std::clamp(e.ts, start, segment_end);
        } else if (!e.afk && afk) {
          afk = false;
          s.afk_seconds += std::clamp(e.ts, start, segment_end) - afk_since;
        }
        if (open) s.stretches.back().last_line = line.line;
        break;
      case EventKind::kFocus:
        if (open) s.stretches.back().last_line = line.line;
        break;
      case EventKind::kStatus:
        // The recorder stopped or lost the display: nothing is known until it is back.
        if (e.state != "started" && e.state != "display_back") close(e.ts);
        if (afk) {
          s.afk_seconds += std::clamp(e.ts, start, segment_end) - afk_since;
          afk = false;
        }
        last = std::max(last, std::clamp(e.ts, start, segment_end));
        break;
    }
  }
  close(segment_end);
  if (afk) s.afk_seconds += segment_end - afk_since;
  s.start = events.empty() ? start : first_ts;
  // A segment the recorder stopped in ends there, not at its 10-minute boundary.
  const bool stopped =
      !events.empty() && events.back().event.kind == EventKind::kStatus &&
      (events.back().event.state == "stopped" || events.back().event.state == "display_lost");
  s.end = stopped ? std::clamp(events.back().event.ts, start, segment_end) : segment_end;
  for (const Stretch& st : s.stretches) s.app_seconds[st.app] += st.active_seconds;
  return s;
}

std::string SegmentMarkdown(const SegmentSummary& s, const std::string& prose) {
  const std::string raw = "../segments/" + s.name + "/events.jsonl";
  std::ostringstream md;
  md << "---\n";
  md << "segment: " << s.name << "\n";
  md << "start: " << IsoTime(s.start) << "\n";
  md << "end: " << IsoTime(s.end) << "\n";
  md << "applications: " << AppList(s.app_seconds) << "\n";
  md << "keys: " << s.keys << "\n";
  md << "clicks: " << s.clicks << "\n";
  md << "afk_seconds: " << std::llround(s.afk_seconds) << "\n";
  md << "captured: " << s.counts.captured << "\n";
  md << "blocked: " << s.counts.blocked << "\n";
  md << "suppressed: " << s.counts.suppressed << "\n";
  md << "source: segments/" << s.name << "/events.jsonl\n";
  md << "---\n\n";
  md << "# " << IsoTime(s.start).substr(0, 10) << " " << Clock(s.start) << "–" << Clock(s.end)
     << " UTC\n\n";
  if (!prose.empty()) md << "## Summary\n\n" << prose << "\n\n";
  md << "## What happened\n\n";
  int shown = 0;
  for (const Stretch& st : s.stretches) {
    if (st.end - st.start < 1.0 && st.keys == 0 && st.clicks == 0) continue;
    ++shown;
    md << "- " << Clock(st.start) << "–" << Clock(st.end) << " **" << Plain(st.app) << "**";
    if (!st.title.empty()) md << " — " << Plain(st.title);
    md << " (" << Duration(st.active_seconds) << " active";
    if (st.keys > 0) md << ", " << Count(st.keys, "key");
    if (st.clicks > 0) md << ", " << Count(st.clicks, "click");
    md << ") [L" << st.first_line;
    if (st.last_line != st.first_line) md << "–L" << st.last_line;
    md << "](" << raw << "#L" << st.first_line << ")\n";
  }
  if (shown == 0) md << "- nothing recorded\n";
  if (s.afk_seconds >= 1.0)
    md << "- away from the keyboard for " << Duration(s.afk_seconds) << "\n";
  md << "\n## Time per application\n\n| application | active time |\n|---|---|\n";
  for (const auto& [app, seconds] : ByTime(s.app_seconds)) {
    md << "| " << Plain(app) << " | " << Duration(seconds) << " |\n";
  }
  md << "\n## Sources\n\n- raw events: ["
     << "segments/" << s.name << "/events.jsonl](" << raw << ") (" << s.counts.captured
     << " captured, " << s.counts.blocked << " blocked, " << s.counts.suppressed
     << " suppressed; deleted after the retention period)\n";
  return md.str();
}

std::string SegmentDigest(const SegmentSummary& s) {
  std::ostringstream d;
  d << "From " << Clock(s.start) << " to " << Clock(s.end) << " UTC:\n";
  for (const Stretch& st : s.stretches) {
    if (st.end - st.start < 1.0 && st.keys == 0 && st.clicks == 0) continue;
    d << "- " << Clock(st.start) << " " << st.app;
    if (!st.title.empty()) d << " \"" << st.title << "\"";
    d << ", " << Duration(st.active_seconds) << ", " << st.keys << " keys, " << st.clicks
      << " clicks\n";
  }
  if (s.afk_seconds >= 1.0) d << "- away for " << Duration(s.afk_seconds) << "\n";
  return d.str();
}

std::string RollupMarkdown(double block_start, const std::vector<SegmentSummary>& segments) {
  std::map<std::string, double> apps;
  int64_t keys = 0, clicks = 0;
  double afk = 0;
  for (const SegmentSummary& s : segments) {
    for (const auto& [app, seconds] : s.app_seconds) apps[app] += seconds;
    keys += s.keys;
    clicks += s.clicks;
    afk += s.afk_seconds;
  }
  std::ostringstream md;
  md << "---\n";
  md << "rollup: " << SegmentName(block_start) << "\n";
  md << "start: " << IsoTime(block_start) << "\n";
  md << "end: " << IsoTime(block_start + kRollupSeconds) << "\n";
  md << "applications: " << AppList(apps) << "\n";
  md << "segments: " << segments.size() << "\n";
  md << "keys: " << keys << "\n";
  md << "clicks: " << clicks << "\n";
  md << "afk_seconds: " << std::llround(afk) << "\n";
  md << "---\n\n";
  md << "# " << IsoTime(block_start).substr(0, 10) << " " << Clock(block_start) << "–"
     << Clock(block_start + kRollupSeconds - 1) << " UTC\n\n";
  md << "## Time per application\n\n| application | active time |\n|---|---|\n";
  for (const auto& [app, seconds] : ByTime(apps)) {
    md << "| " << Plain(app) << " | " << Duration(seconds) << " |\n";
  }
  md << "\n## Segments\n\n";
  for (const SegmentSummary& s : segments) {
    const auto top = ByTime(s.app_seconds);
    md << "- [" << Clock(s.start) << "–" << Clock(s.end) << "](../summaries/" << s.name << ".md)";
    if (!top.empty()) md << ": mostly " << Plain(top.front().first);
    md << " (" << Count(s.keys, "key") << ", " << Count(s.clicks, "click") << ")\n";
  }
  return md.str();
}

StatusOr<SummarizeReport> SummarizeAll(const std::string& dir, double now,
                                       const ProseWriter& prose) {
  UF_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments, ListSegments(dir));
  for (const char* sub : {"/summaries", "/rollups", "/actions"}) {
    UF_RETURN_IF_ERROR(EnsurePrivateDir(dir + sub));
  }
  SummarizeReport report;
  std::map<double, std::vector<SegmentSummary>> blocks;
  std::set<double> touched;
  for (const SegmentInfo& seg : segments) {
    int64_t bad = 0;
    auto events = ReadEvents(seg.path, &bad);
    if (!events.ok()) continue;  // a folder without events yet
    if (bad > 0) {
      UF_LOG(WARNING) << "history: " << bad << " unreadable lines skipped in " << seg.path;
    }
    auto counts = ReadCounts(seg.path);
    SegmentSummary s = SummarizeSegment(seg.name, seg.start, *events,
                                        counts.ok() ? *counts : SegmentCounts{}, now);
    const fs::path md = fs::path(dir) / "summaries" / (seg.name + ".md");
    const double block = std::floor(seg.start / kRollupSeconds) * kRollupSeconds;
    if (MTime(md) < MTime(fs::path(seg.path) / "events.jsonl")) {
      std::string text;
      if (prose) {
        auto written = prose(SegmentDigest(s));
        if (!written.ok()) return written.status();
        text = *written;
      }
      UF_RETURN_IF_ERROR(WritePrivateFile(md.string(), SegmentMarkdown(s, text)));
      UF_RETURN_IF_ERROR(WritePrivateFile(dir + "/actions/" + seg.name + ".json",
                                          ActionsToJson(s.actions).dump() + "\n"));
      ++report.segments;
      touched.insert(block);
    }
    blocks[block].push_back(std::move(s));
  }
  for (double block : touched) {
    UF_RETURN_IF_ERROR(WritePrivateFile(dir + "/rollups/" + SegmentName(block) + ".md",
                                        RollupMarkdown(block, blocks[block])));
    ++report.rollups;
  }
  return report;
}

}  // namespace uf::history
