// Function calling (OpenAI's tools, tool_choice, parallel_tool_calls) in llama.cpp's "generic"
// format, which works with any chat template, also one that knows nothing of tools (the bundled
// model's):
//   - the tools and the answer format are described in the system turn (ToolSystemPrompt);
//   - the answer is held by a grammar (ToolCallGrammar) to one JSON object,
//       {"tool_calls": [{"name": ..., "arguments": {...}}, ...]}   (a call, or several)
//       {"response": "..."}                                        (tool_choice "auto" only)
//     and read back into OpenAI's message (ReadToolAnswer);
//   - earlier turns are rewritten the same way: an assistant turn's tool_calls become its JSON,
//     and a "tool" turn a "user" turn holding {"tool_response": {...}} (as llama.cpp's template
//     polyfills do for templates without a tool role).
//
// Pure: no model, no HTTP. Thread safety: stateless functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "runtime/server/openai_protocol.h"

namespace kinfer {

inline constexpr size_t kMaxTools = 128;

// tools, tool_choice and parallel_tool_calls of a chat body (`body` read keeping the client's key
// order). INVALID_ARGUMENT naming the field: a tool that is not {"type": "function", "function":
// {"name", "description"?, "parameters"?}}, a bad or repeated name, a tool_choice naming no tool
// or given without tools, a parameters schema kinfer cannot enforce (json_schema_grammar.h).
// On success r->tools is filled and, when tools are active, r->grammar holds the answer.
Status ParseTools(const nlohmann::ordered_json& body, ParsedRequest* r, ErrorDetail* detail);

// The system text that describes the tools and the answer format for `t` (REQUIRES: active).
std::string ToolSystemPrompt(const ToolRequest& t);

// An assistant turn's tool_calls ([{"id", "type", "function": {"name", "arguments"}}]) as the
// generic format's JSON, after any text the turn had. INVALID_ARGUMENT (param `param`) when
// malformed.
StatusOr<std::string> AssistantToolCallsText(const nlohmann::json& tool_calls,
                                             const std::string& content, const std::string& param,
                                             ErrorDetail* detail);
// A "tool" turn's content as the generic format's user turn.
std::string ToolResultText(const std::string& tool_call_id, const std::string& name,
                           const std::string& content);

// The model's whole answer (the grammar's sentence) read back: calls in OpenAI's form (each with
// a fresh "call_..." id and its arguments as JSON text: the model's, whitespace outside strings
// left out; "{}" when it gave none), or the answer's text. nullopt when `text` is not such an
// answer (cut by max_tokens). Read by ToolAnswerStream, as a streamed answer is.
struct ToolAnswer {
  nlohmann::json tool_calls;  // null: an answer in text
  std::string content;
};
std::optional<ToolAnswer> ReadToolAnswer(std::string_view text);

// {"id": "call_...", "type": "function", "function": {"name": name, "arguments": ""}}: a call
// with a fresh id (the arguments are filled in by the caller, or streamed after it).
nlohmann::json NewToolCall(const std::string& name);

}  // namespace kinfer
