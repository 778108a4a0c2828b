// Minimal leveled logging to stderr. UF_LOG(INFO) << "...";
#pragma once

#include <sstream>

namespace uf {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Messages below this level are dropped. Default kInfo; UF_LOG_LEVEL=debug|info|warning|error.
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace uf

#define UF_LOG_LEVEL_DEBUG ::uf::LogLevel::kDebug
#define UF_LOG_LEVEL_INFO ::uf::LogLevel::kInfo
#define UF_LOG_LEVEL_WARNING ::uf::LogLevel::kWarning
#define UF_LOG_LEVEL_ERROR ::uf::LogLevel::kError
#define UF_LOG(level)                                         \
  if (UF_LOG_LEVEL_##level < ::uf::MinLogLevel()) {           \
  } else                                                      \
    ::uf::internal::LogMessage(UF_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
