// `ultrafast pull URL|hf://OWNER/REPO/FILE.gguf [-o DIR]`: downloads a model into the cache.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/common.h"
#include "pull/downloader.h"
#include "pull/model_cache.h"

namespace uf::cli {
namespace {

struct PullArgs {
  std::string source;
  std::string dir;
  std::string sha256;
  int retries = 3;
};

std::string Bytes(double b) {
  char buf[32];
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / (1024.0 * 1024));
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f KiB", b / 1024.0);
  }
  return buf;
}

std::string Duration(double s) {
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

// "[#######.......]  42%  12.3 MiB / 29.0 MiB  5.1 MiB/s  0:03 left". The rate counts only this
// transfer's bytes, not what an earlier partial file held.
std::string ProgressLine(const pull::DownloadProgress& p, bool bar) {
  const double rate = p.elapsed_s > 0 ? (p.bytes - p.resumed_from) / p.elapsed_s : 0.0;
  std::string line;
  if (p.total > 0) {
    const double frac = std::min(1.0, static_cast<double>(p.bytes) / p.total);
    if (bar) {
      constexpr int kWidth = 24;
      const int fill = static_cast<int>(frac * kWidth);
      line += "[" + std::string(fill, '#') + std::string(kWidth - fill, '.') + "] ";
    }
    char pct[16];
    std::snprintf(pct, sizeof(pct), "%3.0f%%  ", frac * 100);
    line += pct + Bytes(p.bytes) + " / " + Bytes(p.total);
  } else {
    line += Bytes(p.bytes);
  }
  line += "  " + Bytes(rate) + "/s";
  if (p.done) {
    line += "  in " + Duration(p.elapsed_s);
  } else if (p.total > 0 && rate > 0) {
    line += "  " + Duration((p.total - p.bytes) / rate) + " left";
  }
  return line;
}

int RunPull(const PullArgs& args) {
  auto src = pull::ParseModelSource(args.source);
  if (!src.ok()) Fail("pull", src.status());
  const std::string dir = args.dir.empty() ? pull::DefaultCacheDir() : args.dir;
  pull::DownloadOptions options;
  options.retries = args.retries;
  options.expected_sha256 = args.sha256;
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  double last_line = -1e9;
  bool mid_line = false;  // a redrawn bar is on the terminal's current line
  options.on_progress = [tty, &last_line, &mid_line](const pull::DownloadProgress& p) {
    if (tty) {
      mid_line = !p.done;
      std::fprintf(stderr, "\r%s\033[K%s", ProgressLine(p, true).c_str(), p.done ? "\n" : "");
    } else if (p.done || p.elapsed_s - last_line >= 5.0) {
      // Logs and pipes get a plain line every 5 s instead of a redrawn bar.
      last_line = p.elapsed_s;
      std::fprintf(stderr, "%s\n", ProgressLine(p, false).c_str());
    }
  };
  options.on_retry = [&args, &mid_line](const Status& why, int retry) {
    std::fprintf(stderr, "%s%s; retrying (%d of %d)\n", mid_line ? "\n" : "", why.message().c_str(),
                 retry, args.retries);
    mid_line = false;
  };
  std::fprintf(stderr, "pulling %s\n", src->url.c_str());
  auto r = pull::Download(*src, dir, options);
  if (!r.ok()) {
    if (mid_line) std::fputc('\n', stderr);
    Fail("pull", r.status());
  }
  if (r->already_present) {
    std::fprintf(stderr, "already downloaded\n");
  } else {
    if (r->resumed_from > 0) {
      std::fprintf(stderr, "resumed from byte %lld\n", static_cast<long long>(r->resumed_from));
    }
    std::fprintf(stderr, "sha256 %s (%s)\n", r->sha256.c_str(),
                 r->sha256_checked ? "verified" : "the source gave none to check against");
  }
  // stdout: the path alone, for scripts (`ultrafast run -m "$(ultrafast pull URL)"`).
  std::printf("%s\n", r->path.c_str());
  return 0;
}

}  // namespace

void AddPullCommand(CLI::App& app) {
  auto args = std::make_shared<PullArgs>();
  CLI::App* cmd = app.add_subcommand(
      "pull",
      "download a GGUF model into the cache ($XDG_CACHE_HOME/ultrafast); run -m NAME finds it");
  cmd->add_option("source", args->source, "http(s)://.../FILE.gguf or hf://OWNER/REPO/FILE.gguf")
      ->required();
  cmd->add_option("-o,--output-dir", args->dir, "folder to download into (default: the cache)");
  cmd->add_option("--sha256", args->sha256, "expected sha256 (hex) when the source gives none");
  cmd->add_option("--retries", args->retries, "network failures resumed before giving up")
      ->capture_default_str();
  cmd->callback([args] {
    if (const int code = RunPull(*args); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace uf::cli
