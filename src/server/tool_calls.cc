#include "server/tool_calls.h"

#include <algorithm>
#include <random>

#include "grammar/json_schema.h"

namespace uf::server {
namespace {

using json = nlohmann::json;

std::string CallId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id.push_back(kAlphabet[rng() % (sizeof(kAlphabet) - 1)]);
  return id;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() &&
         (s.front() == ' ' || s.front() == '\n' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\n' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// {"name": ..., "<args>": {...}} naming a known function -> a call.
bool ToCall(std::string_view text, const std::set<std::string>& names, ToolCall* call) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const std::string name = j["name"].get<std::string>();
  if (!names.count(name)) return false;
  json args = json::object();
  for (const char* key : {"arguments", "parameters"}) {
    if (j.contains(key)) args = j[key];
  }
  // Some models write the arguments as a JSON string; clients expect the object's text.
  if (args.is_string()) {
    json inner = json::parse(args.get<std::string>(), nullptr, false);
    if (!inner.is_discarded()) args = inner;
  }
  call->id = CallId();
  call->name = name;
  call->arguments = args.dump();
  return true;
}

}  // namespace

ToolCallFormat DetectToolCallFormat(std::string_view source) {
  if (source.find("<|channel|>") != std::string_view::npos &&
      source.find("<|message|>") != std::string_view::npos) {
    return ToolCallFormat::kHarmony;
  }
  if (source.find("<|python_tag|>") != std::string_view::npos ||
      source.find("ipython") != std::string_view::npos) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kHermes;
}

ParsedReply ParseToolCalls(std::string_view text, ToolCallFormat format,
                           const std::set<std::string>& names) {
  ParsedReply out;
  if (format == ToolCallFormat::kHarmony) {
    out.content = std::string(text);
    return out;
  }
  if (format == ToolCallFormat::kLlama3Json) {
    std::string_view body = Trim(text);
    constexpr std::string_view kTag = "<|python_tag|>";
    if (body.starts_with(kTag)) body = Trim(body.substr(kTag.size()));
    // One call, or several separated by ';' (Llama 3.2's parallel form).
    std::vector<ToolCall> calls;
    size_t start = 0;
    bool all = !body.empty();
    while (all && start <= body.size()) {
      size_t end = body.find(';', start);
      // ';' inside a JSON string would split wrongly: retry on the whole rest first.
      ToolCall call;
      if (ToCall(body.substr(start), names, &call)) {
        calls.push_back(std::move(call));
        break;
      }
      if (end == std::string_view::npos || !ToCall(body.substr(start, end - start), names, &call)) {
        all = false;
        break;
      }
      calls.push_back(std::move(call));
      start = end + 1;
    }
    if (all && !calls.empty()) {
      out.calls = std::move(calls);
    } else {
      out.content = std::string(text);
    }
    return out;
  }
  constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  std::string content;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    size_t close = text.find(kClose, open + kOpen.size());
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    ToolCall call;
    if (!ToCall(Trim(text.substr(open + kOpen.size(), body_end - open - kOpen.size())), names,
                &call)) {
      content.append(text.substr(pos, body_end - pos));
      pos = body_end;
      continue;
    }
    content.append(text.substr(pos, open - pos));
    out.calls.push_back(std::move(call));
    pos = close == std::string_view::npos ? text.size() : close + kClose.size();
  }
  if (pos < text.size()) content.append(text.substr(pos));
  out.content = std::string(out.calls.empty() ? text : Trim(content));
  return out;
}

size_t StreamableContent(std::string_view pending, ToolCallFormat format, bool at_start,
                         bool* call_starts) {
  *call_starts = false;
  if (format == ToolCallFormat::kHarmony) return pending.size();
  if (format == ToolCallFormat::kLlama3Json) {
    if (!at_start) return pending.size();
    const std::string_view body = Trim(pending);
    if (body.empty()) return 0;  // only white space so far: the reply's kind is not known yet
    if (body.front() == '{' || body.front() == '<') {
      *call_starts = true;
      return 0;
    }
    return pending.size();
  }
  constexpr std::string_view kOpen = "<tool_call>";
  const size_t open = pending.find(kOpen);
  if (open != std::string_view::npos) {
    *call_starts = true;
    return open;
  }
  for (size_t k = std::min(pending.size(), kOpen.size() - 1); k > 0; --k) {
    if (pending.ends_with(kOpen.substr(0, k))) return pending.size() - k;
  }
  return pending.size();
}

StatusOr<std::shared_ptr<const grammar::Grammar>> ToolCallGrammar(
    const nlohmann::ordered_json& tools, ToolCallFormat format, bool parallel,
    const std::string& only, std::string* param) {
  std::vector<grammar::ToolSchema> list;
  std::vector<size_t> index;  // list entry -> position in tools
  for (size_t i = 0; i < tools.size(); ++i) {
    const auto& f = tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    grammar::ToolSchema t;
    t.name = name;
    t.parameters = f.contains("parameters") && !f["parameters"].is_null()
                       ? f["parameters"]
                       : nlohmann::ordered_json{{"type", "object"}};
    list.push_back(std::move(t));
    index.push_back(i);
  }
  grammar::ToolCallSyntax syntax;
  if (format == ToolCallFormat::kLlama3Json) {
    syntax = {"{\"name\": ", "parameters", "}", "; "};
  } else if (format == ToolCallFormat::kHarmony) {
    // One call per reply: <|call|> ends generation after it. An analysis message may come
    // first, as the model writes one unconstrained; it ends with <|end|> and the next header.
    syntax = {"<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "", ""};
    syntax.bare_name = true;
    syntax.preamble_open = "<|channel|>analysis<|message|>";
    syntax.preamble_close = "<|end|><|start|>assistant";
    syntax.strings_without_tag_open = true;
    parallel = false;
  } else {
    syntax = {"<tool_call>\n{\"name\": ", "arguments", "}\n</tool_call>", "\n"};
  }
  size_t bad = 0;
  std::string path;
  auto g = grammar::ToolCallsGrammar(list, syntax, parallel, &bad, &path);
  if (!g.ok() && param != nullptr && bad < index.size()) {
    *param = "tools[" + std::to_string(index[bad]) + "].function.parameters" +
             (path.empty() ? "" : "." + path);
  }
  return g;
}

}  // namespace uf::server
