#include "pull/downloader.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "gguf/gguf.h"

namespace uf::pull {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxRedirects = 10;

struct SplitUrl {
  std::string origin;  // scheme://host[:port]
  std::string path;    // /path?query
};

StatusOr<SplitUrl> Split(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return InvalidArgumentError("not a URL: " + url);
  const size_t slash = url.find('/', scheme + 3);
  SplitUrl out;
  out.origin = url.substr(0, slash);
  out.path = slash == std::string::npos ? "/" : url.substr(slash);
  return out;
}

// Location of a redirect, made absolute against the URL that answered.
std::string Resolve(const SplitUrl& base, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  if (!location.empty() && location[0] == '/') return base.origin + location;
  const size_t last = base.path.rfind('/');
  return base.origin + base.path.substr(0, last + 1) + location;
}

// A 64-hex sha256 in an (entity-tag) header value: `"abc..."`, `W/"abc..."` or bare.
std::optional<std::string> Sha256InTag(std::string v) {
  if (v.rfind("W/", 0) == 0) v = v.substr(2);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  if (v.size() != 64) return std::nullopt;
  for (char& c : v) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return v;
}

int64_t FileSize(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? -1 : static_cast<int64_t>(n);
}

// " (the error body)" for a short text or JSON error body; nothing for an HTML page, which says
// no more than the status does.
std::string Excerpt(std::string body) {
  const size_t start = body.find_first_not_of(" \t\r\n");
  if (start == std::string::npos || body[start] == '<') return "";
  body = body.substr(start, 200);
  for (char& c : body) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  while (!body.empty() && body.back() == ' ') body.pop_back();
  return " (" + body + ")";
}

// httplib's error names ("Connection", "Read") are terse for a person reading a failed pull.
std::string Describe(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connecting timed out";
    case httplib::Error::Read:
      return "the connection broke while reading";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate is not trusted";
    default:
      return httplib::to_string(e);
  }
}

struct FileCloser {
  void operator()(std::FILE* f) const {
    if (f != nullptr) std::fclose(f);
  }
};

// One transfer (following redirects) appended to the partial file.
struct Transfer {
  const DownloadOptions* options;
  fs::path partial;
  std::string url;
  std::string server_sha256;  // from any hop's X-Linked-Etag / ETag
  int64_t total = -1;
};

// Unavailable: a network failure worth retrying; other errors are final.
Status RunTransfer(Transfer& t, int64_t* resumed_from) {
  std::string url = t.url;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    UF_ASSIGN_OR_RETURN(SplitUrl u, Split(url));
    const int64_t have = std::max<int64_t>(0, FileSize(t.partial));
    httplib::Client cli(u.origin);
    if (!cli.is_valid()) return InvalidArgumentError("cannot fetch " + url + ": bad URL");
    cli.set_follow_location(false);  // each hop's headers may carry the sha256
    cli.set_connection_timeout(t.options->connect_timeout_s, 0);
    cli.set_read_timeout(t.options->read_timeout_s, 0);
    httplib::Headers headers = {{"User-Agent", "ultrafast-pull"}};
    if (have > 0) headers.emplace("Range", "bytes=" + std::to_string(have) + "-");

    int status = 0;
    std::string location, error_body;
    std::unique_ptr<std::FILE, FileCloser> out;
    int64_t bytes = 0, start = 0;
    bool not_gguf = false, write_failed = false;
    const double t0 = NowSeconds();
    double last_report = 0.0;
    auto report = [&](bool done) {
      if (!t.options->on_progress) return;
      const double now = NowSeconds();
      if (!done && now - last_report < 0.1) return;
      last_report = now;
      t.options->on_progress({bytes, t.total, start, now - t0, done});
    };
    auto on_response = [&](const httplib::Response& r) {
      status = r.status;
      for (const char* h : {"X-Linked-Etag", "ETag"}) {
        if (auto sha = Sha256InTag(r.get_header_value(h)); sha && t.server_sha256.empty()) {
          t.server_sha256 = *sha;
        }
      }
      location = r.get_header_value("Location");
      if (status == 206 || status == 200) {
        // 200 to a Range request: the server sends the whole file, so start over.
        start = status == 206 ? have : 0;
        *resumed_from = start;
        bytes = start;
        const std::string range = r.get_header_value("Content-Range");  // bytes a-b/total
        const size_t slash = range.rfind('/');
        if (status == 206 && slash != std::string::npos && range.substr(slash + 1) != "*") {
          t.total = std::strtoll(range.c_str() + slash + 1, nullptr, 10);
        } else if (r.has_header("Content-Length")) {
          t.total = start + std::strtoll(r.get_header_value("Content-Length").c_str(), nullptr, 10);
        }
        out.reset(std::fopen(t.partial.c_str(), status == 206 ? "ab" : "wb"));
        if (out == nullptr) write_failed = true;
        return !write_failed;
      }
      return true;
    };
    auto on_body = [&](const char* data, size_t n) {
      if (out == nullptr) {
        if (error_body.size() < 2048) error_body.append(data, std::min<size_t>(n, 2048));
        return true;
      }
      // A file that does not start with the GGUF magic is refused at its first bytes, not after
      // downloading a whole HTML page or archive.
      if (bytes < 4) {
        const size_t k = std::min<size_t>(n, static_cast<size_t>(4 - bytes));
        if (std::string_view(data, k) != std::string_view("GGUF").substr(bytes, k)) {
          not_gguf = true;
          return false;
        }
      }
      if (std::fwrite(data, 1, n, out.get()) != n) {
        write_failed = true;
        return false;
      }
      bytes += static_cast<int64_t>(n);
      report(false);
      return true;
    };
    httplib::Result res = cli.Get(u.path, headers, on_response, on_body);
    const bool flushed = out == nullptr || std::fflush(out.get()) == 0;
    out.reset();
    if (write_failed || !flushed) {
      return InternalError("cannot write " + t.partial.string() + ": " + std::strerror(errno));
    }
    if (not_gguf) {
      return InvalidArgumentError(url + " is not a GGUF file (it does not start with \"GGUF\")");
    }
    if (!res && res.error() == httplib::Error::SSLServerVerification) {
      // Not a passing failure: retrying would meet the same certificate.
      return FailedPreconditionError("cannot fetch " + url + ": " + Describe(res.error()));
    }
    if (!res) {
      return UnavailableError("network failure fetching " + url + ": " + Describe(res.error()) +
                              " (after " + std::to_string(bytes) + " bytes)");
    }
    if (status >= 300 && status < 400 && !location.empty()) {
      url = Resolve(u, location);
      continue;
    }
    if (status == 206 || status == 200) {
      if (t.total >= 0 && bytes != t.total) {
        return UnavailableError("connection to " + url + " ended after " + std::to_string(bytes) +
                                " of " + std::to_string(t.total) + " bytes");
      }
      report(true);
      return OkStatus();
    }
    if (status == 416 && have > 0) {
      // The partial file is as long as the resource or longer: it belongs to another version of
      // it. Start over.
      std::error_code ec;
      fs::remove(t.partial, ec);
      return UnavailableError("the server refused to resume from byte " + std::to_string(have) +
                              "; starting over");
    }
    const std::string what = url + ": HTTP " + std::to_string(status) + Excerpt(error_body);
    if (status == 404) return NotFoundError("not found: " + what);
    return FailedPreconditionError("cannot download " + what);
  }
  return FailedPreconditionError("too many redirects fetching " + t.url);
}

}  // namespace

StatusOr<std::string> Sha256File(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (f == nullptr) return InternalError("cannot read " + path + ": " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  UF_CHECK(ctx != nullptr && EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    UF_CHECK(EVP_DigestUpdate(ctx.get(), buf.data(), n) == 1);
  }
  if (std::ferror(f.get())) return InternalError("cannot read " + path);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  UF_CHECK(EVP_DigestFinal_ex(ctx.get(), digest, &len) == 1);
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned i = 0; i < len; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

StatusOr<DownloadResult> Download(const ModelSource& src, const std::string& dir,
                                  const DownloadOptions& options) {
  DownloadResult result;
  const fs::path final_path = fs::path(dir) / src.file_name;
  result.path = final_path.string();
  if (fs::is_regular_file(final_path)) {
    result.already_present = true;
    result.bytes = FileSize(final_path);
    return result;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());

  Transfer t;
  t.options = &options;
  t.partial = fs::path(dir) / (src.file_name + ".partial");
  t.url = src.url;
  Status s;
  for (int attempt = 0; attempt <= options.retries; ++attempt) {
    if (attempt > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(options.retry_delay_s));
    }
    int64_t resumed = 0;
    s = RunTransfer(t, &resumed);
    ++result.attempts;
    if (attempt == 0) result.resumed_from = resumed;
    if (s.code() != StatusCode::kUnavailable) break;
    if (attempt < options.retries && options.on_retry) options.on_retry(s, attempt + 1);
  }
  auto discard = [&t](Status why) {
    std::error_code ignored;
    fs::remove(t.partial, ignored);
    return why;
  };
  if (s.code() == StatusCode::kInvalidArgument) return discard(s);
  if (!s.ok()) {
    if (s.code() == StatusCode::kUnavailable && FileSize(t.partial) > 0) {
      return UnavailableError(s.message() + "; " + std::to_string(FileSize(t.partial)) +
                              " bytes kept in " + t.partial.string() +
                              ", run the same pull again to resume");
    }
    if (FileSize(t.partial) == 0) (void)discard(s);
    return s;
  }

  UF_ASSIGN_OR_RETURN(result.sha256, Sha256File(t.partial.string()));
  const std::string expected =
      options.expected_sha256.empty() ? t.server_sha256 : options.expected_sha256;
  if (!expected.empty()) {
    if (result.sha256 != expected) {
      return discard(DataLossError("sha256 of " + src.url + " is " + result.sha256 +
                                   ", the source says " + expected + "; the download was deleted"));
    }
    result.sha256_checked = true;
  }
  // The whole header (metadata and tensor table) is parsed and checked against the file size.
  if (auto gguf = gguf::GgufFile::Open(t.partial.string()); !gguf.ok()) {
    return discard(InvalidArgumentError(src.url + " is not a valid GGUF file (" +
                                        gguf.status().message() + "); the download was deleted"));
  }
  fs::rename(t.partial, final_path, ec);
  if (ec)
    return InternalError("cannot move the download into " + result.path + ": " + ec.message());
  result.bytes = FileSize(final_path);
  return result;
}

}  // namespace uf::pull
