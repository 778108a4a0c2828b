#include "history/ask.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace uf::history {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxDocChars = 2000;  // a segment's summary past this is cut for the prompt

std::string FrontMatterValue(const std::string& md, const std::string& key) {
  std::istringstream in(md);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ": ", 0) == 0) return line.substr(key.size() + 2);
  }
  return "";
}

// The summary as the model reads it: citations and the sources section dropped (the answer's
// citations are the summaries themselves), and cut to kMaxDocChars.
std::string ForModel(const std::string& md) {
  std::istringstream in(md);
  std::string line, out;
  bool front = false;
  while (std::getline(in, line)) {
    if (line == "---") {
      front = !front;
      continue;
    }
    if (front) {
      if (line.rfind("start: ", 0) != 0 && line.rfind("end: ", 0) != 0 &&
          line.rfind("applications: ", 0) != 0) {
        continue;
      }
    }
    if (line.rfind("## Sources", 0) == 0) break;
    if (const size_t cite = line.find(" [L"); cite != std::string::npos) line.resize(cite);
    if (line.empty() && (out.empty() || out.ends_with("\n\n"))) continue;
    out += line + "\n";
  }
  if (out.size() > kMaxDocChars) out = out.substr(0, kMaxDocChars) + "…\n";
  return out;
}

}  // namespace

StatusOr<std::vector<SummaryDoc>> RecentSummaries(const std::string& dir, int n) {
  const fs::path root = fs::path(dir) / "summaries";
  std::vector<std::string> names;
  std::error_code ec;
  if (fs::exists(root, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".md") {
        names.push_back(e.path().filename().string());
      }
    }
  }
  if (names.empty()) {
    return NotFoundError("no summaries in " + root.string() +
                         ": record with `ultrafast history record`, then run `ultrafast history "
                         "summarize`");
  }
  // Names are UTC timestamps: their order is time order.
  std::sort(names.begin(), names.end());
  if (n > 0 && static_cast<int>(names.size()) > n) names.erase(names.begin(), names.end() - n);
  std::vector<SummaryDoc> docs;
  for (const std::string& name : names) {
    std::ifstream in(root / name, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string md = ss.str();
    SummaryDoc d;
    d.id = "S" + std::to_string(docs.size() + 1);
    d.path = "summaries/" + name;
    d.start = FrontMatterValue(md, "start");
    d.end = FrontMatterValue(md, "end");
    d.text = ForModel(md);
    docs.push_back(std::move(d));
  }
  return docs;
}

nlohmann::json AskMessages(const std::string& question, const std::vector<SummaryDoc>& docs) {
  std::string context;
  for (const SummaryDoc& d : docs) context += "[" + d.id + "]\n" + d.text + "\n";
  const std::string system =
      "You answer questions about the user's recent computer activity. Use only the activity "
      "summaries given, oldest first; the last one is the most recent. Cite the summaries you "
      "use as [S1], [S2]. If they do not say, answer that the history does not show it.";
  return nlohmann::json::array(
      {{{"role", "system"}, {"content", system}},
       {{"role", "user"},
        {"content", "Activity summaries:\n\n" + context + "Question: " + question}}});
}

nlohmann::json Citations(const std::vector<SummaryDoc>& docs) {
  nlohmann::json out = nlohmann::json::array();
  for (const SummaryDoc& d : docs) {
    out.push_back({{"id", d.id}, {"path", d.path}, {"start", d.start}, {"end", d.end}});
  }
  return out;
}

std::string AnswerWithSources(const std::string& answer, const std::vector<SummaryDoc>& docs) {
  std::string out = answer + "\n\nSources:\n";
  for (const SummaryDoc& d : docs) {
    out += "  [" + d.id + "] " + d.path + " (" + d.start + " to " + d.end + ")\n";
  }
  return out;
}

}  // namespace uf::history
