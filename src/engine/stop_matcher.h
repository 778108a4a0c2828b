// Stop strings on streamed text. Generated text arrives in pieces; a stop string may span pieces,
// so a suffix that could still grow into a stop string is held back until it either completes
// (generation stops; the stop string and everything after it are dropped, as the OpenAI API does)
// or stops matching (it is released).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace uf::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends text; returns what can be emitted now. After a stop string completes, stopped() is
  // true, the result ends just before the stop string and later calls return "".
  std::string Push(std::string_view text);
  // Releases the held-back suffix (generation ended for another reason).
  std::string Flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched (the earliest in the text), once stopped().
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;  // non-empty strings only
  std::string held_;                // a suffix that is a proper prefix of some stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace uf::engine
