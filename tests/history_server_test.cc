// POST /v1/history/ask on the HTTP server, in-process on a tiny model: behind the API key,
// served on the ultrafast tier, answered with citations of the summaries it read; bad requests
// get 400 and a server without a history folder 404. The model's prose is not checked (the tiny
// model writes gibberish); the plumbing is.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "history/segment_store.h"
#include "history/summarizer.h"
#include "server/http_server.h"
#include "server_harness.h"
#include "shared_data.h"

namespace uf::server {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr double kT0 = 1796115600.0;  // 2026-12-01T09:00:00Z

// The server with the history endpoint on `history_dir`, behind the key "sekret".
class Harness {
 public:
  explicit Harness(const std::string& history_dir, int64_t ctx = 256)
      : server_(Options(ctx), KeyStore::WithKey("sekret"), HistoryOptions(history_dir)) {}
  httplib::Result Ask(const std::string& body, bool with_key = true) {
    httplib::Headers h;
    if (with_key) h.emplace("Authorization", "Bearer sekret");
    return server_.Post("/v1/history/ask", body, h);
  }

 private:
  static engine::ServiceOptions Options(int64_t ctx) {
    engine::ServiceOptions so;
    so.ctx = ctx;
    return so;
  }
  static ServerOptions HistoryOptions(const std::string& dir) {
    ServerOptions ho;
    ho.history_dir = dir;
    return ho;
  }
  ServerHarness server_;
};

std::string MakeHistory(int segments) {
  const fs::path dir =
      fs::temp_directory_path() /
      ("uf_history_server_" + std::to_string(::getpid()) + "_" + std::to_string(segments));
  fs::remove_all(dir);
  auto w = std::move(history::SegmentWriter::Open(dir.string())).value();
  for (int i = 0; i < segments; ++i) {
    history::Event e;
    e.kind = history::EventKind::kWindow;
    e.ts = kT0 + 600.0 * i + 5;
    e.app = "app" + std::to_string(i);
    e.title = "document " + std::to_string(i);
    UF_CHECK(w->Write(e, history::Verdict::kKeep).ok());
  }
  w.reset();
  UF_CHECK(history::SummarizeAll(dir.string(), kT0 + 86400, nullptr).ok());
  return dir.string();
}

TEST(HistoryServerTest, AskIsBehindTheKeyOnTheUltrafastTierWithCitations) {
  UF_REQUIRE_SHARED();
  const std::string dir = MakeHistory(3);
  Harness h(dir, /*ctx=*/1024);
  auto r = h.Ask(R"({"question": "where was I?", "max_tokens": 4})", /*with_key=*/false);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);

  r = h.Ask(R"({"question": "where was I?", "max_tokens": 4, "summaries": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "history.answer");
  EXPECT_EQ(j["service_tier"], "ultrafast");
  EXPECT_TRUE(j["answer"].is_string());
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  ASSERT_EQ(j["citations"].size(), 2u);  // the newest two, oldest first
  EXPECT_EQ(j["citations"][0]["id"], "S1");
  EXPECT_EQ(j["citations"][0]["path"], "summaries/20261201T091000Z.md");
  EXPECT_EQ(j["citations"][1]["path"], "summaries/20261201T092000Z.md");
  EXPECT_EQ(j["citations"][1]["start"], "2026-12-01T09:20:05Z");

  for (const char* bad :
       {R"({"max_tokens": 4})", R"({"question": ""})", R"({"question": 3})",
        R"({"question": "q", "summaries": 0})", R"({"question": "q", "x": 1})", R"(not json)"}) {
    r = h.Ask(bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad << " " << r->body;
    EXPECT_TRUE(json::parse(r->body)["error"].is_object()) << r->body;
  }
  fs::remove_all(dir);
}

TEST(HistoryServerTest, ShortContextDropsTheOldestSummariesAndNoFolderIs404) {
  UF_REQUIRE_SHARED();
  const std::string dir = MakeHistory(6);
  {
    Harness h(dir, /*ctx=*/256);
    // With 6 summaries the prompt does not fit 256 tokens; older ones give way.
    auto r = h.Ask(R"({"question": "where was I?", "max_tokens": 4, "summaries": 6})");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    ASSERT_GE(j["citations"].size(), 1u);
    EXPECT_LT(j["citations"].size(), 6u);
    EXPECT_EQ(j["citations"].back()["path"], "summaries/20261201T095000Z.md");  // the newest
  }
  {
    Harness h("");
    auto r = h.Ask(R"({"question": "where was I?"})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    EXPECT_NE(r->body.find("--history-dir"), std::string::npos);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace uf::server
