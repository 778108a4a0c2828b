#include "server/openai_response.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace uf::server {

using json = nlohmann::json;

std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const tokenizer::Utf8Scan scan = tokenizer::ScanUtf8(text);
    if (scan.kind == tokenizer::Utf8Kind::kValid) {
      out.append(text.substr(0, scan.length));
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
    }
    text.remove_prefix(scan.length);
  }
  return out;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseData(const json& j) { return "data: " + Dump(j) + "\n\n"; }

json UsageJson(const engine::GenerationEvent& e) {
  json u = {{"prompt_tokens", e.prompt_tokens},
            {"completion_tokens", e.completion_tokens},
            {"total_tokens", e.prompt_tokens + e.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", e.cached_tokens}}}};
  if (e.speculation != engine::SpecMode::kOff) {
    u["completion_tokens_details"] = {
        {"accepted_prediction_tokens", e.accepted_tokens},
        {"rejected_prediction_tokens", e.drafted_tokens - e.accepted_tokens}};
    u["speculation"] = {{"mode", e.speculation == engine::SpecMode::kNgram ? "ngram" : "draft"},
                        {"drafted_tokens", e.drafted_tokens},
                        {"accepted_tokens", e.accepted_tokens}};
  }
  return u;
}

engine::GenerationEvent MergeFinals(const std::vector<engine::GenerationEvent>& finals) {
  engine::GenerationEvent m;
  if (finals.empty()) return m;
  m = finals[0];
  for (size_t i = 1; i < finals.size(); ++i) {
    const engine::GenerationEvent& e = finals[i];
    m.completion_tokens += e.completion_tokens;
    m.drafted_tokens += e.drafted_tokens;
    m.accepted_tokens += e.accepted_tokens;
    if (e.speculation != engine::SpecMode::kOff) m.speculation = e.speculation;
    // A failed choice fails the request.
    const bool ok =
        m.finish == engine::FinishReason::kStop || m.finish == engine::FinishReason::kLength;
    if (ok && e.finish != engine::FinishReason::kStop &&
        e.finish != engine::FinishReason::kLength) {
      m.finish = e.finish;
      m.error = e.error;
    }
  }
  return m;
}

ResponseBuilder::ResponseBuilder(ResponseOptions options, const Tokenizer& tokenizer)
    : options_(std::move(options)), tokenizer_(tokenizer) {
  options_.n = std::max(options_.n, 1);
  choices_.resize(options_.n);
  for (Choice& c : choices_) {
    if (options_.endpoint == Endpoint::kChat) c.parser.emplace(ReplyFormatOf(options_));
    c.text_offset = static_cast<int64_t>(options_.echo.size());
    c.text = options_.echo;
    c.cmpl_logprobs = {{"tokens", json::array()},
                       {"token_logprobs", json::array()},
                       {"top_logprobs", json::array()},
                       {"text_offset", json::array()}};
  }
}

json ResponseBuilder::LogprobsJson(Choice& c, const std::vector<engine::TokenLogprob>& lps) {
  if (options_.endpoint == Endpoint::kChat) {
    json content = json::array();
    auto entry = [&](int32_t id, float lp) {
      const std::string piece = tokenizer_.TokenToPiece(id);
      json bytes = json::array();
      for (unsigned char ch : piece) bytes.push_back(static_cast<int>(ch));
      return json{{"token", piece}, {"logprob", lp}, {"bytes", bytes}};
    };
    for (const engine::TokenLogprob& t : lps) {
      json e = entry(t.token, t.logprob);
      json top = json::array();
      for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const engine::TokenLogprob& t : lps) {
    const std::string piece = tokenizer_.TokenToPiece(t.token);
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[ValidUtf8(tokenizer_.TokenToPiece(id))] = lp;
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(c.text_offset);
    c.text_offset += static_cast<int64_t>(piece.size());
  }
  return out;
}

json ResponseBuilder::Chunk(json choice) const {
  json c = {{"id", options_.id},
            {"object",
             options_.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", options_.created},
            {"model", options_.model},
            {"system_fingerprint", "fp_ultrafast"},
            {"service_tier", scheduler::ServiceTierName(tier_)},
            {"choices", json::array()}};
  if (!choice.is_null()) c["choices"].push_back(std::move(choice));
  if (options_.include_usage) c["usage"] = nullptr;
  return c;
}

json ResponseBuilder::ChoiceDelta(int index, std::string_view text,
                                  const std::vector<engine::TokenLogprob>& lps,
                                  const char* finish_reason, std::string_view reasoning) {
  json lp = options_.logprobs && !lps.empty() ? LogprobsJson(choices_[index], lps) : json(nullptr);
  json finish = finish_reason ? json(finish_reason) : json(nullptr);
  if (options_.endpoint == Endpoint::kChat) {
    json delta = json::object();
    // vLLM's and llama.cpp's name for it, which clients of reasoning models read.
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!text.empty()) delta["content"] = text;
    return {{"index", index}, {"delta", delta}, {"logprobs", lp}, {"finish_reason", finish}};
  }
  return {{"index", index}, {"text", text}, {"logprobs", lp}, {"finish_reason", finish}};
}

std::string ResponseBuilder::Stream(int index, const engine::GenerationEvent& event) {
  tier_ = event.service_tier;
  Choice& c = choices_[index];
  std::string out;
  if (!c.started) {
    c.started = true;
    if (options_.endpoint == Endpoint::kChat) {
      out += SseData(Chunk({{"index", index},
                            {"delta", {{"role", "assistant"}, {"content", ""}}},
                            {"logprobs", nullptr},
                            {"finish_reason", nullptr}}));
    } else if (!options_.echo.empty()) {
      out += SseData(Chunk(ChoiceDelta(index, options_.echo, {}, nullptr)));
    }
  }
  if (Failed(event)) return out + StreamError(FailureOf(event));
  ReplyPiece piece;
  if (c.parser) {
    piece = c.parser->Push(event.text, event.n_tokens);
  } else {
    piece.content = event.text;
  }
  if (!piece.content.empty() || !piece.reasoning.empty() ||
      (options_.logprobs && !event.logprobs.empty())) {
    out +=
        SseData(Chunk(ChoiceDelta(index, piece.content, event.logprobs, nullptr, piece.reasoning)));
  }
  if (event.finish != engine::FinishReason::kNone && !c.finished) {
    c.finished = true;
    c.final_event = event;
    ++finished_;
    const char* finish = engine::FinishReasonName(event.finish);
    if (c.parser) finish = StreamReply(index, finish, &out);
    out += SseData(Chunk(ChoiceDelta(index, "", {}, finish)));
    if (done()) {
      if (options_.include_usage) {
        json u = Chunk(nullptr);
        u["usage"] = Usage();
        out += SseData(u);
      }
      out += kSseDone;
    }
  }
  return out;
}

json ResponseBuilder::ToolCallsJson(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (const ToolCall& call : calls) {
    out.push_back({{"id", call.id},
                   {"type", "function"},
                   {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  return out;
}

const char* ResponseBuilder::StreamReply(int index, const char* finish, std::string* out) {
  Choice& c = choices_[index];
  const ReplyEnd reply = c.parser->Finish();
  if (!reply.content.empty() || !reply.reasoning.empty()) {
    out->append(SseData(Chunk(ChoiceDelta(index, reply.content, {}, nullptr, reply.reasoning))));
  }
  if (reply.calls.empty()) return finish;
  if (options_.legacy_functions) {  // one call, as delta.function_call
    const ToolCall& call = reply.calls[0];
    json head = ChoiceDelta(index, "", {}, nullptr);
    head["delta"]["function_call"] = {{"name", call.name}, {"arguments", ""}};
    out->append(SseData(Chunk(std::move(head))));
    json args = ChoiceDelta(index, "", {}, nullptr);
    args["delta"]["function_call"] = {{"arguments", call.arguments}};
    out->append(SseData(Chunk(std::move(args))));
    return "function_call";
  }
  // As OpenAI streams a call: its id, type and name first, then the arguments (clients
  // concatenate the argument pieces of each index).
  for (size_t k = 0; k < reply.calls.size(); ++k) {
    const ToolCall& call = reply.calls[k];
    json head = ChoiceDelta(index, "", {}, nullptr);
    head["delta"]["tool_calls"] =
        json::array({{{"index", k},
                      {"id", call.id},
                      {"type", "function"},
                      {"function", {{"name", call.name}, {"arguments", ""}}}}});
    out->append(SseData(Chunk(std::move(head))));
    json args = ChoiceDelta(index, "", {}, nullptr);
    args["delta"]["tool_calls"] =
        json::array({{{"index", k}, {"function", {{"arguments", call.arguments}}}}});
    out->append(SseData(Chunk(std::move(args))));
  }
  return "tool_calls";
}

std::string ResponseBuilder::StreamError(const ApiError& error) {
  return "data: " + ErrorBody(error) + "\n\n" + std::string(kSseDone);
}

void ResponseBuilder::Add(int index, const engine::GenerationEvent& event) {
  tier_ = event.service_tier;
  Choice& c = choices_[index];
  c.text += event.text;
  if (c.parser) {  // only to count the reasoning's tokens: Body() parses the whole text
    c.parser->Push(event.text, event.n_tokens);
    if (event.finish != engine::FinishReason::kNone) c.parser->Finish();
  }
  if (options_.logprobs && !event.logprobs.empty()) {
    json lp = LogprobsJson(c, event.logprobs);
    if (options_.endpoint == Endpoint::kChat) {
      for (json& e : lp["content"]) c.chat_logprobs.push_back(std::move(e));
    } else {
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
        for (json& e : lp[key]) c.cmpl_logprobs[key].push_back(std::move(e));
      }
    }
  }
  if (event.finish != engine::FinishReason::kNone && !c.finished) {
    c.finished = true;
    c.final_event = event;
    ++finished_;
  }
}

json ResponseBuilder::Usage() const {
  json u = UsageJson(Final());
  int64_t reasoning = 0;
  for (const Choice& c : choices_) reasoning += c.parser ? c.parser->reasoning_tokens() : 0;
  if (reasoning > 0) u["completion_tokens_details"]["reasoning_tokens"] = reasoning;
  return u;
}

engine::GenerationEvent ResponseBuilder::Final() const {
  std::vector<engine::GenerationEvent> finals;
  for (const Choice& c : choices_) finals.push_back(c.final_event);
  return MergeFinals(finals);
}

std::string ResponseBuilder::Body() const {
  json choices = json::array();
  for (int i = 0; i < options_.n; ++i) {
    const Choice& c = choices_[i];
    json lp = nullptr;
    if (options_.logprobs) {
      lp = options_.endpoint == Endpoint::kChat
               ? json{{"content", c.chat_logprobs}, {"refusal", nullptr}}
               : c.cmpl_logprobs;
    }
    const char* finish = engine::FinishReasonName(c.final_event.finish);
    if (options_.endpoint == Endpoint::kChat) {
      const ReplyEnd reply = ReplyParser::Parse(ReplyFormatOf(options_), c.text);
      json message = {{"role", "assistant"}, {"content", reply.content}, {"refusal", nullptr}};
      if (!reply.reasoning.empty()) message["reasoning_content"] = reply.reasoning;
      if (!reply.calls.empty()) {
        message["content"] = reply.content.empty() ? json(nullptr) : json(reply.content);
        if (options_.legacy_functions) {
          message["function_call"] = {{"name", reply.calls[0].name},
                                      {"arguments", reply.calls[0].arguments}};
          finish = "function_call";
        } else {
          message["tool_calls"] = ToolCallsJson(reply.calls);
          finish = "tool_calls";
        }
      }
      choices.push_back({{"index", i},
                         {"message", std::move(message)},
                         {"logprobs", lp},
                         {"finish_reason", finish}});
    } else {
      choices.push_back(
          {{"index", i}, {"text", c.text}, {"logprobs", lp}, {"finish_reason", finish}});
    }
  }
  json body = {
      {"id", options_.id},
      {"object", options_.endpoint == Endpoint::kChat ? "chat.completion" : "text_completion"},
      {"created", options_.created},
      {"model", options_.model},
      {"system_fingerprint", "fp_ultrafast"},
      {"service_tier", scheduler::ServiceTierName(tier_)},
      {"choices", std::move(choices)},
      {"usage", Usage()}};
  return Dump(body);
}

}  // namespace uf::server
