// PageServer: many HTTP/1.1 listeners on 127.0.0.1 that all answer GET <path> with one fixed page
// (a kinfer-sidecar /metrics page for the scrape fan-out benchmark, docs/benchmarks.md). Each
// listener stands for one pod's sidecar: a distinct port, its own accept queue.
//
// Requests are parsed by Boost.Beast; keep-alive is honoured (Prometheus reuses its connection
// to a target, the operator's collector opens a new one each round); any other path is a 404,
// any other method a 405. The answer is serialized once at start, so a request costs one read and
// one write.
//
// Threading: Start() binds every listener and starts `threads` threads running one io_context;
// a connection's reads and writes follow each other, so no handler of one connection runs
// concurrently with another of the same connection. The counters are atomics read from any
// thread. Stop() (or the destructor) stops the io_context and joins the threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace kinfer::bench {

struct PageServerOptions {
  int listeners = 1;
  std::string path = "/metrics";
  std::string body;  // the page
  std::string content_type = "text/plain; version=0.0.4; charset=utf-8";
  int threads = 1;
  int backlog = 4096;  // per listener (the kernel caps it at net.core.somaxconn)
};

struct PageServerCounters {
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> requests{0};   // answered with the page
  std::atomic<uint64_t> not_found{0};  // other paths and methods
  std::atomic<uint64_t> errors{0};     // reads or writes that failed (not a clean close)
};

class PageServer {
 public:
  // Binds `listeners` ephemeral ports on 127.0.0.1 and starts serving. UNAVAILABLE when a socket
  // cannot be opened or bound (e.g. the file limit), INVALID_ARGUMENT for a bad option.
  static StatusOr<std::unique_ptr<PageServer>> Start(PageServerOptions options);
  ~PageServer();

  PageServer(const PageServer&) = delete;
  PageServer& operator=(const PageServer&) = delete;

  // The bound ports, one per listener, in bind order.
  const std::vector<int>& ports() const { return ports_; }
  const PageServerCounters& counters() const { return *counters_; }

  // Stops accepting and serving and joins the threads; idempotent.
  void Stop();

  struct Impl;  // the io_context, listeners and prepared answers (page_server.cc only)

 private:
  PageServer() = default;

  std::unique_ptr<Impl> impl_;
  std::unique_ptr<PageServerCounters> counters_;
  std::vector<int> ports_;
  std::vector<std::thread> threads_;
};

}  // namespace kinfer::bench
