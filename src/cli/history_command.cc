// `ultrafast history`: Computer History, a local activity recorder whose memory the engine
// serves. record, summarize, ask, skills, status, purge; docs/history.md.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/thread_pool.h"
#include "cli/common.h"
#include "engine/generate.h"
#include "history/ask.h"
#include "history/atspi_focus.h"
#include "history/privacy.h"
#include "history/recorder.h"
#include "history/segment_store.h"
#include "history/skills.h"
#include "history/summarizer.h"
#include "history/x11_collector.h"
#include "model/decoder.h"
#include "server/chat_prompt.h"
#include "server/metering.h"

namespace uf::cli {
namespace {

namespace fs = std::filesystem;

// Private windows and password managers are never recorded unless the person says otherwise
// (--no-default-blocks): what an incognito window shows must not end up in a history.
const std::vector<std::string> kDefaultBlockedTitles = {"incognito", "private browsing",
                                                        "inprivate", "password"};
const std::vector<std::string> kDefaultBlockedApps = {"keepass", "1password", "bitwarden",
                                                      "gnome-keyring", "seahorse"};

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

std::string DefaultDir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/ultrafast/history";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : ".") + "/.local/share/ultrafast/history";
}

struct HistoryOptions {
  std::string dir;
  // record
  std::string display;
  std::vector<std::string> block_apps, block_titles;
  bool no_default_blocks = false;
  double afk_seconds = 180.0;
  double retention_hours = 48.0;
  double run_for = 0.0;
  bool atspi = false;
  // summarize, ask
  std::string model;
  int threads = 0;
  int max_tokens = 128;
  int summaries = 6;
  std::string question;
  // skills
  int min_days = 3;
  std::string confirm;
  // purge
  bool all = false;
};

std::string Dir(const HistoryOptions& o) { return o.dir.empty() ? DefaultDir() : o.dir; }

// The X11 collector plus the focused controls AT-SPI reports (--atspi).
class WithFocus final : public history::Collector {
 public:
  WithFocus(std::unique_ptr<history::Collector> x11, history::FocusWatcher* focus)
      : x11_(std::move(x11)), focus_(focus) {}
  Status Poll(double timeout_s, std::vector<history::Event>* out) override {
    const Status s = x11_->Poll(timeout_s, out);
    focus_->Drain(out);
    return s;
  }
  StatusOr<double> IdleSeconds() override { return x11_->IdleSeconds(); }

 private:
  std::unique_ptr<history::Collector> x11_;
  history::FocusWatcher* focus_;
};

void Record(const HistoryOptions& o) {
  if (!history::X11CollectorBuilt()) {
    Fail("history record", history::ConnectX11(o.display, nullptr).status());
  }
  history::PrivacyOptions p;
  if (!o.no_default_blocks) {
    p.block_apps = kDefaultBlockedApps;
    p.block_titles = kDefaultBlockedTitles;
  }
  p.block_apps.insert(p.block_apps.end(), o.block_apps.begin(), o.block_apps.end());
  p.block_titles.insert(p.block_titles.end(), o.block_titles.begin(), o.block_titles.end());
  auto filter = history::PrivacyFilter::Create(p);
  if (!filter.ok()) Fail("history record", filter.status());
  const std::string dir = Dir(o);
  auto writer = history::SegmentWriter::Open(dir);
  if (!writer.ok()) Fail("history record", writer.status());

  server::WallClock clock;
  std::unique_ptr<history::FocusWatcher> focus;
  if (o.atspi) {
    auto started = history::FocusWatcher::Start(&clock);
    if (!started.ok()) Fail("history record --atspi", started.status());
    focus = std::move(*started);
  }
  history::RecorderOptions ro;
  ro.afk_after_s = o.afk_seconds;
  ro.retention_s = o.retention_hours * 3600.0;
  ro.run_for_s = o.run_for;
  const std::string display = o.display;
  history::Recorder recorder(
      ro,
      [&]() -> StatusOr<std::unique_ptr<history::Collector>> {
        UF_ASSIGN_OR_RETURN(auto x11, history::ConnectX11(display, &clock));
        if (focus == nullptr) return x11;
        return std::unique_ptr<history::Collector>(
            std::make_unique<WithFocus>(std::move(x11), focus.get()));
      },
      filter->get(), writer->get(), &clock);

  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const std::string pid_file = dir + "/recorder.pid";
  (void)history::WritePrivateFile(pid_file, std::to_string(::getpid()) + "\n");
  std::fprintf(stderr,
               "history record: recording the active window's application and title, and counts "
               "of keys and clicks (never which keys, no screenshots) to %s; raw events are "
               "deleted after %.0f hours; %zu application and %zu title block patterns; Ctrl-C "
               "stops\n",
               dir.c_str(), o.retention_hours, p.block_apps.size(), p.block_titles.size());
  const Status s = recorder.Run(&g_stop);
  ::unlink(pid_file.c_str());
  if (!s.ok()) Fail("history record", s);
  std::fprintf(stderr, "history record: stopped\n");
}

// One greedy chat completion with the model: what summarize -m and ask use.
class ChatModel {
 public:
  explicit ChatModel(const HistoryOptions& o) {
    auto loaded = LoadModel(o.model);
    if (!loaded.ok()) Fail("history", loaded.status());
    loaded_ = std::move(*loaded);
    std::string note;
    auto render = server::MakeChatRenderer(loaded_.model->file(), *loaded_.tokenizer, &note);
    if (!render.ok()) Fail("history", render.status());
    render_ = std::move(*render);
    ctx_ = std::min<int64_t>(4096, std::max<int64_t>(loaded_.model->config().n_ctx_train, 64));
    pool_ = std::make_unique<ThreadPool>(ResolveThreads(o.threads));
    auto cache = engine::KvCache::Create(
        CacheOptionsFor(loaded_.model->config(), ctx_, engine::KvType::kF16));
    if (!cache.ok()) Fail("history", cache.status());
    cache_ = std::move(*cache);
    model::DecoderOptions dopts;
    dopts.max_batch = std::min<int64_t>(512, ctx_);
    auto decoder = model::Decoder::Create(*loaded_.model, cache_.get(), dopts, pool_.get());
    if (!decoder.ok()) Fail("history", decoder.status());
    decoder_ = std::move(*decoder);
  }

  // The prompt's tokens, or OutOfRange when it leaves no room for max_tokens.
  StatusOr<std::vector<int32_t>> Prompt(const nlohmann::json& messages, int max_tokens) {
    auto text = render_(messages, nlohmann::ordered_json());
    if (!text.ok()) return text.status();
    const Tokenizer& tok = *loaded_.tokenizer;
    bool add_bos = tok.add_bos_default();
    if (add_bos && tok.bos_id() >= 0) {
      const std::string_view bos = tok.TokenText(tok.bos_id());
      if (!bos.empty() && text->compare(0, bos.size(), bos) == 0) add_bos = false;
    }
    std::vector<int32_t> tokens = tok.Encode(*text, add_bos, /*parse_special=*/true);
    if (static_cast<int64_t>(tokens.size()) + max_tokens > ctx_) {
      return OutOfRangeError("the prompt (" + std::to_string(tokens.size()) + " tokens) and " +
                             std::to_string(max_tokens) + " answer tokens exceed the context of " +
                             std::to_string(ctx_));
    }
    return tokens;
  }

  StatusOr<std::string> Generate(const std::vector<int32_t>& prompt, int max_tokens) {
    engine::GenerateOptions g;
    g.max_tokens = max_tokens;
    g.sampling.temperature = 0.0f;  // greedy: the same history gives the same answer
    std::string out;
    engine::GenerateStats st;
    const Status s = engine::Generate(
        *decoder_, *loaded_.tokenizer, prompt, g,
        [&](std::string_view t) {
          out += t;
          return true;
        },
        &st);
    if (!s.ok()) return s;
    return out;
  }

 private:
  LoadedModel loaded_;
  server::ChatRenderer render_;
  int64_t ctx_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<engine::KvCache> cache_;
  std::unique_ptr<model::Decoder> decoder_;
};

void Summarize(const HistoryOptions& o) {
  const std::string dir = Dir(o);
  std::unique_ptr<ChatModel> model;
  history::ProseWriter prose;
  if (!o.model.empty()) {
    model = std::make_unique<ChatModel>(o);
    prose = [&](const std::string& digest) -> StatusOr<std::string> {
      const nlohmann::json messages = nlohmann::json::array(
          {{{"role", "system"},
            {"content", "Summarise this stretch of computer activity in two sentences."}},
           {{"role", "user"}, {"content", digest}}});
      UF_ASSIGN_OR_RETURN(auto tokens, model->Prompt(messages, o.max_tokens));
      return model->Generate(tokens, o.max_tokens);
    };
  }
  auto report = history::SummarizeAll(dir, server::WallClock().Now(), prose);
  if (!report.ok()) Fail("history summarize", report.status());
  std::printf("%d segment summaries and %d rollups written under %s\n", report->segments,
              report->rollups, dir.c_str());
}

void Ask(const HistoryOptions& o) {
  if (o.model.empty()) Fail("history ask", InvalidArgumentError("-m MODEL is required"));
  try {
    (void)nlohmann::json(o.question).dump();
  } catch (const nlohmann::json::exception&) {
    Fail("history ask", InvalidArgumentError("the question is not valid UTF-8"));
  }
  auto docs = history::RecentSummaries(Dir(o), o.summaries);
  if (!docs.ok()) Fail("history ask", docs.status());
  ChatModel model(o);
  // Oldest summaries give way first when the context is short.
  while (true) {
    auto tokens = model.Prompt(history::AskMessages(o.question, *docs), o.max_tokens);
    if (tokens.ok()) {
      auto answer = model.Generate(*tokens, o.max_tokens);
      if (!answer.ok()) Fail("history ask", answer.status());
      std::printf("%s", history::AnswerWithSources(*answer, *docs).c_str());
      return;
    }
    if (docs->size() <= 1) Fail("history ask", tokens.status());
    docs->erase(docs->begin());
    for (size_t i = 0; i < docs->size(); ++i) (*docs)[i].id = "S" + std::to_string(i + 1);
  }
}

void Skills(const HistoryOptions& o) {
  const std::string dir = Dir(o);
  if (!o.confirm.empty()) {
    const fs::path draft = fs::path(dir) / "skills" / "drafts" / o.confirm / "SKILL.md";
    if (o.confirm.find('/') != std::string::npos || !fs::exists(draft)) {
      Fail("history skills", NotFoundError("no draft named '" + o.confirm + "'"));
    }
    std::ifstream in(draft);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    if (const size_t at = text.find("status: draft"); at != std::string::npos) {
      text.replace(at, 13, "status: confirmed");
    }
    const std::string target = dir + "/skills/" + o.confirm;
    Status s = history::EnsurePrivateDir(target);
    if (s.ok()) s = history::WritePrivateFile(target + "/SKILL.md", text);
    if (!s.ok()) Fail("history skills", s);
    std::error_code ec;
    fs::remove_all(draft.parent_path(), ec);
    std::printf("confirmed: %s/SKILL.md\n", target.c_str());
    return;
  }
  // Actions come from the summaries' action lists, which outlive the raw segments.
  auto report = history::SummarizeAll(dir, server::WallClock().Now(), nullptr);
  if (!report.ok()) Fail("history skills", report.status());
  std::vector<history::TimedAction> actions;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "actions", ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fs::path(dir) / "actions", ec)) {
      if (e.path().extension() == ".json") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::ifstream in(f);
      auto part = history::ActionsFromJson(nlohmann::json::parse(in, nullptr, false));
      // Each segment file ends a session: segments need not be contiguous.
      actions.insert(actions.end(), part.begin(), part.end());
      if (!part.empty()) actions.push_back({part.back().ts, history::Action{}});
    }
  }
  history::SkillOptions so;
  so.min_days = o.min_days;
  const auto offers = history::MineSkills(actions, so);
  if (offers.empty()) {
    std::printf("no workflow seen on %d or more days yet (%zu actions looked at)\n", so.min_days,
                actions.size());
    return;
  }
  for (const history::SkillOffer& offer : offers) {
    const std::string folder = dir + "/skills/drafts/" + offer.name;
    Status s = history::EnsurePrivateDir(folder);
    if (s.ok()) s = history::WritePrivateFile(folder + "/SKILL.md", history::SkillMarkdown(offer));
    if (!s.ok()) Fail("history skills", s);
    std::printf("offered: %s (%zu steps, seen on %zu days): %s/SKILL.md\n", offer.name.c_str(),
                offer.steps.size(), offer.days.size(), folder.c_str());
  }
  std::printf("confirm one with `ultrafast history skills --confirm NAME`, or delete its draft\n");
}

int64_t CountFiles(const fs::path& p, const std::string& ext) {
  int64_t n = 0;
  std::error_code ec;
  if (!fs::exists(p, ec)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(p, ec)) {
    if (e.is_regular_file() && e.path().extension() == ext) ++n;
  }
  return n;
}

void PrintStatus(const HistoryOptions& o) {
  const std::string dir = Dir(o);
  auto segments = history::ListSegments(dir);
  if (!segments.ok()) Fail("history status", segments.status());
  int64_t bytes = 0, events = 0;
  history::SegmentCounts total;
  for (const history::SegmentInfo& s : *segments) {
    std::error_code ec;
    bytes += static_cast<int64_t>(fs::file_size(s.path + "/events.jsonl", ec));
    if (auto c = history::ReadCounts(s.path); c.ok()) {
      total.captured += c->captured;
      total.blocked += c->blocked;
      total.suppressed += c->suppressed;
    }
    if (auto read = history::ReadEvents(s.path, nullptr); read.ok()) events += read->size();
  }
  std::string recording = "no";
  std::ifstream pid_in(dir + "/recorder.pid");
  long pid = 0;
  if (pid_in >> pid && pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0) {
    recording = "yes (pid " + std::to_string(pid) + ")";
  }
  std::printf("history folder: %s\n", dir.c_str());
  std::printf("recording: %s\n", recording.c_str());
  std::printf("raw segments: %zu (%lld events, %lld bytes)", segments->size(),
              static_cast<long long>(events), static_cast<long long>(bytes));
  if (!segments->empty()) {
    std::printf(", %s to %s", history::IsoTime(segments->front().start).c_str(),
                history::IsoTime(segments->back().start + history::kSegmentSeconds).c_str());
  }
  std::printf("\ncaptured %lld, blocked %lld, suppressed %lld\n",
              static_cast<long long>(total.captured), static_cast<long long>(total.blocked),
              static_cast<long long>(total.suppressed));
  std::printf("summaries: %lld, rollups: %lld, skill drafts: %lld, skills: %lld\n",
              static_cast<long long>(CountFiles(fs::path(dir) / "summaries", ".md")),
              static_cast<long long>(CountFiles(fs::path(dir) / "rollups", ".md")),
              static_cast<long long>(CountFiles(fs::path(dir) / "skills" / "drafts", ".md")),
              static_cast<long long>(CountFiles(fs::path(dir) / "skills", ".md") -
                                     CountFiles(fs::path(dir) / "skills" / "drafts", ".md")));
}

void Purge(const HistoryOptions& o) {
  const std::string dir = Dir(o);
  if (o.all) {
    const Status s = history::PurgeAll(dir);
    if (!s.ok()) Fail("history purge", s);
    std::printf("deleted every segment, summary, rollup, action list and skill under %s\n",
                dir.c_str());
    return;
  }
  auto removed = history::PurgeExpired(dir, server::WallClock().Now(), o.retention_hours * 3600.0);
  if (!removed.ok()) Fail("history purge", removed.status());
  std::printf("deleted %d raw segments older than %.0f hours\n", *removed, o.retention_hours);
}

}  // namespace

void AddHistoryCommand(CLI::App& app) {
  auto o = std::make_shared<HistoryOptions>();
  CLI::App* history = app.add_subcommand(
      "history",
      "Computer History: record window and input activity locally, summarise it, ask "
      "where you were");
  history->require_subcommand(1);
  auto add_dir = [&](CLI::App* cmd) {
    cmd->add_option("--dir", o->dir, "history folder (default $XDG_DATA_HOME/ultrafast/history)");
  };

  CLI::App* record =
      history->add_subcommand("record", "Record the active window and input counts (X11)");
  add_dir(record);
  record->add_option("--display", o->display, "X display (default $DISPLAY)");
  record->add_option("--block-app", o->block_apps,
                     "regular expression; matching applications (WM_CLASS) are never recorded");
  record->add_option("--block-title", o->block_titles,
                     "regular expression; windows with matching titles are never recorded");
  record->add_flag("--no-default-blocks", o->no_default_blocks,
                   "do not block private-browsing windows and password managers by default");
  record->add_option("--afk-seconds", o->afk_seconds, "idle seconds before away-from-keyboard")
      ->capture_default_str();
  record->add_option("--retention-hours", o->retention_hours, "raw events are deleted after this")
      ->capture_default_str();
  record->add_option("--for", o->run_for, "stop after this many seconds (0: until Ctrl-C)");
  record->add_flag("--atspi", o->atspi,
                   "also record focused-control roles through AT-SPI2 (password fields never; "
                   "text masked)");
  record->callback([o] { Record(*o); });

  CLI::App* summarize =
      history->add_subcommand("summarize", "Write Markdown summaries and rollups");
  add_dir(summarize);
  summarize->add_option("-m,--model", o->model, "GGUF model for a prose summary (optional)");
  summarize->add_option("-n,--max-tokens", o->max_tokens, "tokens of prose per segment")
      ->capture_default_str();
  summarize->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  summarize->callback([o] { Summarize(*o); });

  CLI::App* ask =
      history->add_subcommand("ask", "Answer a question (\"where was I?\") from the summaries");
  add_dir(ask);
  ask->add_option("question", o->question, "the question")->required();
  ask->add_option("-m,--model", o->model, "GGUF model")->required();
  ask->add_option("--summaries", o->summaries, "how many recent summaries the model reads")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  ask->add_option("-n,--max-tokens", o->max_tokens, "answer tokens at most")->capture_default_str();
  ask->add_option("-t,--threads", o->threads, "threads (0: all cores)");
  ask->callback([o] { Ask(*o); });

  CLI::App* skills =
      history->add_subcommand("skills", "Offer workflows seen on several days as SKILL.md drafts");
  add_dir(skills);
  skills->add_option("--min-days", o->min_days, "days a workflow must be seen on")
      ->check(CLI::Range(1, 365))
      ->capture_default_str();
  skills->add_option("--confirm", o->confirm, "turn the named draft into a skill");
  skills->callback([o] { Skills(*o); });

  CLI::App* status =
      history->add_subcommand("status", "What is recorded, and whether a recorder runs");
  add_dir(status);
  status->callback([o] { PrintStatus(*o); });

  CLI::App* purge =
      history->add_subcommand("purge", "Delete expired raw events, or everything (--all)");
  add_dir(purge);
  purge->add_flag("--all", o->all, "delete every segment, summary, rollup and skill");
  purge->add_option("--retention-hours", o->retention_hours, "raw events older than this go")
      ->capture_default_str();
  purge->callback([o] { Purge(*o); });
}

}  // namespace uf::cli
