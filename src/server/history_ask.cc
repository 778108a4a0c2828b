// POST /v1/history/ask: Computer History's "where was I?" on `serve`. The HTTP thread reads the
// summaries and builds the prompt; the answer is an ordinary chat completion on the ultrafast
// tier (same key check, quota, metering and engine thread as /v1/chat/completions).
#include <httplib.h>

#include "history/ask.h"
#include "server/http_server.h"
#include "server/openai_response.h"

namespace uf::server {

namespace {
constexpr int kDefaultSummaries = 6;
constexpr int kDefaultMaxTokens = 256;
constexpr size_t kMaxQuestionBytes = 4000;
}  // namespace

void HttpServer::HandleHistoryAsk(const httplib::Request& req, httplib::Response& res) {
  using nlohmann::json;
  const char* name = "history_ask";
  if (!Authorized(req, res, name)) return;
  if (options_.history_dir.empty()) {
    ApiError e = InvalidRequest(
        "Computer History is not enabled on this server (start it with serve --history-dir DIR).",
        "", "history_disabled");
    e.status = 404;
    return SendError(res, e, name);
  }
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) {
    return SendError(res, InvalidRequest("The body must be a JSON object.", "", "invalid_json"),
                     name);
  }
  for (const auto& [key, value] : body.items()) {
    if (key != "question" && key != "summaries" && key != "max_tokens") {
      return SendError(res,
                       InvalidRequest("Unrecognized request argument supplied: " + key, key,
                                      "unknown_parameter"),
                       name);
    }
  }
  auto q = body.find("question");
  if (q == body.end() || !q->is_string() || q->get<std::string>().empty() ||
      q->get<std::string>().size() > kMaxQuestionBytes) {
    return SendError(res,
                     InvalidRequest("question must be a non-empty string of at most 4000 bytes.",
                                    "question", "invalid_value"),
                     name);
  }
  int summaries = kDefaultSummaries;
  if (auto it = body.find("summaries"); it != body.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 100) {
      return SendError(
          res,
          InvalidRequest("summaries must be an integer in [1, 100].", "summaries", "invalid_value"),
          name);
    }
    summaries = it->get<int>();
  }
  json max_tokens = kDefaultMaxTokens;
  if (auto it = body.find("max_tokens"); it != body.end()) max_tokens = *it;  // checked below

  auto docs = history::RecentSummaries(options_.history_dir, summaries);
  if (!docs.ok()) {
    ApiError e = InvalidRequest(docs.status().message(), "", "history_empty");
    e.status = 404;
    return SendError(res, e, name);
  }
  while (true) {
    const json chat = {{"model", options_.model_id},
                       {"messages", history::AskMessages(q->get<std::string>(), *docs)},
                       {"service_tier", "ultrafast"},
                       {"temperature", 0},
                       {"max_tokens", max_tokens}};
    httplib::Request inner = req;
    inner.body = chat.dump(-1, ' ', false, json::error_handler_t::replace);
    httplib::Response answer;
    HandleGenerate(Endpoint::kChat, inner, answer);
    // httplib leaves the status at -1 (sent as 200) when a handler only sets the content.
    if (answer.status == -1) answer.status = 200;
    const json out = json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
    const bool too_long = answer.status == 400 && out.is_object() && out.contains("error") &&
                          out["error"].value("code", json()) == "context_length_exceeded";
    // The oldest summaries give way first when the context is short.
    if (too_long && docs->size() > 1) {
      docs->erase(docs->begin());
      for (size_t i = 0; i < docs->size(); ++i) (*docs)[i].id = "S" + std::to_string(i + 1);
      continue;
    }
    if (answer.status != 200 || !out.is_object() || !out.contains("choices")) {
      res = std::move(answer);
      return;
    }
    json result = {{"object", "history.answer"},
                   {"model", options_.model_id},
                   {"answer", out["choices"][0]["message"].value("content", json(""))},
                   {"citations", history::Citations(*docs)}};
    for (const char* key : {"service_tier", "usage"}) {
      if (out.contains(key)) result[key] = out[key];
    }
    res.status = 200;
    res.set_content(Dump(result), "application/json");
    return;
  }
}

}  // namespace uf::server
