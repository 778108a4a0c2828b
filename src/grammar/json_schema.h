// JSON output constraints compiled to grammars: any JSON object (OpenAI's
// response_format {"type": "json_object"}) or a value valid against a JSON schema
// ({"type": "json_schema"}).
//
// Supported schema keywords: type (one or a list), properties, required, additionalProperties
// (false, true, or a schema for objects without properties), items, minItems/maxItems,
// minLength/maxLength, enum, const, anyOf / oneOf (as alternatives), allOf with one schema, $ref
// to local definitions ("#", "#/$defs/...", "#/definitions/..."), nullable, and integer bounds
// (minimum / maximum / exclusive*) that mean >= 0, > 0, at most 1000 values, or no more than the
// 15-digit limit below (zod's .int() bounds). Annotations
// (title, description, default, examples, format, $schema, $id, ...) and unknown keywords are
// ignored. Keywords that would need a check this compiler cannot express (pattern, minimum,
// multipleOf, uniqueItems, bounds on non-integers, ...) are errors, so that a schema is never
// accepted and then silently not enforced.
//
// Output shape: properties appear in the schema's order, required ones always, optional ones
// when the model chooses; only declared properties are generated (with or without
// additionalProperties: false, the output validates). Whitespace goes where compact and
// pretty-printed JSON put it (after "{", "[", ":" and ",", and before "}" and "]"), each gap
// nothing, one space, or one newline with up to kMaxIndent spaces or kMaxIndentTabs tabs; numbers
// have at most 15 integer and 16 fraction digits and a 2-digit exponent, and \u escapes exclude
// surrogates, so every complete output parses as strict JSON.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/grammar.h"

namespace uf::grammar {

inline constexpr int kMaxIndent = 16;
inline constexpr int kMaxIndentTabs = 4;

// Any JSON object (optional whitespace around it).
std::shared_ptr<const Grammar> JsonObjectGrammar();

// A JSON value valid against schema. Takes ordered_json: properties are generated in the order the
// schema lists them (as OpenAI does), which a std::map-backed json would lose. On an unsupported or
// malformed schema: InvalidArgument whose message starts with the JSON pointer-like path of the
// offending keyword, which is also stored in *error_path (e.g. "properties.age.minimum"; "" for the
// root).
StatusOr<std::shared_ptr<const Grammar>> JsonSchemaGrammar(const nlohmann::ordered_json& schema,
                                                           std::string* error_path = nullptr);

// Tool calls forced by tool_choice "required" or a named function: one call (or several, joined
// by syntax.separator, when parallel) of one of tools, each spelled
//   syntax.prefix "<name>", "<args_key>": <arguments valid against its parameters> syntax.suffix
// e.g. Hermes/Qwen: prefix `<tool_call>\n{"name": `, args_key "arguments", suffix
// `}\n</tool_call>`. With bare_name the name is outside JSON and the arguments follow it:
//   syntax.prefix <name> syntax.args_key <arguments> syntax.suffix
// e.g. gpt-oss's harmony: prefix `<|channel|>commentary to=functions.`, args_key
// ` <|constrain|>json<|message|>`. With preamble_open set, the calls may follow one message of
// free text: preamble_open <text without "<|"> preamble_close (harmony's analysis channel, so a
// forced call can still reason first; the text cannot hold a special token's spelling).
struct ToolSchema {
  std::string name;
  nlohmann::ordered_json parameters;  // a JSON schema ({"type": "object"} when absent)
};
struct ToolCallSyntax {
  std::string prefix;
  std::string args_key;
  std::string suffix;
  std::string separator;
  bool bare_name = false;
  std::string preamble_open = "";
  std::string preamble_close = "";
  // No string in the arguments holds "<|" (harmony: it would read as a message header).
  bool strings_without_tag_open = false;
};
// On a bad schema: *bad_tool = its index, *error_path as for JsonSchemaGrammar.
StatusOr<std::shared_ptr<const Grammar>> ToolCallsGrammar(const std::vector<ToolSchema>& tools,
                                                          const ToolCallSyntax& syntax,
                                                          bool parallel, size_t* bad_tool,
                                                          std::string* error_path);

}  // namespace uf::grammar
