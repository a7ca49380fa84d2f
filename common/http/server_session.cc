#include "common/http/server_session.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <limits>

#include <spdlog/spdlog.h>

#include "common/file_limit.h"
#include "common/http_errors.h"

namespace kinfer {
namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
constexpr size_t kMaxPipelinedBytes = 64 * 1024;
constexpr std::string_view kJson = "application/json";
// Connections over the cap: how many may be answered at once, and how long each may take.
constexpr size_t kMaxRefusing = 64;
constexpr auto kRefusalTime = std::chrono::seconds(2);

// Answers one connection over the cap: writes `answer`, stops sending, then reads and drops what
// the client sent until it closes (or kRefusalTime passes), so that closing does not reset the
// connection under an answer the client has not read yet.
class ConnectionRefusal : public std::enable_shared_from_this<ConnectionRefusal> {
 public:
  ConnectionRefusal(tcp::socket socket, std::string answer, std::shared_ptr<void> slot)
      : stream_(std::move(socket)), answer_(std::move(answer)), slot_(std::move(slot)) {}

  void Start() {
    stream_.expires_after(kRefusalTime);
    net::async_write(stream_, net::buffer(answer_),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return;
                       beast::error_code ignored;
                       self->stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
                       self->Drain();
                     });
  }

 private:
  void Drain() {
    stream_.async_read_some(net::buffer(dropped_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (!ec) self->Drain();
                            });
  }

  beast::tcp_stream stream_;
  std::string answer_;
  std::shared_ptr<void> slot_;
  std::array<char, 4096> dropped_{};
};

}  // namespace

ServerSession::ServerSession(tcp::socket socket, SessionHandler* handler,
                             std::shared_ptr<void> slot)
    : stream_(std::move(socket)), handler_(handler), slot_(std::move(slot)) {
  beast::error_code ec;
  const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
  if (!ec) peer_address_ = peer.address().to_string();
}

void ServerSession::SetAnswerHeader(std::string name, std::string value) {
  answer_headers_.emplace_back(std::move(name), std::move(value));
}

std::string_view ServerSession::target() const {
  std::string_view target = request().target();
  if (target.empty() || target[0] == '/') return target;  // origin form (the usual one)
  // Absolute form: "scheme://authority" then the path, which may be empty ("http://h?q" asks for
  // "/?q", read here as "?q": a path of "" that no route has).
  const size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) return target;  // "*" or garbage: no route has it
  const size_t path_start = target.find_first_of("/?", scheme_end + 3);
  return path_start == std::string_view::npos ? std::string_view("/") : target.substr(path_start);
}

std::string_view ServerSession::path() const {
  std::string_view target = this->target();
  size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

void ServerSession::Hold(std::shared_ptr<void> state, std::function<void()> on_client_gone) {
  held_ = std::move(state);
  on_client_gone_ = std::move(on_client_gone);
}

void ServerSession::Reply(http::response<http::string_body> res, std::function<void(bool)> done) {
  for (const auto& [name, value] : answer_headers_) res.set(name, value);
  res.version(11);
  res.keep_alive(keep_alive_);
  // An HTTP/1.0 client keeps the connection only when told so (RFC 9112 9.3, the keep-alive
  // extension of 1.0): without the header it waits for a close that comes at the idle timeout.
  if (keep_alive_ && parser_ && request().version() < 11) {
    res.set(http::field::connection, "keep-alive");
  }
  const unsigned code = res.result_int();
  if (code == 204 || (code >= 100 && code < 200)) {
    // No body and no Content-Length (RFC 9110 8.6): prepare_payload wrote "0".
    res.body().clear();
    res.erase(http::field::content_length);
  } else if (code == 304) {
    res.body().clear();  // a Content-Length it has repeats the 200's (RFC 9110 8.6): kept
  } else {
    res.prepare_payload();  // for HEAD too: the Content-Length GET would have
  }
  auto msg = std::make_shared<http::response<http::string_body>>(std::move(res));
  auto written = [self = shared_from_this(), msg, done = std::move(done)](beast::error_code ec,
                                                                          size_t) {
    if (ec) {
      self->ClientGone();
    } else {
      self->Finished(self->keep_alive_);
    }
    if (done) done(!ec);
  };
  ArmWriteTimer();
  if (head_) {  // RFC 9110 9.3.2: the header only
    auto sr = std::make_shared<http::response_serializer<http::string_body>>(*msg);
    http::async_write_header(stream_, *sr,
                             [sr, written = std::move(written)](beast::error_code ec, size_t n) {
                               written(ec, n);
                             });
    return;
  }
  http::async_write(stream_, *msg, std::move(written));
}

void ServerSession::ReplyJson(int status, std::string body,
                              std::optional<int64_t> retry_after_seconds) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, kJson);
  if (retry_after_seconds) res.set(http::field::retry_after, std::to_string(*retry_after_seconds));
  res.body() = std::move(body);
  Reply(std::move(res));
}

void ServerSession::ReplyError(int status, std::string_view message,
                               std::optional<int64_t> retry_after_seconds, std::string_view code) {
  ReplyJson(status, ErrorBody(status, message, {}, code), retry_after_seconds);
}

void ServerSession::ReplyMethodNotAllowed(std::string_view allow, std::string_view path) {
  http::response<http::string_body> res{http::status::method_not_allowed, 11};
  res.set(http::field::content_type, kJson);
  res.set(http::field::allow, allow);
  res.body() = ErrorBody(405, "use " + std::string(allow) + " for " + std::string(path));
  Reply(std::move(res));
}

void ServerSession::StartStream(http::response<http::empty_body> res,
                                std::function<void(bool)> done) {
  // RFC 9112 6.1: never chunked to an HTTP/1.0 client; its body ends when the connection closes.
  chunked_ = request().version() >= 11;
  if (!chunked_) keep_alive_ = false;
  for (const auto& [name, value] : answer_headers_) res.set(name, value);
  res.version(11);
  res.keep_alive(keep_alive_);
  res.chunked(chunked_);
  auto msg = std::make_shared<http::response<http::empty_body>>(std::move(res));
  auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*msg);
  Enqueue(PendingWrite{{},
                       [msg, sr](ServerSession* s, auto cb) {
                         http::async_write_header(s->stream_, *sr, std::move(cb));
                       },
                       std::move(done)});
}

void ServerSession::WriteChunk(std::string_view data, std::function<void(bool)> done) {
  if (data.empty() || head_) {
    done(!closed_);
    return;
  }
  if (!chunked_) {
    Enqueue(PendingWrite{std::string(data), nullptr, std::move(done)});
    return;
  }
  char size[24];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string framed;
  framed.reserve(n + data.size() + 2);
  framed.append(size, n).append(data).append("\r\n");
  Enqueue(PendingWrite{std::move(framed), nullptr, std::move(done)});
}

void ServerSession::EndStream(std::function<void(bool)> done) {
  Enqueue(PendingWrite{chunked_ && !head_ ? "0\r\n\r\n" : "", nullptr,
                       [self = shared_from_this(), done = std::move(done)](bool ok) {
                         self->Finished(ok && self->keep_alive_);
                         if (done) done(ok);
                       }});
}

void ServerSession::AbortStream() {
  Enqueue(PendingWrite{"", nullptr, [self = shared_from_this()](bool) { self->Close(); }});
}

void ServerSession::WatchClient() {
  if (watching_ || closed_) return;
  watching_ = true;
  // Pipelined bytes are kept for the next request, up to kMaxPipelinedBytes. Past that the
  // connection closes after this answer and what more arrives is dropped, but still read: a
  // watch that stopped reading would never see the client leave, and its request would run on.
  const bool discard = buffer_.size() >= kMaxPipelinedBytes;
  if (discard) keep_alive_ = false;
  auto on_read = [self = shared_from_this(), discard](beast::error_code ec, size_t n) {
    self->watching_ = false;
    if (!ec && !discard) self->buffer_.commit(n);
    if (self->read_after_watch_) {
      // Finished() cancelled the watch: the next request is read now (DoRead arms the idle
      // timeout), whatever the watch had already buffered of it.
      self->read_after_watch_ = false;
      if (ec && ec != net::error::operation_aborted) return self->Close();
      return self->DoRead();
    }
    if (ec) return self->ClientGone();
    if (self->in_request_) self->WatchClient();
  };
  if (discard) {
    stream_.socket().async_read_some(net::buffer(discarded_), std::move(on_read));
  } else {
    stream_.socket().async_read_some(buffer_.prepare(4096), std::move(on_read));
  }
}

void ServerSession::Close() {
  if (closed_) return;
  closed_ = true;
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
  EndRequest();
}

void ServerSession::DoRead() {
  if (closed_) return;
  limits_ = handler_->Limits();
  parser_.emplace();
  head_ = false;
  parser_->header_limit(kHeaderLimit);
  // No limit while the header is read: the parser would fail on Content-Length with the header
  // unfinished (the whole header is judged in OnHeader, which then sets the limit). Not
  // boost::none: Boost 1.74's parser compares Content-Length > none as true.
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  stream_.expires_after(limits_.idle_timeout);
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void ServerSession::OnHeader(beast::error_code ec) {
  head_ = parser_->is_header_done() && parser_->get().method() == http::verb::head;
  const std::string limit = std::to_string(limits_.max_body_bytes);
  if (ec == http::error::body_limit) {  // (no limit is set while the header is read)
    BeginRequest();
    Refuse(413, "request body is over the limit of " + limit + " bytes");
    return;
  }
  if (ec) {
    if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
        ec != net::error::connection_reset && ec != net::error::operation_aborted &&
        ec != net::error::eof) {
      BeginRequest();
      Refuse(ec == http::error::header_limit ? 431 : 400,
             "malformed HTTP request: " + ec.message());
      return;
    }
    Close();
    return;
  }
  BeginRequest();
  const Request& req = parser_->get();
  keep_alive_ = req.keep_alive() && handler_->KeepAlive();
  // RFC 9112 6.1: a transfer coding the server does not know gets 501 (its body, unread, could
  // not be framed: the connection closes). Only chunked is known here; "gzip, chunked" would
  // otherwise pass as its gzip bytes.
  int chunked = 0;
  auto [te_begin, te_end] = req.equal_range(http::field::transfer_encoding);
  for (auto it = te_begin; it != te_end; ++it) {
    for (std::string_view coding : http::token_list(it->value())) {
      if (!beast::iequals(coding, "chunked")) {
        Refuse(501, "the transfer coding '" + std::string(coding) +
                        "' is not implemented (only chunked is)");
        return;
      }
      ++chunked;
    }
  }
  if (chunked > 1) {  // the parser would read no body at all
    Refuse(400, "malformed Transfer-Encoding: chunked applied more than once");
    return;
  }
  // RFC 9112 6.1: Transfer-Encoding in an HTTP/1.0 request means its framing is faulty (a 1.0
  // hop cannot have chunked it); answer it, then close: a kept connection is how requests get
  // smuggled past such a hop.
  if (chunked > 0 && req.version() < 11) keep_alive_ = false;
  if (auto len = parser_->content_length(); len && *len > limits_.max_body_bytes) {
    // The body stays unread (Refuse closes the connection after the answer).
    Refuse(413, "request body of " + std::to_string(*len) + " bytes is over the limit of " + limit +
                    " bytes");
    return;
  }
  // RFC 9112 3.2: an HTTP/1.1 request needs exactly one Host (1.0 may omit it); never two.
  const size_t hosts = req.count(http::field::host);
  if (hosts > 1 || (hosts == 0 && req.version() >= 11)) {
    Refuse(400, hosts > 1 ? "more than one Host header" : "an HTTP/1.1 request needs a Host header");
    return;
  }
  parser_->body_limit(limits_.max_body_bytes);  // a chunked body is judged as it arrives
  // An HTTP/1.0 client does not know 100 Continue (RFC 9110 10.1.1): it sends the body anyway.
  if (req.version() >= 11 && beast::iequals(req[http::field::expect], "100-continue")) {
    auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
    http::async_write(stream_, *cont,
                      [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                        if (ec) return self->Close();
                        self->ReadBody();
                      });
    return;
  }
  ReadBody();
}

void ServerSession::ReadBody() {
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void ServerSession::OnBody(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    Refuse(413, "request body is over the limit of " + std::to_string(limits_.max_body_bytes) +
                    " bytes");
    return;
  }
  if (ec && ec.category() == http::make_error_code(http::error::bad_chunk).category() &&
      ec != http::error::partial_message && ec != http::error::end_of_stream) {
    // A malformed body (a bad chunk size, say) gets an answer, then the connection closes.
    Refuse(400, "malformed HTTP request body: " + ec.message());
    return;
  }
  if (ec) {
    Close();
    return;
  }
  stream_.expires_never();
  // HEAD is answered wherever GET is (RFC 9110 9.3.2): handlers see GET, Reply drops the body.
  if (head_) parser_->get().method(http::verb::get);
  handler_->OnRequest(shared_from_this());
}

void ServerSession::Refuse(int status, std::string_view message) {
  keep_alive_ = false;
  handler_->OnRefused(*this, status, parser_->is_header_done());
  ReplyError(status, message);
}

void ServerSession::BeginRequest() {
  if (in_request_) return;
  in_request_ = true;
  handler_->OnResponseOpen();
}

void ServerSession::EndRequest() {
  if (in_request_) {
    in_request_ = false;
    handler_->OnResponseClosed();
  }
  on_client_gone_ = nullptr;
  held_.reset();
  answer_headers_.clear();
}

void ServerSession::Finished(bool keep_alive) {
  EndRequest();
  if (!keep_alive || closed_) {
    Close();
    return;
  }
  if (watching_) {
    // The watch read runs on the bare socket, beyond the stream's idle timer: end it, and its
    // handler reads the next request under the idle timeout (a kept-alive connection that sent
    // nothing more stayed open for ever, one file descriptor each).
    read_after_watch_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
    return;
  }
  DoRead();
}

void ServerSession::ClientGone() {
  // Held across the callback: it may drop the last other reference to the request's state.
  std::shared_ptr<void> held = held_;
  std::function<void()> gone = std::move(on_client_gone_);
  on_client_gone_ = nullptr;
  if (gone) gone();
  Close();
}

void ServerSession::Enqueue(PendingWrite write) {
  if (closed_) {
    if (write.done) write.done(false);
    return;
  }
  writes_.push_back(std::move(write));
  if (writes_.size() == 1) WriteNext();
}

// Every write runs under write_timeout: a client that stops reading (a full socket buffer) would
// otherwise hold its request, and whatever works for it, as long as it liked. On expiry the stream
// closes the socket, the write fails, and the request ends as if the client had gone.
void ServerSession::WriteNext() {
  auto on_written = [self = shared_from_this()](beast::error_code ec, size_t) {
    PendingWrite done = std::move(self->writes_.front());
    self->writes_.pop_front();
    // Nothing left to write: no timer while the response waits for its next bytes.
    if (!ec && self->writes_.empty()) self->stream_.expires_never();
    if (ec) {
      // The client is gone: fail every queued write too.
      std::deque<PendingWrite> rest;
      rest.swap(self->writes_);
      if (done.done) done.done(false);
      for (auto& w : rest) {
        if (w.done) w.done(false);
      }
      self->ClientGone();
      return;
    }
    if (!self->writes_.empty()) self->WriteNext();
    if (done.done) done.done(true);
  };
  PendingWrite& w = writes_.front();
  ArmWriteTimer();
  if (w.custom) {
    w.custom(this, std::move(on_written));
  } else {
    net::async_write(stream_, net::buffer(w.bytes), std::move(on_written));
  }
}

struct SessionAcceptor::Counts {
  std::atomic<size_t> open{0};
  std::atomic<size_t> refusing{0};
  std::atomic<uint64_t> rejected{0};

  // A token whose release gives back one unit of `*field`.
  static std::shared_ptr<void> Take(const std::shared_ptr<Counts>& counts,
                                    std::atomic<size_t> Counts::*field) {
    (counts.get()->*field).fetch_add(1);
    return std::shared_ptr<void>(nullptr,
                                 [counts, field](void*) { (counts.get()->*field).fetch_sub(1); });
  }
};

SessionAcceptor::SessionAcceptor(net::io_context& ioc, SessionHandler* handler)
    : acceptor_(ioc), retry_(ioc), handler_(handler), counts_(std::make_shared<Counts>()) {}

size_t SessionAcceptor::open_connections() const { return counts_->open.load(); }

uint64_t SessionAcceptor::rejected_connections() const { return counts_->rejected.load(); }

std::function<std::pair<size_t, uint64_t>()> SessionAcceptor::CountsReader() const {
  return [counts = counts_] {
    return std::pair<size_t, uint64_t>(counts->open.load(), counts->rejected.load());
  };
}

Status SessionAcceptor::Listen(const std::string& host, uint16_t port) {
  beast::error_code ec;
  auto address = net::ip::make_address(host, ec);
  if (ec) return InvalidArgument("listen: bad address '" + host + "': " + ec.message());
  tcp::endpoint endpoint(address, port);
  acceptor_.open(endpoint.protocol(), ec);
  const bool any_v6 = address.is_v6() && address.to_v6().is_unspecified();
  if (ec == net::error::address_family_not_supported && any_v6) {
    // "::" on a kernel without IPv6 (ipv6.disable=1): every interface is IPv4's.
    endpoint = tcp::endpoint(net::ip::address_v4::any(), port);
    ec = {};
    acceptor_.open(endpoint.protocol(), ec);
  } else if (!ec && any_v6) {
    // "::" takes IPv4 too (v4-mapped), whatever net.ipv6.bindv6only says: one socket for a
    // dual-stack, IPv6-only or IPv4-only pod network alike.
    acceptor_.set_option(net::ip::v6_only(false), ec);
  }
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    acceptor_.close(ignored);
    return Unavailable("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                       ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
  Accept();
  return Status();
}

void SessionAcceptor::Close() {
  beast::error_code ignored;
  acceptor_.close(ignored);
  retry_.cancel();
}

void SessionAcceptor::Accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_warning_ >= std::chrono::seconds(1)) {
        last_warning_ = now;
        spdlog::warn("accept failed: {} (retrying every 100 ms)", ec.message());
      }
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](beast::error_code wait_ec) {
        if (!wait_ec && acceptor_.is_open()) Accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    const size_t limit = handler_->Limits().max_connections;
    const size_t cap = limit > 0 ? limit : DefaultMaxConnections();
    if (counts_->open.load() >= cap) {
      Refuse(std::move(socket), cap);
    } else {
      std::make_shared<ServerSession>(std::move(socket), handler_,
                                      Counts::Take(counts_, &Counts::open))
          ->Start();
    }
    Accept();
  });
}

void SessionAcceptor::Refuse(tcp::socket socket, size_t cap) {
  counts_->rejected.fetch_add(1);
  const auto now = std::chrono::steady_clock::now();
  if (now - last_warning_ >= std::chrono::seconds(1)) {
    last_warning_ = now;
    spdlog::warn("{} connections open, the most this server holds: refusing new ones with 503",
                 cap);
  }
  if (counts_->refusing.load() >= kMaxRefusing) return;  // closed as `socket` goes
  const std::string body = ErrorBody(
      503, "too many connections: this server holds at most " + std::to_string(cap) +
               " open connections; retry later");
  std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n";
  answer += "Retry-After: " + std::to_string(kRetryAfterSeconds) + "\r\n";
  answer += "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  answer += body;
  std::make_shared<ConnectionRefusal>(std::move(socket), std::move(answer),
                                      Counts::Take(counts_, &Counts::refusing))
      ->Start();
}

}  // namespace kinfer
