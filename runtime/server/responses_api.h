// OpenAI's Responses API (POST /v1/responses) as a translation over chat completions: the
// request becomes the chat request that serves it (ResponsesToChatBody), and the chat answer,
// whole or streamed, becomes a Response object (ResponseFromChat) or the Responses event stream
// (ResponsesStreamTranslator). Everything the chat endpoint does (sampling, structured outputs,
// tools, limits, errors) is therefore the same here.
//
// Stateless: kinfer stores no responses, so previous_response_id, conversation and background
// are 400s; `store` is accepted and answered with "store": false. Built-in tools (web search,
// file search, ...), non-text input parts and reasoning are 400s naming the field. Logprobs
// (include "message.output_text.logprobs", top_logprobs) come in the output text, as OpenAI's.
//
// Pure: no model, no HTTP. Thread safety: functions are stateless; a translator is used by one
// thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "runtime/server/openai_protocol.h"

namespace kinfer {

// What a Response echoes of its request (the fields as the client gave them, or their defaults).
struct ResponsesRequest {
  bool stream = false;
  nlohmann::json echo = nlohmann::json::object();  // instructions, tools, ... (ResponseFromChat)
};

// The chat completions body (JSON text, the client's key order kept) that serves `body`.
// INVALID_ARGUMENT naming the Responses field (`d->param`, e.g. "input[2].content[0].type").
StatusOr<std::string> ResponsesToChatBody(std::string_view body, ResponsesRequest* req,
                                          ErrorDetail* d);

// A chat error's param in the Responses request's terms ("max_tokens" -> "max_output_tokens",
// "messages[...]" -> "input", "response_format..." -> "text.format", "tools[i].function.x" ->
// "tools[i].x").
std::string ResponsesParam(std::string_view chat_param);

// A whole chat.completion into a Response: {"id": id, "object": "response", "status":
// "completed" | "incomplete", "output": [message and/or function_call items], "usage", ...}.
nlohmann::json ResponseFromChat(const nlohmann::json& chat, const ResponsesRequest& req,
                                const std::string& id, int64_t created_at);

// The chat SSE stream (chat.completion.chunk events, the usage chunk, [DONE]) into the Responses
// event stream: response.created, response.in_progress, then per output item
// response.output_item.added, its content or arguments deltas and .done events,
// response.output_item.done, and last response.completed (or response.incomplete when cut by
// max_output_tokens). A chat error event becomes an "error" event and response.failed.
class ResponsesStreamTranslator {
 public:
  ResponsesStreamTranslator(ResponsesRequest req, std::string id, int64_t created_at);

  // The events (each "event: <type>\ndata: <json>\n\n") for one chat SSE event (its whole text,
  // "data: ...\n\n"); the first call also gives the opening events.
  std::vector<std::string> Translate(std::string_view chat_event);

 private:
  void Emit(const std::string& type, nlohmann::json event, std::vector<std::string>* out);
  void Open(std::vector<std::string>* out);
  void CloseItem(std::vector<std::string>* out);
  void Finish(std::vector<std::string>* out);
  nlohmann::json Snapshot(const char* status) const;

  ResponsesRequest req_;
  std::string id_;
  int64_t created_at_ = 0;
  std::string model_;  // from the first chunk
  int64_t sequence_ = 0;
  bool opened_ = false;
  bool finished_ = false;
  nlohmann::json output_ = nlohmann::json::array();  // items done so far, then the open one
  bool item_open_ = false;
  std::string finish_reason_;
  nlohmann::json pending_logprobs_ = nlohmann::json::array();  // not yet sent with text
  nlohmann::json usage_;
};

}  // namespace kinfer
