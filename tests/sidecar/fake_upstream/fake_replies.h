// The OpenAI-shaped bodies kinfer-fake-upstream writes: completions (whole and SSE events), model
// list and error bodies; and the parsing of a completion request.
//
// The completion content echoes what the fake received ("ok model=<m> max_tokens=<n|none>") and
// every body carries an "x_fake" object (model, max_tokens, stream, selected inbound headers) so a
// test can assert what the proxy in front sent.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/beast/http/fields.hpp>
#include <nlohmann/json.hpp>

#include "common/status.h"

namespace kinfer::fake {

struct CompletionRequest {
  bool chat = true;  // /v1/chat/completions (else /v1/completions)
  std::string model;
  std::optional<int64_t> max_tokens;
  bool stream = false;
  size_t body_bytes = 0;
  nlohmann::json headers;  // the selected inbound headers (see SelectedHeaders)
};

// Validates a parsed body: a JSON object with a string "model", "messages" (an array; chat) or
// "prompt" (completions), an optional non-negative integer "max_tokens" and an optional boolean
// "stream". Returns INVALID_ARGUMENT with a message for the 400 body. The model name is not
// checked here (see FakeState::HasModel).
StatusOr<CompletionRequest> ParseCompletionRequest(bool chat, const nlohmann::json& body);

// Inbound headers worth echoing: x-kinfer-*, x-fake-*, authorization, x-request-id, names
// lowercased (repeated ones joined with ", ").
nlohmann::json SelectedHeaders(const boost::beast::http::fields& headers);
// Every inbound header, names lowercased.
nlohmann::json AllHeaders(const boost::beast::http::fields& headers);

// {"error":{"message":..., "type":..., "code":...}}; the type follows the status
// (4xx invalid_request_error, 429 rate_limit_error, 5xx server_error).
std::string ErrorBody(int status, std::string_view message);

// A whole chat.completion / text_completion body. `id` becomes "fake-<id>".
std::string CompletionBody(const CompletionRequest& req, uint64_t id, int64_t tokens);

// One SSE event "data: {chunk}\n\n" carrying token `index` ("tok<index> "). `last` sets
// finish_reason "stop" (null otherwise).
std::string StreamEvent(const CompletionRequest& req, uint64_t id, int64_t index, bool last);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

std::string ModelsBody(const std::vector<std::string>& models);

}  // namespace kinfer::fake
