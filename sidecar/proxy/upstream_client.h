// UpstreamClient: one HTTP/1.1 exchange with an upstream over a pool of keep-alive connections,
// delivering the response header and then the body piece by piece as it arrives (no buffering of
// a whole response), with a connect timeout and a total timeout.
//
// Contract:
//  * Everything runs on the caller's io_context thread (one thread: no locks anywhere).
//  * Handlers are called in order: on_header once (unless the exchange fails before a header),
//    on_data zero or more times, then on_done exactly once. on_data gets a `next` callback: the
//    next read starts only when it is called, so a slow client slows the upstream read
//    (backpressure, bounded memory).
//  * A pooled connection is checked before reuse (a close or a stray byte from the upstream
//    discards it), and one whose request cannot be written (the upstream closed it meanwhile) is
//    replaced by a fresh one once, transparently. Once the request is written it is never sent
//    again here: a failure before the response header is kReset, for the retry policy to judge.
//  * Cancel() closes the connection; on_done then reports kCancelled (unless already done).
//  * A connection goes back to the pool only after a complete response that allows keep-alive.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/http/beast.h"

namespace kinfer {

enum class UpstreamError {
  kNone,       // the response finished cleanly
  kConnect,    // could not connect (refused, unreachable, connect timeout)
  kTimeout,    // the total timeout passed
  kReset,      // the connection broke or the response was malformed after connecting
  kCancelled,  // Cancel() was called
};
std::string_view UpstreamErrorName(UpstreamError e);  // "none", "connect", "timeout", ...

// Idle keep-alive connections to one upstream host:port.
class UpstreamPool {
 public:
  struct Connection {
    explicit Connection(net::io_context& ioc) : stream(ioc) {}
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
  };

  UpstreamPool(net::io_context& ioc, std::string host, uint16_t port, size_t max_idle = 64);

  // A pooled idle connection (reused = true) or a new unconnected one. Shared: every pending
  // operation on a connection holds it, so that closing it mid-operation (a cancelled call) never
  // frees the buffer and stream the operation still uses.
  std::shared_ptr<Connection> Acquire(bool* reused);
  void Release(std::shared_ptr<Connection> conn);

  net::io_context& ioc() { return ioc_; }
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  // Resolves host:port without blocking the event loop (a DNS name, such as a fallback
  // Service's, took the whole proxy down for as long as its lookup took): `done` runs once the
  // endpoints are known (at once when they are), with an error when they cannot be. Resolved
  // once, and again after a connect failure; calls that ask while a lookup runs share it.
  using ResolveHandler =
      std::function<void(beast::error_code, const tcp::resolver::results_type&)>;
  void Resolve(ResolveHandler done);
  void ForgetEndpoints() { resolution_->resolved = false; }

 private:
  struct Resolution {
    explicit Resolution(net::io_context& ioc) : resolver(ioc) {}
    tcp::resolver resolver;
    tcp::resolver::results_type endpoints;
    bool resolved = false;
    bool resolving = false;
    std::vector<ResolveHandler> waiting;
  };
  net::io_context& ioc_;
  std::string host_;
  uint16_t port_;
  size_t max_idle_;
  std::vector<std::shared_ptr<Connection>> idle_;
  // Shared with a pending lookup's handler, which may run after the pool is gone (aborted).
  std::shared_ptr<Resolution> resolution_;
};

class UpstreamCall : public std::enable_shared_from_this<UpstreamCall> {
 public:
  using Header = http::response_header<>;
  struct Handlers {
    std::function<void(const Header& header, bool chunked)> on_header;
    std::function<void(std::string_view data, std::function<void()> next)> on_data;
    std::function<void(UpstreamError error)> on_done;
  };

  static std::shared_ptr<UpstreamCall> Start(UpstreamPool* pool,
                                             http::request<http::string_body> request,
                                             std::chrono::nanoseconds connect_timeout,
                                             std::chrono::nanoseconds total_timeout,
                                             Handlers handlers);
  void Cancel();
  // True once any response byte arrived (the call can no longer be replayed elsewhere).
  bool got_response() const { return got_header_; }

  UpstreamCall(UpstreamPool* pool, http::request<http::string_body> request,
               std::chrono::nanoseconds connect_timeout, std::chrono::nanoseconds total_timeout,
               Handlers handlers);

 private:
  void Begin();
  void Connect();
  void ConnectTo(const tcp::resolver::results_type& endpoints);
  void Write();
  void ReadHeader();
  void ReadBody();
  // A failed write on a reused connection: send once more on a fresh one.
  bool MaybeReconnect();
  void Fail(UpstreamError error);
  void Finish(UpstreamError error);

  UpstreamPool* pool_;
  http::request<http::string_body> request_;
  std::chrono::nanoseconds connect_timeout_;
  Handlers handlers_;
  std::shared_ptr<UpstreamPool::Connection> conn_;
  bool reused_ = false;
  bool reconnected_ = false;
  bool got_header_ = false;
  bool done_ = false;
  bool timed_out_ = false;
  bool cancelled_ = false;
  std::unique_ptr<http::response_parser<http::buffer_body>> parser_;
  net::steady_timer deadline_;
  std::vector<char> chunk_;
};

}  // namespace kinfer
