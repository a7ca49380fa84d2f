// HttpServer: the Boost.Beast adapter in front of the Router. Only this file pair sees the
// transport.
//
// Connections are common/http/server_session.h's (the sidecar's too): requests read one at a
// time per connection (pipelined ones answered in order), 413 over max_body_bytes, 431/400 JSON
// answers to malformed requests, idle connections closed after idle_timeout, and every write to
// the client bounded by write_timeout. One io thread runs every connection.
//
// Per request: the io thread hands the parsed request to a new thread owned by the server, which
// calls Router::Handle and posts the reply back to the io thread. Streaming responses post each
// chunk to the io thread and go on generating; they wait only while more than 64 KiB are not yet
// written (back-pressure from a slow client), and a stream's thread ends once its last chunk is
// written. While a request runs, its connection is
// watched: a client that closes it is seen at once, by HttpRequest::client_gone (whole
// responses poll it) and by the sink (streams), and its generation is cancelled.
// A thread per request (capped at max_in_flight; beyond it 503) lets long generations block
// without holding up the io thread.
//
// Threading: Start and Stop are called from one thread (main). The Router must outlive Stop().
#pragma once

#include <chrono>
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
  int max_in_flight = 512;  // concurrent requests; beyond, 503 + Retry-After (probes, /metrics exempt)
  // A connection waiting for (the rest of) a request closes after this.
  std::chrono::seconds idle_timeout{75};
  // A write the client does not take within this ends its request as if it had left.
  std::chrono::seconds write_timeout{30};
  // Open connections held at most; one more gets 503 + Retry-After and is closed (0: from the
  // open-file limit, common/file_limit.h).
  size_t max_connections = 0;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Router* router);
  ~HttpServer();  // Stop()

  // Starts listening. UNAVAILABLE with the reason when the address cannot be bound.
  Status Start();
  // Answers new requests 503 (with Connection: close), asks the router to cancel running
  // generations (their streams end with an error event and [DONE]), waits up to `grace_seconds`
  // for in-flight requests, then closes the listener and every connection. Idempotent.
  void Stop(int grace_seconds = 10);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;  // shared with request threads, which may outlive Stop briefly
};

}  // namespace kinfer
