// libFuzzer target: request bodies of every API (OpenAI chat, completions and Responses, Anthropic
// Messages and count_tokens) through their parsers and validators, and whatever they produce
// through the error/response formatting. Any input must give
// a request or a 400, never a crash, hang or unbounded recursion.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/stop_matcher.h"
#include "server/anthropic_api.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/responses_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  uf::server::ParseOptions options;
  options.n_vocab = 50000;
  for (uf::server::Endpoint ep : {uf::server::Endpoint::kChat, uf::server::Endpoint::kCompletion}) {
    uf::server::ApiRequest r;
    if (auto error = uf::server::ParseRequest(ep, body, options, &r)) {
      if (error->status != 400 || error->message.empty()) __builtin_trap();
      (void)uf::server::ErrorBody(*error);
      continue;
    }
    (void)uf::server::Dump(r.messages);
    for (int32_t t : r.prompt_tokens) {
      if (t < 0 || t >= options.n_vocab) __builtin_trap();
    }
    // Stop strings from the request against text from the request.
    uf::engine::StopMatcher stop(r.stop);
    std::string_view text = r.prompt;
    while (!text.empty() && !stop.stopped()) {
      const size_t n = std::min<size_t>(text.size(), 3);
      (void)stop.Push(text.substr(0, n));
      text.remove_prefix(n);
    }
    (void)stop.Flush();
  }
  uf::server::ResponsesRequest rr;
  if (auto error = uf::server::ParseResponsesRequest(body, options, &rr)) {
    if (error->status != 400 || error->message.empty()) __builtin_trap();
  } else {
    (void)uf::server::Dump(rr.api.messages);
  }
  for (bool count_tokens : {false, true}) {
    uf::server::ApiRequest m;
    if (auto error = uf::server::ParseMessagesRequest(body, options, count_tokens, &m)) {
      if (error->status != 400 || error->message.empty()) __builtin_trap();
      (void)uf::server::ErrorBodyFor(uf::server::ErrorStyle::kAnthropic, *error);
    } else {
      (void)uf::server::Dump(m.messages);
    }
  }
  (void)uf::server::ValidUtf8(body);
  return 0;
}
