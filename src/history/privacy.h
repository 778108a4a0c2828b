// What may be written, decided before anything is: application and title block lists (PCRE2
// regular expressions, matched case-insensitively anywhere in the string), password controls
// dropped, typed text masked.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "history/event.h"

namespace uf::history {

struct PrivacyOptions {
  std::vector<std::string> block_apps;    // matched against WM_CLASS
  std::vector<std::string> block_titles;  // matched against the window title
};

enum class Verdict {
  kKeep,        // write as is
  kBlocked,     // write a blank "blocked" placeholder: time in a blocked window is not
                // attributed to the window before it, and nothing about it is kept
  kSuppressed,  // write nothing; only the segment's suppressed count grows
};

class PrivacyFilter {
 public:
  // InvalidArgument naming the pattern that does not compile.
  static StatusOr<std::unique_ptr<PrivacyFilter>> Create(const PrivacyOptions& options);
  ~PrivacyFilter();

  // Rewrites *e so that it holds only what may be written, and says how it is to be written.
  Verdict Apply(Event* e) const;

 private:
  struct Pattern;
  PrivacyFilter() = default;
  bool Matches(const std::vector<Pattern>& patterns, const std::string& subject) const;

  std::vector<Pattern> apps_, titles_;
};

// True for AT-SPI roles whose contents are secrets ("password text", ATSPI_ROLE_PASSWORD_TEXT).
bool IsPasswordRole(std::string_view role);

}  // namespace uf::history
