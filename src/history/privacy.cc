#include "history/privacy.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

namespace uf::history {

struct PrivacyFilter::Pattern {
  std::shared_ptr<pcre2_code> code;
};

PrivacyFilter::~PrivacyFilter() = default;

namespace {

StatusOr<std::shared_ptr<pcre2_code>> Compile(const std::string& regex, const char* list) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Caseless: a block list that misses "Bank" because it says "bank" would leak.
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                    PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_CASELESS, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgumentError(std::string(list) + " pattern '" + regex +
                                "' does not compile at " + std::to_string(offset) + ": " +
                                reinterpret_cast<const char*>(message));
  }
  return std::shared_ptr<pcre2_code>(code, pcre2_code_free);
}

}  // namespace

StatusOr<std::unique_ptr<PrivacyFilter>> PrivacyFilter::Create(const PrivacyOptions& options) {
  std::unique_ptr<PrivacyFilter> f(new PrivacyFilter());
  for (const std::string& r : options.block_apps) {
    UF_ASSIGN_OR_RETURN(auto code, Compile(r, "--block-app"));
    f->apps_.push_back({std::move(code)});
  }
  for (const std::string& r : options.block_titles) {
    UF_ASSIGN_OR_RETURN(auto code, Compile(r, "--block-title"));
    f->titles_.push_back({std::move(code)});
  }
  return f;
}

bool PrivacyFilter::Matches(const std::vector<Pattern>& patterns,
                            const std::string& subject) const {
  for (const Pattern& p : patterns) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(p.code.get(), nullptr);
    UF_CHECK(md != nullptr) << "out of memory";
    const int rc = pcre2_match(p.code.get(), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                               subject.size(), 0, 0, md, nullptr);
    pcre2_match_data_free(md);
    // A match, or a pattern too costly to decide (match limit): block, never leak.
    if (rc >= 0 || rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT) {
      return true;
    }
  }
  return false;
}

bool IsPasswordRole(std::string_view role) {
  std::string r(role);
  std::transform(r.begin(), r.end(), r.begin(), [](unsigned char c) { return std::tolower(c); });
  return r.find("password") != std::string::npos;
}

Verdict PrivacyFilter::Apply(Event* e) const {
  if (e->kind == EventKind::kWindow || e->kind == EventKind::kFocus) {
    if (Matches(apps_, e->app) || (e->kind == EventKind::kWindow && Matches(titles_, e->title))) {
      if (e->kind == EventKind::kFocus) return Verdict::kSuppressed;
      const double ts = e->ts;
      *e = Event{};
      e->kind = EventKind::kWindow;
      e->ts = ts;
      e->blocked = true;
      return Verdict::kBlocked;
    }
  }
  if (e->kind == EventKind::kFocus) {
    if (IsPasswordRole(e->role)) return Verdict::kSuppressed;
    // Typed text is never kept, only that there was some.
    if (!e->text.empty()) e->text = "[masked]";
  }
  return Verdict::kKeep;
}

}  // namespace uf::history
