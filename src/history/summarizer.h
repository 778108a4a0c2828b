// Markdown a person can read, made from raw segments: summaries/<segment>.md with YAML front
// matter (time span, applications, counts) and sections (what happened, time per application,
// citations to the raw lines), rollups/<6-hour block>.md over them, and actions/<segment>.json
// (the normalised actions the skills miner counts, kept after the raw segment is deleted).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "history/segment_store.h"
#include "history/skills.h"

namespace uf::history {

constexpr double kRollupSeconds = 6 * 3600.0;

// A stretch of time in one window.
struct Stretch {
  double start = 0.0, end = 0.0;
  double active_seconds = 0.0;  // end - start less AFK time
  std::string app;              // "(blocked)" for a blocked window, "(desktop)" for none
  std::string title;
  int64_t keys = 0, clicks = 0;
  int64_t first_line = 0, last_line = 0;  // the raw lines it was made from
};

struct SegmentSummary {
  std::string name;
  double start = 0.0, end = 0.0;  // what the events cover
  std::vector<Stretch> stretches;
  std::map<std::string, double> app_seconds;  // active time per application
  double afk_seconds = 0.0;
  int64_t keys = 0, clicks = 0;
  SegmentCounts counts;
  std::vector<TimedAction> actions;
};

// now bounds a segment still being recorded.
SegmentSummary SummarizeSegment(const std::string& name, double start,
                                const std::vector<EventLine>& events, const SegmentCounts& counts,
                                double now);
// prose (may be empty) is the model's summary, added as its own section.
std::string SegmentMarkdown(const SegmentSummary& s, const std::string& prose);
std::string RollupMarkdown(double block_start, const std::vector<SegmentSummary>& segments);
// The deterministic facts of a segment as plain lines: what the model summarises.
std::string SegmentDigest(const SegmentSummary& s);

// Writes a prose summary of a digest (the engine, in the CLI).
using ProseWriter = std::function<StatusOr<std::string>(const std::string& digest)>;

struct SummarizeReport {
  int segments = 0;  // summaries written
  int rollups = 0;
};
// Summarises every raw segment in dir whose summary is missing or older than its events, and
// rewrites the rollups those segments fall in. prose may be null (deterministic sections only).
StatusOr<SummarizeReport> SummarizeAll(const std::string& dir, double now,
                                       const ProseWriter& prose);

}  // namespace uf::history
