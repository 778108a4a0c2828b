// The raw event store: DIR/segments/<UTC start>/events.jsonl, one 10-minute segment per folder,
// beside counts.json (events captured, blocked and suppressed in it). Folders are 0700 and files
// 0600 whatever the umask. Raw segments are deleted once older than the retention (48 hours by
// default); summaries, rollups and action lists made from them are kept until `purge --all`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "history/event.h"
#include "history/privacy.h"

namespace uf::history {

constexpr double kSegmentSeconds = 600.0;
constexpr double kDefaultRetentionSeconds = 48 * 3600.0;

// "20261204T102000Z" for the segment starting at unix time start (UTC), and back.
std::string SegmentName(double start);
StatusOr<double> ParseSegmentName(std::string_view name);
// The start of the segment holding unix time t.
double SegmentStart(double t);
// "2026-12-04T10:20:00Z".
std::string IsoTime(double t);

// Creates path (and parents) and sets it to 0700. With fix_existing false a folder that was
// already there keeps its mode: the history folder may be one the person chose (their home),
// whose mode is theirs to set; the folders inside it are the history's own.
Status EnsurePrivateDir(const std::string& path, bool fix_existing = true);
// Writes content to path through a 0600 temporary file renamed over it.
Status WritePrivateFile(const std::string& path, const std::string& content);

struct SegmentCounts {
  int64_t captured = 0;    // events written as recorded
  int64_t blocked = 0;     // windows a block list matched, written as blank placeholders
  int64_t suppressed = 0;  // events not written at all (password controls, blocked controls)
};

class SegmentWriter {
 public:
  // dir is the history folder (created 0700).
  static StatusOr<std::unique_ptr<SegmentWriter>> Open(const std::string& dir);
  ~SegmentWriter();

  // Appends e to the segment holding e.ts as the verdict says, and updates its counts. The
  // line is written with one write(2): a crash of the recorder loses nothing already written.
  Status Write(const Event& e, Verdict verdict);
  // fdatasync of the open segment: what the recorder calls once a second.
  Status Sync();
  // Start of the open segment; < 0 before the first Write.
  double segment_start() const { return start_; }
  const std::string& dir() const { return dir_; }

 private:
  explicit SegmentWriter(std::string dir) : dir_(std::move(dir)) {}
  Status SwitchTo(double start);

  std::string dir_;
  int fd_ = -1;
  double start_ = -1.0;
  SegmentCounts counts_;
  bool dirty_ = false;
};

struct SegmentInfo {
  std::string name;  // folder name, SegmentName(start)
  double start = 0.0;
  std::string path;  // the folder
};
// Segments in dir, oldest first; folders with other names are ignored.
StatusOr<std::vector<SegmentInfo>> ListSegments(const std::string& dir);

struct EventLine {
  int64_t line = 0;  // 1-based line in events.jsonl, what citations point at
  Event event;
};
// The events of a segment folder; lines that do not parse are skipped and counted in *bad.
StatusOr<std::vector<EventLine>> ReadEvents(const std::string& segment_path, int64_t* bad);
StatusOr<SegmentCounts> ReadCounts(const std::string& segment_path);

// Deletes raw segments that ended more than retention_s before now; returns how many.
StatusOr<int> PurgeExpired(const std::string& dir, double now, double retention_s);
// Deletes everything the history commands wrote under dir (segments, summaries, rollups,
// actions, skills); files of other programs in dir are left alone.
Status PurgeAll(const std::string& dir);

}  // namespace uf::history
