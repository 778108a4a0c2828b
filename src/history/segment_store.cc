#include "history/segment_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace uf::history {

namespace fs = std::filesystem;

namespace {

Status Errno(const std::string& what, const std::string& path) {
  return UnavailableError(what + " " + path + ": " + std::strerror(errno));
}

Status WriteAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("cannot write", path);
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

std::string Line(const Event& e) {
  // Titles come from other programs and need not be UTF-8: replace, never throw.
  return EventToJson(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

constexpr const char* kOwnedFolders[] = {"segments", "summaries", "rollups", "actions", "skills"};

}  // namespace

double SegmentStart(double t) { return std::floor(t / kSegmentSeconds) * kSegmentSeconds; }

std::string SegmentName(double start) {
  const time_t t = static_cast<time_t>(start);
  struct tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string IsoTime(double t) {
  const time_t s = static_cast<time_t>(std::floor(t));
  struct tm tm;
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

StatusOr<double> ParseSegmentName(std::string_view name) {
  struct tm tm = {};
  const std::string s(name);
  const char* end = strptime(s.c_str(), "%Y%m%dT%H%M%SZ", &tm);
  if (end == nullptr || *end != '\0' || s.size() != 16) {
    return InvalidArgumentError("not a segment name: '" + s + "'");
  }
  return static_cast<double>(timegm(&tm));
}

Status EnsurePrivateDir(const std::string& path, bool fix_existing) {
  std::error_code ec;
  const bool created = fs::create_directories(path, ec);
  if (ec) return UnavailableError("cannot create " + path + ": " + ec.message());
  if (!fs::is_directory(path, ec)) return FailedPreconditionError(path + " is not a folder");
  if ((created || fix_existing) && ::chmod(path.c_str(), 0700) != 0) {
    return Errno("cannot chmod", path);
  }
  return OkStatus();
}

Status WritePrivateFile(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", tmp);
  Status s = ::fchmod(fd, 0600) == 0 ? WriteAll(fd, content, tmp) : Errno("cannot chmod", tmp);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = Errno("cannot rename", tmp);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

StatusOr<std::unique_ptr<SegmentWriter>> SegmentWriter::Open(const std::string& dir) {
  UF_RETURN_IF_ERROR(EnsurePrivateDir(dir, /*fix_existing=*/false));
  UF_RETURN_IF_ERROR(EnsurePrivateDir(dir + "/segments"));
  return std::unique_ptr<SegmentWriter>(new SegmentWriter(dir));
}

SegmentWriter::~SegmentWriter() {
  if (fd_ >= 0) {
    ::fdatasync(fd_);
    ::close(fd_);
  }
}

Status SegmentWriter::SwitchTo(double start) {
  if (fd_ >= 0) {
    ::fdatasync(fd_);
    ::close(fd_);
    fd_ = -1;
  }
  const std::string folder = dir_ + "/segments/" + SegmentName(start);
  UF_RETURN_IF_ERROR(EnsurePrivateDir(folder));
  const std::string path = folder + "/events.jsonl";
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) return Errno("cannot open", path);
  if (::fchmod(fd_, 0600) != 0) return Errno("cannot chmod", path);
  start_ = start;
  // A restarted recorder continues the segment's counts.
  auto counts = ReadCounts(folder);
  counts_ = counts.ok() ? *counts : SegmentCounts{};
  return OkStatus();
}

Status SegmentWriter::Write(const Event& e, Verdict verdict) {
  const double start = SegmentStart(e.ts);
  if (start != start_) UF_RETURN_IF_ERROR(SwitchTo(start));
  const std::string folder = dir_ + "/segments/" + SegmentName(start_);
  switch (verdict) {
    case Verdict::kKeep:
      UF_RETURN_IF_ERROR(WriteAll(fd_, Line(e), folder + "/events.jsonl"));
      ++counts_.captured;
      break;
    case Verdict::kBlocked:
      UF_RETURN_IF_ERROR(WriteAll(fd_, Line(e), folder + "/events.jsonl"));
      ++counts_.blocked;
      break;
    case Verdict::kSuppressed:
      ++counts_.suppressed;
      break;
  }
  dirty_ = true;
  const nlohmann::json counts = {{"captured", counts_.captured},
                                 {"blocked", counts_.blocked},
                                 {"suppressed", counts_.suppressed}};
  return WritePrivateFile(folder + "/counts.json", counts.dump() + "\n");
}

Status SegmentWriter::Sync() {
  if (fd_ < 0 || !dirty_) return OkStatus();
  dirty_ = false;
  if (::fdatasync(fd_) != 0) return Errno("cannot sync", SegmentName(start_));
  return OkStatus();
}

StatusOr<std::vector<SegmentInfo>> ListSegments(const std::string& dir) {
  std::vector<SegmentInfo> out;
  const fs::path root = fs::path(dir) / "segments";
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    auto start = ParseSegmentName(name);
    if (!start.ok()) continue;
    out.push_back({name, *start, entry.path().string()});
  }
  if (ec) return UnavailableError("cannot list " + root.string() + ": " + ec.message());
  std::sort(out.begin(), out.end(),
            [](const SegmentInfo& a, const SegmentInfo& b) { return a.start < b.start; });
  return out;
}

StatusOr<std::vector<EventLine>> ReadEvents(const std::string& segment_path, int64_t* bad) {
  const std::string path = segment_path + "/events.jsonl";
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read " + path);
  std::vector<EventLine> out;
  std::string line;
  int64_t n = 0;
  if (bad != nullptr) *bad = 0;
  while (std::getline(in, line)) {
    ++n;
    // A torn last line (a crash mid-write) or a hand edit: skipped, not fatal.
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto e = EventFromJson(j);
    if (!e.ok()) {
      if (bad != nullptr) ++*bad;
      continue;
    }
    out.push_back({n, std::move(*e)});
  }
  return out;
}

StatusOr<SegmentCounts> ReadCounts(const std::string& segment_path) {
  std::ifstream in(segment_path + "/counts.json");
  if (!in) return NotFoundError("no counts.json in " + segment_path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return DataLossError("bad counts.json in " + segment_path);
  SegmentCounts c;
  auto get = [&](const char* key) {
    auto it = j.find(key);
    return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  c.captured = get("captured");
  c.blocked = get("blocked");
  c.suppressed = get("suppressed");
  return c;
}

StatusOr<int> PurgeExpired(const std::string& dir, double now, double retention_s) {
  UF_ASSIGN_OR_RETURN(std::vector<SegmentInfo> segments, ListSegments(dir));
  int removed = 0;
  for (const SegmentInfo& s : segments) {
    if (s.start + kSegmentSeconds > now - retention_s) continue;
    std::error_code ec;
    fs::remove_all(s.path, ec);
    if (ec) return UnavailableError("cannot delete " + s.path + ": " + ec.message());
    ++removed;
  }
  return removed;
}

Status PurgeAll(const std::string& dir) {
  for (const char* folder : kOwnedFolders) {
    std::error_code ec;
    fs::remove_all(fs::path(dir) / folder, ec);
    if (ec) return UnavailableError("cannot delete " + dir + "/" + folder + ": " + ec.message());
  }
  return OkStatus();
}

}  // namespace uf::history
