// "Where was I?": the question and the last N segment summaries as chat messages for the engine,
// and the citations an answer carries (which summary files it was given).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace uf::history {

struct SummaryDoc {
  std::string id;          // "S1", "S2", ... in the order given to the model (oldest first)
  std::string path;        // relative to the history folder: summaries/<segment>.md
  std::string start, end;  // from the front matter
  std::string text;        // what the model reads: the summary without links and sources
};

// The newest n summaries under dir, oldest first. NotFound (saying to run `history summarize`)
// when there are none.
StatusOr<std::vector<SummaryDoc>> RecentSummaries(const std::string& dir, int n);

// [{"role": "system", ...}, {"role": "user", ...}]: answer from the summaries only, citing
// them as [S1], [S2].
nlohmann::json AskMessages(const std::string& question, const std::vector<SummaryDoc>& docs);

// [{"id", "path", "start", "end"}] for each summary the model was given.
nlohmann::json Citations(const std::vector<SummaryDoc>& docs);

// The answer followed by a "Sources:" list of the summaries, for the terminal.
std::string AnswerWithSources(const std::string& answer, const std::vector<SummaryDoc>& docs);

}  // namespace uf::history
