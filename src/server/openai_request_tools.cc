#include "server/openai_request_tools.h"

#include <set>

namespace uf::server {
namespace {

using json = nlohmann::json;

bool ValidFunctionName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

ApiError Missing(const std::string& param) {
  return InvalidRequest("Missing required parameter: '" + param + "'.", param,
                        "missing_required_parameter");
}

ApiError Invalid(const std::string& param, const std::string& why) {
  return InvalidRequest("Invalid value for '" + param + "': " + why, param, "invalid_value");
}

}  // namespace

std::optional<ApiError> ParseTools(const json& v, std::string_view body, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_array()) return Invalid("tools", "expected an array of tools.");
  std::set<std::string> names;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = "tools[" + std::to_string(i) + "]";
    const json& t = v[i];
    if (!t.is_object()) return Invalid(p, "expected an object.");
    if (!t.contains("type")) return Missing(p + ".type");
    if (t["type"] != "function") return Invalid(p + ".type", "only 'function' is supported.");
    if (!t.contains("function")) return Missing(p + ".function");
    const json& f = t["function"];
    if (!f.is_object()) return Invalid(p + ".function", "expected an object.");
    for (auto it = t.begin(); it != t.end(); ++it) {
      if (it.key() != "type" && it.key() != "function") {
        return InvalidRequest("Unrecognized argument in " + p + ": " + it.key(), p + "." + it.key(),
                              "unknown_parameter");
      }
    }
    if (!f.contains("name") || !f["name"].is_string()) return Missing(p + ".function.name");
    const std::string name = f["name"].get<std::string>();
    if (!ValidFunctionName(name)) {
      return Invalid(p + ".function.name",
                     "'" + name + "' must be 1-64 characters of a-z, A-Z, 0-9, '_' and '-'.");
    }
    if (!names.insert(name).second) {
      return Invalid(p + ".function.name", "duplicate function name '" + name + "'.");
    }
    for (auto it = f.begin(); it != f.end(); ++it) {
      const std::string& k = it.key();
      const std::string fp = p + ".function." + k;
      if (k == "name") continue;
      if (k == "description") {
        if (!it->is_string() && !it->is_null()) return Invalid(fp, "expected a string.");
      } else if (k == "parameters") {
        if (!it->is_object() && !it->is_null())
          return Invalid(fp, "expected a JSON schema object.");
      } else if (k == "strict") {
        if (!it->is_boolean() && !it->is_null()) return Invalid(fp, "expected a boolean.");
      } else {
        return InvalidRequest("Unrecognized argument in " + p + ".function: " + k, fp,
                              "unknown_parameter");
      }
    }
  }
  if (v.empty()) return std::nullopt;
  // The template prints the schemas: keep the client's key order (json sorts keys).
  r->tools = nlohmann::ordered_json::parse(body.begin(), body.end())["tools"];
  return std::nullopt;
}

std::string LegacyCallId(const std::string& name) { return "call_" + name; }

std::optional<ApiError> CheckLegacyFunctions(const json& root, std::string_view body,
                                             ApiRequest* r) {
  const auto fns = root.find("functions");
  const auto fc = root.find("function_call");
  const bool have_fns = fns != root.end() && !fns->is_null();
  const bool have_fc = fc != root.end() && !fc->is_null();
  if (!have_fns && !have_fc) return std::nullopt;
  if (have_fns) {
    if (root.contains("tools") && !root["tools"].is_null()) {
      return Invalid("functions", "use either 'tools' or the legacy 'functions', not both.");
    }
    if (!fns->is_array()) return Invalid("functions", "expected an array of functions.");
    // As tools: [{"type": "function", "function": f}], validated by ParseTools, errors renamed.
    const auto ordered = nlohmann::ordered_json::parse(body.begin(), body.end())["functions"];
    nlohmann::ordered_json tools = nlohmann::ordered_json::array();
    for (const auto& f : ordered) tools.push_back({{"type", "function"}, {"function", f}});
    const std::string tools_body = nlohmann::ordered_json{{"tools", tools}}.dump();
    if (auto e = ParseTools(json::parse(tools_body)["tools"], tools_body, r)) {
      for (std::string* s : {&e->param, &e->message}) {
        size_t at;
        while ((at = s->find("tools[")) != std::string::npos) s->replace(at, 6, "functions[");
        while ((at = s->find("].function.")) != std::string::npos) s->replace(at, 11, "].");
        while ((at = s->find("].function")) != std::string::npos) s->replace(at, 10, "]");
      }
      return e;
    }
    r->legacy_functions = !r->tools.is_null();
    r->parallel_tool_calls = false;
  }
  if (have_fc) {
    if (root.contains("tool_choice") && !root["tool_choice"].is_null()) {
      return Invalid("function_call",
                     "use either 'tool_choice' or the legacy 'function_call', not both.");
    }
    if (fc->is_string() && (*fc == "none" || *fc == "auto")) {
      r->tool_choice = *fc == "none" ? ToolChoice::kNone : ToolChoice::kAuto;
    } else if (fc->is_object() && fc->contains("name") && (*fc)["name"].is_string()) {
      for (auto it = fc->begin(); it != fc->end(); ++it) {
        if (it.key() != "name") {
          return InvalidRequest("Unrecognized argument in function_call: " + it.key(),
                                "function_call." + it.key(), "unknown_parameter");
        }
      }
      if (!have_fns) return Invalid("function_call", "names a function, but 'functions' is empty.");
      r->tool_choice = ToolChoice::kNamed;
      r->tool_choice_name = (*fc)["name"].get<std::string>();
      for (const auto& t : r->tools) {
        if (t["function"]["name"] == r->tool_choice_name) return std::nullopt;
      }
      return Invalid("function_call.name",
                     "no function named '" + r->tool_choice_name + "' in 'functions'.");
    } else {
      return Invalid("function_call", "expected 'none', 'auto' or {\"name\": string}.");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseToolChoice(const json& v, ApiRequest* r) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "auto") {
      r->tool_choice = ToolChoice::kAuto;
    } else if (s == "none") {
      r->tool_choice = ToolChoice::kNone;
    } else if (s == "required") {
      r->tool_choice = ToolChoice::kRequired;
    } else {
      return Invalid("tool_choice", "'" + s +
                                        "'. Supported values are: 'none', 'auto', "
                                        "'required' or a named function.");
    }
    return std::nullopt;
  }
  if (!v.is_object()) return Invalid("tool_choice", "expected a string or an object.");
  if (!v.contains("type") || v["type"] != "function") {
    return Invalid("tool_choice.type", "only 'function' is supported.");
  }
  if (!v.contains("function") || !v["function"].is_object() || !v["function"].contains("name") ||
      !v["function"]["name"].is_string()) {
    return Missing("tool_choice.function.name");
  }
  r->tool_choice = ToolChoice::kNamed;
  r->tool_choice_name = v["function"]["name"].get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> CheckToolChoice(const ApiRequest& r) {
  if (r.tool_choice != ToolChoice::kRequired && r.tool_choice != ToolChoice::kNamed) {
    return std::nullopt;
  }
  if (r.tools.is_null() || r.tools.empty()) {
    return Invalid("tool_choice", "a tool is required or named, but 'tools' is empty.");
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    for (const auto& t : r.tools) {
      if (t["function"]["name"] == r.tool_choice_name) return std::nullopt;
    }
    return Invalid("tool_choice.function.name",
                   "no function named '" + r.tool_choice_name + "' in 'tools'.");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseAssistantToolCalls(const json& v, const std::string& param,
                                                json* out) {
  *out = nullptr;
  if (v.is_null() || (v.is_array() && v.empty())) return std::nullopt;
  if (!v.is_array()) return Invalid(param, "expected an array of tool calls.");
  json calls = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    const json& c = v[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) {
      return Missing(p + ".function");
    }
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) return Missing(p + ".function.name");
    json args = json::object();
    if (f.contains("arguments")) {
      if (!f["arguments"].is_string())
        return Invalid(p + ".function.arguments", "expected a string.");
      const std::string text = f["arguments"].get<std::string>();
      args = json::parse(text, nullptr, false);
      if (args.is_discarded()) args = text;
    }
    json call = {{"type", "function"}, {"function", {{"name", f["name"]}, {"arguments", args}}}};
    if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"];
    calls.push_back(std::move(call));
  }
  *out = std::move(calls);
  return std::nullopt;
}

}  // namespace uf::server
