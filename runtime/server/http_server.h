// HttpServer: the cpprestsdk adapter in front of the Router. Only this file pair sees cpprestsdk.
//
// Per request: the listener's callback (cpprestsdk's thread pool) hands the request to a new
// thread owned by the server, which reads the body (enforcing max_body_bytes -> 413), checks
// nothing else, calls Router::Handle, and replies. Streaming responses are written through a
// producer_consumer_buffer as chunks come; when the client goes away the reply task fails, the
// sink reports Closed(), and the generation is cancelled (toolchain.md, "streaming").
// A thread per request (capped at max_in_flight; beyond it 503) keeps long generations from
// starving cpprestsdk's own pool, which must stay free to send the streamed bytes.
//
// Threading: Start and Stop are called from one thread (main). The Router must outlive Stop().
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "common/status.h"

namespace kinfer {

class Router;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8081;
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int max_in_flight = 512;          // concurrent requests; beyond, 503 + Retry-After
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Router* router);
  ~HttpServer();  // Stop()

  // Starts listening. UNAVAILABLE with the reason when the address cannot be bound.
  Status Start();
  // Answers new requests 503, asks the router to cancel running generations (their streams end
  // with an error event and [DONE]), waits up to `grace_seconds` for in-flight requests, then
  // closes the listener. Idempotent.
  void Stop(int grace_seconds = 10);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kinfer
