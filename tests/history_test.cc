// Computer History without an X server: the privacy filter, the segment store (modes, counts,
// 48-hour deletion on an injected clock), the recorder driven by a scripted collector (input
// counts, AFK, segment rollover, a display that goes away), summaries, skills and the ask prompt.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "history/ask.h"
#include "history/privacy.h"
#include "history/recorder.h"
#include "history/segment_store.h"
#include "history/skills.h"
#include "history/summarizer.h"

namespace uf::history {
namespace {

namespace fs = std::filesystem;

// 2026-12-01T09:00:00Z: a segment and a rollup boundary.
constexpr double kT0 = 1796115600.0;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file under dir, concatenated: for "this never appears anywhere" checks.
std::string AllText(const fs::path& dir) {
  std::string all;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) all += Slurp(e.path());
  }
  return all;
}

mode_t Mode(const fs::path& p) {
  struct stat st;
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 0777;
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("uf_history_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
             std::to_string(count_++));
    fs::remove_all(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  const fs::path& path() const { return path_; }

 private:
  static inline int count_ = 0;
  fs::path path_;
};

Event Window(double ts, std::string app, std::string title, std::string role = "normal") {
  Event e;
  e.kind = EventKind::kWindow;
  e.ts = ts;
  e.app = std::move(app);
  e.title = std::move(title);
  e.role = std::move(role);
  return e;
}

Event Input(double ts, int64_t keys, int64_t clicks) {
  Event e;
  e.kind = EventKind::kInput;
  e.ts = ts;
  e.keys = keys;
  e.clicks = clicks;
  return e;
}

Event Focus(double ts, std::string app, std::string role, std::string text) {
  Event e;
  e.kind = EventKind::kFocus;
  e.ts = ts;
  e.app = std::move(app);
  e.role = std::move(role);
  e.name = "field";
  e.text = std::move(text);
  return e;
}

// A collector replaying a script on a fake clock: Poll advances the clock by its timeout and
// returns what the script holds up to then; idle time is the time since the last input.
class ScriptedCollector final : public Collector {
 public:
  struct Step {
    double at;
    Event event;
    bool lose_display = false;
  };
  ScriptedCollector(std::deque<Step>* script, FakeClock* clock, double* last_input)
      : script_(script), clock_(clock), last_input_(last_input) {}

  Status Poll(double timeout_s, std::vector<Event>* out) override {
    clock_->Advance(std::max(timeout_s, 0.05));
    while (!script_->empty() && script_->front().at <= clock_->Now()) {
      Step step = std::move(script_->front());
      script_->pop_front();
      if (step.lose_display) return UnavailableError("display gone (scripted)");
      if (step.event.kind == EventKind::kInput) *last_input_ = step.event.ts;
      out->push_back(std::move(step.event));
    }
    return OkStatus();
  }
  StatusOr<double> IdleSeconds() override { return clock_->Now() - *last_input_; }

 private:
  std::deque<ScriptedCollector::Step>* script_;
  FakeClock* clock_;
  double* last_input_;
};

struct Recording {
  std::deque<ScriptedCollector::Step> script;
  FakeClock clock;
  double last_input = 0.0;
  int connects = 0;
  std::unique_ptr<PrivacyFilter> filter;
  std::unique_ptr<SegmentWriter> writer;

  Status Run(const std::string& dir, double start, double seconds, PrivacyOptions p = {},
             RecorderOptions ro = {}) {
    clock.Set(start);
    last_input = start;
    filter = std::move(PrivacyFilter::Create(p)).value();
    auto w = SegmentWriter::Open(dir);
    if (!w.ok()) return w.status();
    writer = std::move(*w);
    ro.run_for_s = seconds;
    ro.reconnect_interval_s = 0.001;
    Recorder r(
        ro,
        [this]() -> StatusOr<std::unique_ptr<Collector>> {
          ++connects;
          return std::unique_ptr<Collector>(
              std::make_unique<ScriptedCollector>(&script, &clock, &last_input));
        },
        filter.get(), writer.get(), &clock);
    const Status s = r.Run(nullptr);
    writer.reset();
    return s;
  }
};

std::vector<Event> EventsOf(const std::string& dir, double segment_start) {
  int64_t bad = 0;
  auto lines = ReadEvents(dir + "/segments/" + SegmentName(segment_start), &bad);
  EXPECT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_EQ(bad, 0);
  std::vector<Event> out;
  if (lines.ok()) {
    for (auto& l : *lines) out.push_back(l.event);
  }
  return out;
}

TEST(HistoryPrivacyTest, BlockListsMaskingAndPasswords) {
  PrivacyOptions p;
  p.block_apps = {"^keepass"};
  p.block_titles = {"bank"};
  auto f = PrivacyFilter::Create(p);
  ASSERT_TRUE(f.ok());
  Event w = Window(1, "firefox", "My BANK account");  // caseless
  EXPECT_EQ((*f)->Apply(&w), Verdict::kBlocked);
  EXPECT_TRUE(w.blocked);
  EXPECT_EQ(w.title, "");
  EXPECT_EQ(w.app, "");
  EXPECT_EQ(EventToJson(w).dump().find("BANK"), std::string::npos);
  Event k = Window(1, "KeePassXC", "db");
  EXPECT_EQ((*f)->Apply(&k), Verdict::kBlocked);
  Event ok = Window(1, "xterm", "notes");
  EXPECT_EQ((*f)->Apply(&ok), Verdict::kKeep);
  EXPECT_EQ(ok.title, "notes");

  Event pw = Focus(1, "firefox", "password text", "hunter2");
  EXPECT_EQ((*f)->Apply(&pw), Verdict::kSuppressed);
  Event text = Focus(1, "firefox", "entry", "my secret words");
  EXPECT_EQ((*f)->Apply(&text), Verdict::kKeep);
  EXPECT_EQ(text.text, "[masked]");

  p.block_titles = {"(unclosed"};
  auto bad = PrivacyFilter::Create(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("(unclosed"), std::string::npos);
}

TEST(HistoryStoreTest, SegmentsModesCountsAndRoundTrip) {
  TempDir dir;
  const mode_t old_umask = ::umask(0);  // modes must not depend on the caller's umask
  {
    auto w = SegmentWriter::Open(dir.str());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(Window(kT0 + 5, "xterm",
                                   "t\xff"
                                   "itle"),
                            Verdict::kKeep)
                    .ok());
    ASSERT_TRUE((*w)->Write(Input(kT0 + 6, 3, 1), Verdict::kKeep).ok());
    ASSERT_TRUE((*w)->Write(Focus(kT0 + 7, "x", "password text", ""), Verdict::kSuppressed).ok());
    ASSERT_TRUE((*w)->Write(Window(kT0 + 700, "firefox", "b"), Verdict::kKeep).ok());
  }
  ::umask(old_umask);
  EXPECT_EQ(SegmentName(kT0), "20261201T090000Z");
  EXPECT_EQ(ParseSegmentName("20261201T090000Z").value(), kT0);
  EXPECT_FALSE(ParseSegmentName("20261201T0900").ok());
  auto segments = ListSegments(dir.str());
  ASSERT_TRUE(segments.ok());
  ASSERT_EQ(segments->size(), 2u);
  EXPECT_EQ((*segments)[1].start, kT0 + 600);
  EXPECT_EQ(Mode(dir.path()), 0700u);
  EXPECT_EQ(Mode(dir.path() / "segments"), 0700u);
  const fs::path first = (*segments)[0].path;
  EXPECT_EQ(Mode(first), 0700u);
  EXPECT_EQ(Mode(first / "events.jsonl"), 0600u);
  EXPECT_EQ(Mode(first / "counts.json"), 0600u);
  auto counts = ReadCounts(first.string());
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->captured, 2);
  EXPECT_EQ(counts->suppressed, 1);
  auto events = EventsOf(dir.str(), kT0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].app, "xterm");
  EXPECT_EQ(events[1].keys, 3);
  EXPECT_EQ(events[1].clicks, 1);

  // A folder the person chose keeps its mode; the history's own folders inside it are 0700.
  TempDir chosen;
  fs::create_directories(chosen.path());
  fs::permissions(chosen.path(), fs::perms(0755));
  ASSERT_TRUE(SegmentWriter::Open(chosen.str()).ok());
  EXPECT_EQ(Mode(chosen.path()), 0755u);
  EXPECT_EQ(Mode(chosen.path() / "segments"), 0700u);

  // A torn last line (a crash mid-write) is skipped and counted, the rest still reads.
  std::ofstream(first / "events.jsonl", std::ios::app) << "{\"ts\": 1, \"kin";
  int64_t bad = 0;
  auto again = ReadEvents(first.string(), &bad);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size(), 2u);
  EXPECT_EQ(bad, 1);
}

TEST(HistoryStoreTest, RawSegmentsAreDeletedAfterTheRetention) {
  TempDir dir;
  {
    auto w = SegmentWriter::Open(dir.str());
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(Window(kT0 + 1, "xterm", "old"), Verdict::kKeep).ok());
    ASSERT_TRUE((*w)->Write(Window(kT0 + 3600, "xterm", "newer"), Verdict::kKeep).ok());
  }
  const double end_of_first = kT0 + kSegmentSeconds;
  // 47 hours later nothing has expired; one second past 48 hours after its end, the first has.
  EXPECT_EQ(PurgeExpired(dir.str(), end_of_first + 47 * 3600.0, kDefaultRetentionSeconds).value(),
            0);
  EXPECT_EQ(ListSegments(dir.str())->size(), 2u);
  EXPECT_EQ(
      PurgeExpired(dir.str(), end_of_first + 48 * 3600.0 + 1, kDefaultRetentionSeconds).value(), 1);
  auto left = ListSegments(dir.str());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ(left->front().start, kT0 + 3600);
  EXPECT_FALSE(fs::exists(dir.path() / "segments" / SegmentName(kT0)));

  // The recorder deletes expired segments by itself while it runs.
  Recording rec;
  ASSERT_TRUE(rec.Run(dir.str(), kT0 + 3600 + 49 * 3600.0, 3).ok());
  EXPECT_FALSE(fs::exists(dir.path() / "segments" / SegmentName(kT0 + 3600)));

  // purge --all deletes everything the history wrote, and nothing else.
  std::ofstream(dir.path() / "mine.txt") << "not the history's";
  ASSERT_TRUE(SummarizeAll(dir.str(), kT0 + 60 * 3600.0, nullptr).ok());
  ASSERT_TRUE(PurgeAll(dir.str()).ok());
  EXPECT_TRUE(ListSegments(dir.str())->empty());
  EXPECT_FALSE(fs::exists(dir.path() / "summaries"));
  EXPECT_TRUE(fs::exists(dir.path() / "mine.txt"));
}

TEST(HistoryRecorderTest, CountsInputTracksAfkAndRollsOverSegments) {
  TempDir dir;
  Recording rec;
  const double s = kT0 + 540;  // 60 s before the next segment begins
  rec.script = {
      {s + 1.0, Window(s + 1.0, "xterm", "shell")},
      {s + 2.0, Input(s + 2.0, 4, 0)},
      {s + 2.5, Input(s + 2.5, 3, 1)},
      {s + 5.0, Window(s + 5.0, "firefox", "Online Banking")},  // blocked by title
      {s + 6.0, Input(s + 6.0, 2, 0)},
      {s + 8.0, Window(s + 8.0, "firefox", "Docs")},
      {s + 8.5, Window(s + 8.5, "firefox", "Docs")},  // repeats are not written twice
      {s + 9.0, Focus(s + 9.0, "firefox", "password text", "hunter2")},
      {s + 9.5, Focus(s + 9.5, "firefox", "entry", "typed words")},
      {s + 10.0, Input(s + 10.0, 1, 0)},
  };
  RecorderOptions ro;
  ro.afk_after_s = 20;
  PrivacyOptions p;
  p.block_titles = {"bank"};
  ASSERT_TRUE(rec.Run(dir.str(), s, 90, p, ro).ok());

  const std::vector<Event> first = EventsOf(dir.str(), kT0);
  ASSERT_GE(first.size(), 8u);
  EXPECT_EQ(first[0].kind, EventKind::kStatus);
  EXPECT_EQ(first[0].state, "started");
  int64_t keys = 0, clicks = 0;
  std::vector<std::string> windows;
  bool afk_on = false;
  for (const Event& e : first) {
    keys += e.keys;
    clicks += e.clicks;
    if (e.kind == EventKind::kWindow) windows.push_back(e.blocked ? "(blocked)" : e.title);
    if (e.kind == EventKind::kAfk && e.afk) {
      afk_on = true;
      // AFK starts at the last input, not when it was noticed.
      EXPECT_NEAR(e.ts, s + 10.0, 1.01);
    }
    if (e.kind == EventKind::kInput) {
      EXPECT_LE(e.duration, 1.5);
    }
  }
  EXPECT_EQ(keys, 10);
  EXPECT_EQ(clicks, 1);
  EXPECT_TRUE(afk_on);
  EXPECT_EQ(windows, (std::vector<std::string>{"shell", "(blocked)", "Docs"}));
  // The next segment starts with the window still active, then the recorder's stop.
  const std::vector<Event> second = EventsOf(dir.str(), kT0 + 600);
  ASSERT_GE(second.size(), 2u);
  EXPECT_EQ(second.front().kind, EventKind::kWindow);
  EXPECT_EQ(second.front().title, "Docs");
  EXPECT_EQ(second.front().ts, kT0 + 600);
  EXPECT_EQ(second.back().state, "stopped");

  auto counts = ReadCounts((dir.path() / "segments" / SegmentName(kT0)).string());
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->blocked, 1);
  EXPECT_EQ(counts->suppressed, 1);  // the password field
  const std::string all = AllText(dir.path());
  EXPECT_EQ(all.find("hunter2"), std::string::npos);
  EXPECT_EQ(all.find("typed words"), std::string::npos);
  EXPECT_NE(all.find("[masked]"), std::string::npos);
  EXPECT_EQ(all.find("Banking"), std::string::npos);
}

TEST(HistoryRecorderTest, WaitsForALostDisplayAndReconnects) {
  TempDir dir;
  Recording rec;
  const double s = kT0 + 60;
  ScriptedCollector::Step lose{s + 3.0, Event{}, /*lose_display=*/true};
  rec.script = {{s + 1.0, Window(s + 1.0, "xterm", "before")},
                lose,
                {s + 6.0, Window(s + 6.0, "xterm", "after")}};
  ASSERT_TRUE(rec.Run(dir.str(), s, 10).ok());
  EXPECT_GE(rec.connects, 2);
  std::vector<std::string> seen;
  for (const Event& e : EventsOf(dir.str(), kT0)) {
    seen.push_back(e.kind == EventKind::kStatus ? e.state : e.title);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"started", "before", "display_lost", "display_back",
                                            "after", "stopped"}));
}

TEST(HistorySummaryTest, TimePerApplicationCitationsAndRollup) {
  TempDir dir;
  {
    auto w = SegmentWriter::Open(dir.str());
    ASSERT_TRUE(w.ok());
    Event started;
    started.ts = kT0;
    started.state = "started";
    ASSERT_TRUE((*w)->Write(started, Verdict::kKeep).ok());                              // L1
    ASSERT_TRUE((*w)->Write(Window(kT0 + 10, "xterm", "make"), Verdict::kKeep).ok());    // L2
    ASSERT_TRUE((*w)->Write(Input(kT0 + 20, 40, 2), Verdict::kKeep).ok());               // L3
    ASSERT_TRUE((*w)->Write(Window(kT0 + 70, "firefox", "Docs"), Verdict::kKeep).ok());  // L4
    Event afk;
    afk.kind = EventKind::kAfk;
    afk.ts = kT0 + 100;
    afk.afk = true;
    ASSERT_TRUE((*w)->Write(afk, Verdict::kKeep).ok());  // L5
    afk.ts = kT0 + 160;
    afk.afk = false;
    ASSERT_TRUE((*w)->Write(afk, Verdict::kKeep).ok());  // L6
    Event stopped;
    stopped.ts = kT0 + 190;
    stopped.state = "stopped";
    ASSERT_TRUE((*w)->Write(stopped, Verdict::kKeep).ok());  // L7
  }
  auto report = SummarizeAll(dir.str(), kT0 + 3600, nullptr);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->segments, 1);
  EXPECT_EQ(report->rollups, 1);
  const fs::path md = dir.path() / "summaries" / "20261201T090000Z.md";
  EXPECT_EQ(Mode(md), 0600u);
  const std::string text = Slurp(md);
  EXPECT_EQ(text.rfind("---\nsegment: 20261201T090000Z\n", 0), 0u) << text;
  EXPECT_NE(text.find("applications: [\"firefox\", \"xterm\"]"), std::string::npos) << text;
  // xterm 10..70 = 60 s; firefox 70..190 less 60 s away = 60 s.
  EXPECT_NE(text.find("| xterm | 1m 0s |"), std::string::npos) << text;
  EXPECT_NE(text.find("| firefox | 1m 0s |"), std::string::npos) << text;
  EXPECT_NE(text.find("afk_seconds: 60"), std::string::npos) << text;
  EXPECT_NE(text.find("end: 2026-12-01T09:03:10Z"), std::string::npos) << text;  // stopped there
  EXPECT_NE(text.find("40 keys, 2 clicks) [L2–L3](../segments/20261201T090000Z/events.jsonl#L2)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("## What happened"), std::string::npos);
  EXPECT_EQ(text.find("## Summary"), std::string::npos);  // no model, no prose
  const std::string rollup = Slurp(dir.path() / "rollups" / "20261201T060000Z.md");
  EXPECT_NE(rollup.find("start: 2026-12-01T06:00:00Z"), std::string::npos) << rollup;
  EXPECT_NE(rollup.find("../summaries/20261201T090000Z.md"), std::string::npos) << rollup;

  // Up to date: nothing rewritten; a prose writer's text lands in its own section when it is.
  EXPECT_EQ(SummarizeAll(dir.str(), kT0 + 3600, nullptr)->segments, 0);
  fs::remove(md);
  auto with_prose = SummarizeAll(dir.str(), kT0 + 3600, [](const std::string& digest) {
    EXPECT_NE(digest.find("xterm \"make\""), std::string::npos) << digest;
    return StatusOr<std::string>(std::string("You built things, then read docs."));
  });
  ASSERT_TRUE(with_prose.ok());
  EXPECT_NE(Slurp(md).find("## Summary\n\nYou built things, then read docs."), std::string::npos);
}

// The same five-step workflow on `days` days, with other activity around it.
void RecordWorkflowDays(const std::string& dir, int days) {
  auto w = std::move(SegmentWriter::Open(dir)).value();
  for (int d = 0; d < days; ++d) {
    const double t = kT0 + d * 86400.0 + 3600.0 * (d % 2);
    int i = 0;
    auto at = [&] { return t + 20.0 * i++; };
    ASSERT_TRUE(
        w->Write(Window(at(), "thunderbird", "Inbox - day " + std::to_string(d)), Verdict::kKeep)
            .ok());
    ASSERT_TRUE(
        w->Write(Window(at(), "firefox", "Jira: ticket " + std::to_string(100 + d)), Verdict::kKeep)
            .ok());
    ASSERT_TRUE(w->Write(Input(at(), 0, 3), Verdict::kKeep).ok());
    ASSERT_TRUE(w->Write(Window(at(), "libreoffice", "report.ods", "calc"), Verdict::kKeep).ok());
    ASSERT_TRUE(w->Write(Input(at(), 80, 0), Verdict::kKeep).ok());
    ASSERT_TRUE(w->Write(Window(at(), "thunderbird", "Write: report"), Verdict::kKeep).ok());
    ASSERT_TRUE(w->Write(Input(at(), 30, 1), Verdict::kKeep).ok());
    // Something different each day after a long pause (a new session).
    ASSERT_TRUE(w->Write(Window(t + 1800, d % 2 ? "gimp" : "xterm", "x"), Verdict::kKeep).ok());
    ASSERT_TRUE(w->Write(Input(t + 1810, 5, 0), Verdict::kKeep).ok());
  }
}

std::vector<TimedAction> ActionsIn(const std::string& dir) {
  std::vector<TimedAction> all;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "actions")) {
    std::ifstream in(e.path());
    auto part = ActionsFromJson(nlohmann::json::parse(in));
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

TEST(HistorySkillsTest, AWorkflowOnThreeDaysIsOffered) {
  TempDir two, three;
  RecordWorkflowDays(two.str(), 2);
  RecordWorkflowDays(three.str(), 3);
  ASSERT_TRUE(SummarizeAll(two.str(), kT0 + 10 * 86400.0, nullptr).ok());
  ASSERT_TRUE(SummarizeAll(three.str(), kT0 + 10 * 86400.0, nullptr).ok());
  EXPECT_TRUE(MineSkills(ActionsIn(two.str()), {}).empty());

  const std::vector<SkillOffer> offers = MineSkills(ActionsIn(three.str()), {});
  ASSERT_EQ(offers.size(), 1u);
  const SkillOffer& o = offers[0];
  EXPECT_EQ(o.days, (std::vector<std::string>{"2026-12-01", "2026-12-02", "2026-12-03"}));
  const std::vector<Action> want = {
      {"thunderbird", "normal", "switch"}, {"firefox", "normal", "switch"},
      {"firefox", "normal", "click"},      {"libreoffice", "calc", "switch"},
      {"libreoffice", "calc", "type"},     {"thunderbird", "normal", "switch"},
      {"thunderbird", "normal", "click"},  {"thunderbird", "normal", "type"}};
  EXPECT_EQ(o.steps, want);
  EXPECT_EQ(o.name, "thunderbird-firefox-libreoffice-8-steps");
  const std::string md = SkillMarkdown(o);
  EXPECT_EQ(md.rfind("---\nname: thunderbird-firefox-libreoffice-8-steps\n", 0), 0u) << md;
  EXPECT_NE(md.find("status: draft"), std::string::npos);
  EXPECT_NE(md.find("4. Switch to **libreoffice** (calc)"), std::string::npos) << md;
  // Titles never reach a skill: they name documents, not steps.
  EXPECT_EQ(md.find("Jira"), std::string::npos);

  SkillOptions strict;
  strict.min_days = 4;
  EXPECT_TRUE(MineSkills(ActionsIn(three.str()), strict).empty());
}

TEST(HistoryAskTest, NewestSummariesOldestFirstWithCitations) {
  TempDir dir;
  {
    auto w = std::move(SegmentWriter::Open(dir.str())).value();
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(
          w->Write(Window(kT0 + 600.0 * i + 5, "app" + std::to_string(i), "t"), Verdict::kKeep)
              .ok());
    }
  }
  EXPECT_EQ(RecentSummaries(dir.str(), 3).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(SummarizeAll(dir.str(), kT0 + 7200, nullptr).ok());
  auto docs = RecentSummaries(dir.str(), 3);
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 3u);
  EXPECT_EQ((*docs)[0].path, "summaries/20261201T091000Z.md");
  EXPECT_EQ((*docs)[2].path, "summaries/20261201T093000Z.md");
  EXPECT_EQ((*docs)[2].id, "S3");
  EXPECT_EQ((*docs)[2].start, "2026-12-01T09:30:05Z");
  EXPECT_NE((*docs)[2].text.find("app3"), std::string::npos);
  EXPECT_EQ((*docs)[2].text.find("events.jsonl"), std::string::npos);  // links are not for it
  const nlohmann::json m = AskMessages("where was I?", *docs);
  ASSERT_EQ(m.size(), 2u);
  const std::string user = m[1]["content"];
  EXPECT_NE(user.find("[S1]\n"), std::string::npos);
  EXPECT_LT(user.find("app1"), user.find("app3"));
  EXPECT_NE(user.find("Question: where was I?"), std::string::npos);
  const nlohmann::json c = Citations(*docs);
  EXPECT_EQ(c[0]["id"], "S1");
  EXPECT_EQ(c[0]["path"], "summaries/20261201T091000Z.md");
  EXPECT_NE(
      AnswerWithSources("You were in app3 [S3].", *docs).find("[S3] summaries/20261201T093000Z.md"),
      std::string::npos);
}

}  // namespace
}  // namespace uf::history
