// ServerSession: one inbound HTTP/1.1 connection on Boost.Beast, shared by kinfer-sidecar's
// proxy (sidecar/proxy/proxy_server.cc) and kinfer-runtime's API server
// (runtime/server/http_server.cc). It owns the wire; what a request means is its handler's.
//
// What every connection gets here, so that both servers behave alike:
//  * Requests are read one at a time; pipelined requests wait in the buffer and are answered in
//    order. Headers over 64 KiB get 431; a body over the handler's max_body_bytes gets 413 (from
//    Content-Length before the body is read, then the connection closes); a malformed request
//    line, header or chunked body gets 400; every one of these is an OpenAI-style JSON body.
//  * `Expect: 100-continue` is answered before the body is read.
//  * A connection waiting for a request (idle keep-alive, or a client sending its request
//    slowly) closes after idle_timeout; every write to the client runs under write_timeout (a
//    client that stops reading is treated as gone).
//  * While a request is answered, WatchClient reads the socket: EOF or an error there means the
//    client left, and the handler's on_client_gone (see Hold) runs once.
//  * HEAD is served wherever GET is: the handler sees the request as GET (head() tells) and the
//    answer goes out as GET's header (its Content-Length too) without the body; an error answer
//    to a HEAD has no body either.
//  * An HTTP/1.1 request without a Host header (or any request with two) gets 400.
//  * A stream to an HTTP/1.0 client is not chunked (1.0 has no chunked coding): its body ends
//    when the connection closes.
//
// Threading: everything runs on the io_context the socket belongs to; calls from other threads
// must be posted there. The session keeps itself alive through pending operations
// (shared_from_this); a handler keeps it alive while it answers by holding the shared_ptr.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/http/beast.h"
#include "common/status.h"

namespace kinfer {

class ServerSession;

// Per-request limits, read when each request starts (a reloaded config applies to the next one).
struct SessionLimits {
  size_t max_body_bytes = 1 << 20;
  std::chrono::nanoseconds idle_timeout = std::chrono::seconds(75);
  std::chrono::nanoseconds write_timeout = std::chrono::seconds(30);
  // Open connections the acceptor holds at most (0: DefaultMaxConnections(), from the open-file
  // limit). One more is answered 503 with Retry-After and closed (SessionAcceptor). Read at each
  // accept.
  size_t max_connections = 0;
};

// What a server plugs into its sessions. Called on the io_context's thread.
class SessionHandler {
 public:
  virtual ~SessionHandler() = default;
  virtual SessionLimits Limits() const = 0;
  // False while the server drains: answers then carry `Connection: close`.
  virtual bool KeepAlive() const { return true; }
  // A whole request (headers and body) is in session->request(); answer it with Reply* or the
  // Stream calls, now or later.
  virtual void OnRequest(const std::shared_ptr<ServerSession>& session) = 0;
  // The session answered a request itself instead of calling OnRequest (413 body over the limit,
  // 400 malformed or without Host, 431, 501): servers that count answers count it here.
  // `header_read`: session.request() and path() hold the request's header (false for a header
  // that was malformed or too large).
  // The handler may add headers to the answer (SetAnswerHeader).
  virtual void OnRefused(ServerSession& session, int status, bool header_read) {}
  // A request is being answered from its first byte read (or its error) to the end of its
  // response: servers count these to know when a drain is done.
  virtual void OnResponseOpen() {}
  virtual void OnResponseClosed() {}
};

class ServerSession : public std::enable_shared_from_this<ServerSession> {
 public:
  using Request = http::request<http::string_body>;

  // `slot` is released when the session ends (the acceptor counts open connections with it).
  ServerSession(tcp::socket socket, SessionHandler* handler, std::shared_ptr<void> slot = nullptr);

  void Start() { DoRead(); }

  // The request; a HEAD reads as GET here (see head()).
  const Request& request() const { return parser_->get(); }
  // The request was HEAD: its answer carries no body.
  bool head() const { return head_; }
  // The request target in origin form (path and query): an absolute-form target
  // ("http://host:port/v1/models?x", RFC 9112 3.2.2) without its scheme and authority.
  std::string_view target() const;
  // Path of the request target (target()) without the query, as sent (not percent-decoded).
  std::string_view path() const;
  // The client's address (IPv4 or IPv6, no port); "" when the socket could not tell.
  const std::string& peer_address() const { return peer_address_; }
  bool keep_alive() const { return keep_alive_; }
  bool closed() const { return closed_; }
  net::any_io_executor executor() { return stream_.get_executor(); }

  // Ties `state` to the current request (released when its response ends) and runs
  // `on_client_gone` once if the client leaves before then (seen by WatchClient or by a failed
  // write). The session is closed right after on_client_gone returns.
  void Hold(std::shared_ptr<void> state, std::function<void()> on_client_gone);

  // A header that every answer to the current request carries, whichever call writes it (Reply*,
  // StartStream); forgotten when the request ends.
  void SetAnswerHeader(std::string name, std::string value);

  // A whole response. Ends the current request. `done(ok)` runs once it is written (ok false:
  // the client is gone).
  void Reply(http::response<http::string_body> res, std::function<void(bool)> done = nullptr);
  void ReplyJson(int status, std::string body,
                 std::optional<int64_t> retry_after_seconds = std::nullopt);
  // An OpenAI-style JSON error body.
  void ReplyError(int status, std::string_view message,
                  std::optional<int64_t> retry_after_seconds = std::nullopt,
                  std::string_view code = {});
  // 405 with Allow and a JSON body.
  void ReplyMethodNotAllowed(std::string_view allow, std::string_view path);

  // Streaming: the header (chunked; to an HTTP/1.0 client plain, and the connection closes at the
  // end), then chunks, then the end. Writes are queued in order;
  // `done(ok)` runs when that write finished (ok false: the client is gone).
  void StartStream(http::response<http::empty_body> res, std::function<void(bool)> done);
  void WriteChunk(std::string_view data, std::function<void(bool)> done);
  // Ends the chunked body; the request is over once it is written. `done(ok)` runs then.
  void EndStream(std::function<void(bool)> done = nullptr);
  // Ends a stream cut short (its source failed mid-body): what is queued is written, then the
  // connection closes without the terminating chunk, so that the client sees an incomplete
  // message (RFC 9112 8), never a complete one.
  void AbortStream();

  // Watches the socket while a request is answered, so a client that goes away is noticed.
  // Idempotent while a watch is pending.
  void WatchClient();

  void Close();

 private:
  struct PendingWrite {
    std::string bytes;  // written as is, unless `custom` is set
    std::function<void(ServerSession*, std::function<void(beast::error_code, size_t)>)> custom;
    std::function<void(bool)> done;
  };

  void DoRead();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnBody(beast::error_code ec);
  void BeginRequest();
  void EndRequest();
  void Finished(bool keep_alive);
  void ClientGone();
  // Answers the current request with an error before (or instead of) OnRequest, tells the
  // handler (OnRefused), and closes the connection after it.
  void Refuse(int status, std::string_view message);
  void Enqueue(PendingWrite write);
  void ArmWriteTimer() { stream_.expires_after(limits_.write_timeout); }
  void WriteNext();

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  SessionHandler* handler_;
  SessionLimits limits_;
  std::shared_ptr<void> held_;
  std::function<void()> on_client_gone_;
  std::deque<PendingWrite> writes_;
  std::vector<std::pair<std::string, std::string>> answer_headers_;  // SetAnswerHeader
  std::string peer_address_;
  bool keep_alive_ = true;
  bool head_ = false;     // the current request is a HEAD (reads as GET)
  bool chunked_ = true;   // the current stream's body is chunked (not to HTTP/1.0)
  bool in_request_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;
  std::array<char, 4096> discarded_;  // what a watch reads past kMaxPipelinedBytes (dropped)
  bool closed_ = false;
  std::shared_ptr<void> slot_;
};

// Accepts connections on an acceptor and starts a ServerSession for each. Binds with
// SO_REUSEADDR and TCP_NODELAY.
//
// Connections are capped (SessionLimits::max_connections), as Envoy's overload manager caps
// downstream connections: one past the cap is accepted, answered `503` with `Retry-After: 1`,
// `Connection: close` and an OpenAI-style JSON body, and closed once the client has read it (the
// acceptor stops sending, then reads and drops what the client sent, for at most 2 s, so that
// the client sees the answer rather than a reset). At most 64 such answers are in progress at
// once; a connection beyond those is closed at once. Either way the client hears now, instead of
// waiting in the listen backlog for a descriptor to free up.
//
// A failed accept (out of file descriptors all the same, say) is logged, at most once a second,
// and retried after 100 ms rather than at once (which would spin). Not thread-safe: use on the
// io_context's thread; open_connections() and rejected_connections() may be read from any thread.
class SessionAcceptor {
 public:
  SessionAcceptor(net::io_context& ioc, SessionHandler* handler);
  // Binds host:port (port 0: any free port) and starts accepting. INVALID_ARGUMENT for a bad
  // address, UNAVAILABLE when it cannot be bound. Host "::" is every interface of both families
  // (IPv4 v4-mapped; IPv4's alone on a kernel without IPv6).
  Status Listen(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }
  void Close();

  // Sessions open now (each ends when its connection closes and nothing holds it).
  size_t open_connections() const;
  // Connections refused for the cap since the start.
  uint64_t rejected_connections() const;
  // Reads both counts ({open, rejected}) from any thread, for as long as the reader lives (the
  // acceptor may be gone).
  std::function<std::pair<size_t, uint64_t>()> CountsReader() const;

 private:
  struct Counts;
  void Accept();
  void Refuse(tcp::socket socket, size_t cap);

  tcp::acceptor acceptor_;
  net::steady_timer retry_;
  SessionHandler* handler_;
  std::shared_ptr<Counts> counts_;
  uint16_t port_ = 0;
  std::chrono::steady_clock::time_point last_warning_{};
};

}  // namespace kinfer
