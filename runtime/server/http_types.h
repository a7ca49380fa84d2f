// Transport-neutral HTTP request/response values passed between the Beast adapter
// (http_server.h) and the routes (router.h), so that routes never see transport types.
//
// Thread safety: plain values. A ChunkSink is used by one thread (the one running the stream
// function) while the transport drains it on its own threads.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kinfer {

struct ErrorDetail;

struct HttpRequest {
  std::string method;           // "GET", "POST", ...
  std::string path;             // RoutedPath of the target (common/request_path.h): "/v1/models"
  std::string body;             // raw bytes (size already checked against --max-body-bytes)
  std::string priority_header;  // x-kinfer-priority, "" when absent
  std::string tenant_header;    // x-kinfer-tenant: the prefix-cache isolation key
  std::string timeout_header;   // x-kinfer-timeout: "500ms", "2s", "1m" or seconds
  std::string request_id;       // x-kinfer-request-id: names a generation for POST /cancel
  std::string trace_id;         // x-request-id (at most 256 bytes): logged and echoed
  // True once the client has closed its connection (any thread may call it; null: unknown).
  // A whole-response generation polls it and cancels.
  std::function<bool()> client_gone;
  std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now();
};

// Where a streaming response writes its body. Write returns false once the client is known to
// be gone (the transport failed a write); the caller should then stop producing.
class ChunkSink {
 public:
  virtual ~ChunkSink() = default;
  virtual bool Write(std::string_view data) = 0;
  // True once the client is known to be gone.
  virtual bool Closed() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // When set, the adapter sends status and headers, then calls stream(sink) on the request's
  // thread; the body is what it writes (chunked). `body` is ignored.
  std::function<void(ChunkSink&)> stream;
  // Bounded route name for metrics ("chat_completions", "health", ..., "other").
  std::string route = "other";
};

// A JSON error response {"error": {...}}: the HTTP status from HttpStatusFor(status.code()),
// plus Retry-After for retryable errors.
HttpResponse ErrorResponse(const Status& status, const ErrorDetail& detail);
// Same with an explicit HTTP status (transport-level errors: 404 path, 405, 413).
HttpResponse ErrorResponse(int http_status, std::string_view message, std::string_view param = {},
                           std::string_view code = {});
HttpResponse JsonResponse(int http_status, std::string body);

}  // namespace kinfer
