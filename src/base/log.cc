#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace uf {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("UF_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(env, "warning") == 0) return LogLevel::kWarning;
  if (std::strcmp(env, "error") == 0) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& MinLevelStorage() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

}  // namespace

LogLevel MinLogLevel() { return static_cast<LogLevel>(MinLevelStorage().load()); }
void SetMinLogLevel(LogLevel level) { MinLevelStorage().store(static_cast<int>(level)); }

namespace internal {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  static const char kTags[] = {'D', 'I', 'W', 'E'};
  const char* base = std::strrchr(file, '/');
  stream_ << kTags[static_cast<int>(level)] << " " << (base ? base + 1 : file) << ":" << line
          << "] ";
}

LogMessage::~LogMessage() {
  stream_ << "\n";
  std::fputs(stream_.str().c_str(), stderr);
}

}  // namespace internal
}  // namespace uf
