// `ultrafast pull`: downloads from a local httplib server on loopback (no outside network) with
// resume after a cut connection, sha256 checks, GGUF validation, and the errors users meet.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "shared_data.h"
#include "pull/downloader.h"
#include "pull/model_cache.h"

namespace uf::pull {
namespace {

namespace fs = std::filesystem;

constexpr char kModel[] = "../shared/models/tiny-llama-256-q8_0.gguf";

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Serves the model under several paths, each misbehaving in its own way, and records the Range
// header of every request.
class ModelServer {
 public:
  explicit ModelServer(std::string body) : body_(std::move(body)) {
    auto serve_body = [this](const httplib::Request& req, httplib::Response& res, bool cut) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ranges_.push_back(req.get_header_value("Range"));
      }
      if (!etag_.empty()) res.set_header("ETag", "\"" + etag_ + "\"");
      const bool cut_now = cut && cuts_left_.fetch_sub(1) > 0;
      // httplib answers a Range request with 206 and Content-Range from this provider.
      res.set_content_provider(
          body_.size(), "application/octet-stream",
          [this, cut_now](size_t offset, size_t length, httplib::DataSink& sink) {
            if (cut_now && offset >= cut_at_) return false;  // drop the connection mid-file
            size_t n = std::min<size_t>(length, 64 << 10);
            if (cut_now) n = std::min(n, cut_at_ - offset);
            return sink.write(body_.data() + offset, n);
          });
    };
    server_.Get("/model.gguf", [serve_body](const httplib::Request& q, httplib::Response& r) {
      serve_body(q, r, false);
    });
    server_.Get("/cut/model.gguf", [serve_body](const httplib::Request& q, httplib::Response& r) {
      serve_body(q, r, true);
    });
    // As Hugging Face does: a redirect whose X-Linked-Etag is the LFS object's sha256.
    server_.Get("/hf/o/r/resolve/main/model.gguf", [this](const httplib::Request&,
                                                          httplib::Response& r) {
      r.status = 302;
      r.set_header("Location", "/model.gguf");
      r.set_header("X-Linked-Etag", "\"" + linked_sha_ + "\"");
      r.set_header("ETag", "\"0123456789012345678901234567890123456789\"");  // git sha1: ignored
    });
    server_.Get("/page.gguf", [](const httplib::Request&, httplib::Response& r) {
      r.set_content("<html><body>Sign in to continue</body></html>", "text/html");
    });
    server_.Get("/broken.gguf", [](const httplib::Request&, httplib::Response& r) {
      r.set_content(std::string("GGUF\x03\0\0\0", 8) + std::string(100, '\xff'),
                    "application/octet-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the accept loop has started would be lost, and the join would hang.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ModelServer() {
    server_.stop();
    thread_.join();
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<std::string> Ranges() {
    std::lock_guard<std::mutex> lock(mu_);
    return ranges_;
  }

  std::string body_;
  std::string etag_;        // ETag of /model.gguf responses (empty: none)
  std::string linked_sha_;  // X-Linked-Etag of the /hf redirect
  size_t cut_at_ = 0;
  std::atomic<int> cuts_left_{0};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> ranges_;
};

class PullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    UF_REQUIRE_SHARED();
    dir_ = fs::temp_directory_path() /
           ("uf_pull_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    body_ = ReadFile(kModel);
    auto sha = Sha256File(kModel);
    ASSERT_TRUE(sha.ok());
    sha_ = *sha;
    server_ = std::make_unique<ModelServer>(body_);
  }
  void TearDown() override {
    server_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  DownloadOptions Quick(int retries = 0) {
    DownloadOptions o;
    o.retries = retries;
    o.retry_delay_s = 0.0;
    return o;
  }
  StatusOr<DownloadResult> Get(const std::string& path, const DownloadOptions& o) {
    auto src = ParseModelSource(server_->Url(path));
    EXPECT_TRUE(src.ok());
    return Download(*src, dir_.string(), o);
  }
  // Nothing at all under the final name or as a partial file.
  void ExpectNothingLeft(const std::string& name) {
    EXPECT_FALSE(fs::exists(dir_ / name)) << name;
    EXPECT_FALSE(fs::exists(dir_ / (name + ".partial"))) << name;
  }

  fs::path dir_;
  std::string body_, sha_;
  std::unique_ptr<ModelServer> server_;
};

TEST_F(PullTest, DownloadsChecksTheServersSha256AndReportsProgress) {
  server_->etag_ = sha_;
  DownloadOptions o = Quick();
  std::vector<DownloadProgress> seen;
  o.on_progress = [&seen](const DownloadProgress& p) { seen.push_back(p); };
  auto r = Get("/model.gguf", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->path, (dir_ / "model.gguf").string());
  EXPECT_TRUE(r->sha256_checked);
  EXPECT_EQ(r->sha256, sha_);
  EXPECT_EQ(r->bytes, static_cast<int64_t>(body_.size()));
  EXPECT_EQ(ReadFile(r->path), body_);
  EXPECT_FALSE(fs::exists(dir_ / "model.gguf.partial"));
  ASSERT_FALSE(seen.empty());
  EXPECT_TRUE(seen.back().done);
  EXPECT_EQ(seen.back().bytes, static_cast<int64_t>(body_.size()));
  EXPECT_EQ(seen.back().total, static_cast<int64_t>(body_.size()));
  EXPECT_EQ(server_->Ranges(), std::vector<std::string>{""});

  // A second pull finds the file and downloads nothing.
  auto again = Get("/model.gguf", o);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_present);
  EXPECT_EQ(server_->Ranges().size(), 1u);
}

TEST_F(PullTest, FollowsARedirectAndTakesTheSha256FromXLinkedEtag) {
  server_->linked_sha_ = sha_;
  auto r = Get("/hf/o/r/resolve/main/model.gguf", Quick());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->sha256_checked);
  EXPECT_EQ(ReadFile(r->path), body_);
}

TEST_F(PullTest, BadSha256DeletesTheDownload) {
  server_->linked_sha_ = std::string(64, 'a');
  auto r = Get("/hf/o/r/resolve/main/model.gguf", Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("sha256"), std::string::npos) << r.status().message();
  ExpectNothingLeft("model.gguf");

  // --sha256 given by the user is checked too.
  DownloadOptions o = Quick();
  o.expected_sha256 = std::string(64, 'b');
  r = Get("/model.gguf", o);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  ExpectNothingLeft("model.gguf");
}

TEST_F(PullTest, NotFoundIsAClearError) {
  auto r = Get("/missing.gguf", Quick(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("404"), std::string::npos) << r.status().message();
  ExpectNothingLeft("missing.gguf");
}

TEST_F(PullTest, APageThatIsNotGgufIsRefused) {
  auto r = Get("/page.gguf", Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a GGUF file"), std::string::npos);
  ExpectNothingLeft("page.gguf");
}

TEST_F(PullTest, AHeaderThatDoesNotParseIsRefusedBeforeTheRename) {
  auto r = Get("/broken.gguf", Quick());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a valid GGUF file"), std::string::npos)
      << r.status().message();
  ExpectNothingLeft("broken.gguf");
}

TEST_F(PullTest, ACutConnectionIsResumedWithARangeRequest) {
  server_->etag_ = sha_;
  server_->cut_at_ = body_.size() / 3;
  server_->cuts_left_ = 1;
  DownloadOptions o = Quick(/*retries=*/2);
  std::vector<int> retries;
  o.on_retry = [&retries](const Status& why, int retry) {
    EXPECT_EQ(why.code(), StatusCode::kUnavailable);
    retries.push_back(retry);
  };
  auto r = Get("/cut/model.gguf", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->attempts, 2);
  EXPECT_EQ(retries, std::vector<int>{1});
  EXPECT_TRUE(r->sha256_checked);
  EXPECT_EQ(ReadFile(r->path), body_);
  const std::vector<std::string> want = {"", "bytes=" + std::to_string(body_.size() / 3) + "-"};
  EXPECT_EQ(server_->Ranges(), want);
}

TEST_F(PullTest, APartialFileIsKeptAndTheNextPullResumesIt) {
  server_->cut_at_ = body_.size() / 2;
  server_->cuts_left_ = 1;
  auto r = Get("/cut/model.gguf", Quick(/*retries=*/0));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("run the same pull again"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(fs::exists(dir_ / "model.gguf"));
  ASSERT_TRUE(fs::exists(dir_ / "model.gguf.partial"));
  EXPECT_EQ(fs::file_size(dir_ / "model.gguf.partial"), body_.size() / 2);

  auto again = Get("/cut/model.gguf", Quick(0));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->resumed_from, static_cast<int64_t>(body_.size() / 2));
  EXPECT_EQ(ReadFile(again->path), body_);
  EXPECT_FALSE(fs::exists(dir_ / "model.gguf.partial"));
}

TEST_F(PullTest, ARefusedConnectionIsANetworkError) {
  const std::string url = server_->Url("/model.gguf");
  server_.reset();  // nothing listens on that port now
  auto src = ParseModelSource(url);
  ASSERT_TRUE(src.ok());
  auto r = Download(*src, dir_.string(), Quick(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("network failure"), std::string::npos)
      << r.status().message();
  ExpectNothingLeft("model.gguf");
}

TEST(ModelSourceTest, MapsHuggingFaceNamesAndUrls) {
  auto hf =
      ParseModelSource("hf://bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q4_0.gguf");
  ASSERT_TRUE(hf.ok());
  EXPECT_EQ(hf->url,
            "https://huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/main/"
            "Llama-3.2-1B-Instruct-Q4_0.gguf");
  EXPECT_EQ(hf->file_name, "Llama-3.2-1B-Instruct-Q4_0.gguf");
  auto sub = ParseModelSource("hf://o/r/sub/dir/m.gguf");
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub->url, "https://huggingface.co/o/r/resolve/main/sub/dir/m.gguf");
  EXPECT_EQ(sub->file_name, "m.gguf");
  auto url = ParseModelSource("https://example.com/a/b.gguf?download=true");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->file_name, "b.gguf");
  for (const char* bad : {"hf://owner/file.gguf", "hf://o//f.gguf", "ftp://x/y.gguf", "model.gguf",
                          "https://example.com", "https://example.com/", "https://h/a/.."}) {
    auto r = ParseModelSource(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ModelCacheTest, ResolvesNamesInTheCacheAndDefaultsToXdg) {
  const fs::path dir = fs::temp_directory_path() / ("uf_cache_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "m.gguf") << "x";
  EXPECT_EQ(ResolveModelPath("m", dir.string()), (dir / "m.gguf").string());
  EXPECT_EQ(ResolveModelPath("m.gguf", dir.string()), (dir / "m.gguf").string());
  EXPECT_EQ(ResolveModelPath("other", dir.string()), "other");
  EXPECT_EQ(ResolveModelPath(kModel, dir.string()), kModel);  // an existing path wins
  fs::remove_all(dir);

  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(DefaultCacheDir(), "/x/cache/ultrafast");
  unsetenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  if (home != nullptr) {
    EXPECT_EQ(DefaultCacheDir(), std::string(home) + "/.cache/ultrafast");
  }
  if (old) setenv("XDG_CACHE_HOME", saved.c_str(), 1);
}

// The binary: `pull URL` into $XDG_CACHE_HOME/ultrafast, then `run -m NAME` finds it there.
TEST_F(PullTest, CommandPullsIntoTheCacheAndRunFindsTheName) {
  const fs::path bin = fs::read_symlink("/proc/self/exe").parent_path() / "ultrafast";
  if (!fs::exists(bin)) GTEST_SKIP() << "ultrafast binary not built at " << bin;
  server_->etag_ = sha_;
  const std::string env = "env XDG_CACHE_HOME=" + dir_.string() + " ";
  const fs::path out = dir_ / "out", err = dir_ / "err";
  fs::create_directories(dir_);
  int rc = std::system((env + bin.string() + " pull " + server_->Url("/model.gguf") + " > " +
                        out.string() + " 2> " + err.string())
                           .c_str());
  ASSERT_EQ(rc, 0) << ReadFile(err);
  EXPECT_EQ(ReadFile(out), (dir_ / "ultrafast" / "model.gguf").string() + "\n");
  EXPECT_NE(ReadFile(err).find("verified"), std::string::npos) << ReadFile(err);
  EXPECT_NE(ReadFile(err).find("100%"), std::string::npos) << ReadFile(err);
  rc = std::system((env + bin.string() + " run -m model -p hello -n 2 --temp 0 > " + out.string() +
                    " 2> " + err.string())
                       .c_str());
  EXPECT_EQ(rc, 0) << ReadFile(err);
  rc = std::system(
      (env + bin.string() + " info -m model.gguf > " + out.string() + " 2> " + err.string())
          .c_str());
  EXPECT_EQ(rc, 0) << ReadFile(err);
  EXPECT_NE(ReadFile(out).find("llama"), std::string::npos);

  // A 404 through the command: exit 1 and the reason, nothing in the cache.
  rc = std::system((env + bin.string() + " pull " + server_->Url("/nope.gguf") + " > " +
                    out.string() + " 2> " + err.string())
                       .c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 1);
  EXPECT_NE(ReadFile(err).find("HTTP 404"), std::string::npos) << ReadFile(err);
  EXPECT_FALSE(fs::exists(dir_ / "ultrafast" / "nope.gguf"));
}

}  // namespace
}  // namespace uf::pull
