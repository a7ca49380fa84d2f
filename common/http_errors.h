// HTTP edge helpers shared by the runtime server and the sidecar: the one mapping from a Status
// to an HTTP status, and OpenAI-style JSON error bodies.
//
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
//              "code": "context_length_exceeded"}}
//
// Pure functions; thread-safe. (Lives at common/ rather than common/http/ so that the
// kinfer_common glob compiles it.)
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace kinfer {

// The HTTP status for an error kind (style.md: map error kinds to behaviour once):
//   INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION -> 400   NOT_FOUND -> 404
//   RESOURCE_EXHAUSTED, UNAVAILABLE -> 503 (+ Retry-After)     CANCELLED -> 499 (client closed)
//   DEADLINE_EXCEEDED -> 504   UNIMPLEMENTED -> 501   DATA_LOSS, INTERNAL -> 500   OK -> 200
int HttpStatusFor(StatusCode code);

// True when the client should retry later; the response then carries Retry-After.
bool IsRetryable(StatusCode code);

// The OpenAI error "type" for an HTTP status: "invalid_request_error" for every 4xx (OpenAI
// reports unknown models that way too), "overloaded_error" for 503, "server_error" otherwise.
std::string_view ErrorTypeForHttpStatus(int http_status);

// The JSON error body. `param` and `code` are null in the JSON when empty. The message is
// sanitised so that the body is always valid UTF-8 JSON.
std::string ErrorBody(int http_status, std::string_view message, std::string_view param = {},
                      std::string_view code = {});
// ErrorBody(HttpStatusFor(status.code()), status.message(), param, code).
std::string ErrorBodyFor(const Status& status, std::string_view param = {},
                         std::string_view code = {});

// Seconds a client should wait before retrying a retryable error.
inline constexpr int kRetryAfterSeconds = 1;

}  // namespace kinfer
