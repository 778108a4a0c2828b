#include "engine/stop_matcher.h"

#include <algorithm>

namespace uf::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  if (stops_.empty()) return std::string(text);
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(text);
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = buf.find(s);
    if (at < first) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    buf.resize(first);
    return buf;
  }
  // Hold the longest suffix that is a proper prefix of a stop string. Stop strings and text are
  // valid UTF-8 and a match starts at a stop string's first byte, so the cut is on a character
  // boundary.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(buf.size(), s.size() - 1); k > hold; --k) {
      if (std::string_view(buf).substr(buf.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  held_ = buf.substr(buf.size() - hold);
  buf.resize(buf.size() - hold);
  return buf;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return stopped_ ? std::string() : out;
}

}  // namespace uf::engine
