#include "sidecar/proxy/upstream_client.h"

#include <sys/socket.h>

#include <cerrno>
#include <limits>

namespace kinfer {

namespace {
constexpr size_t kChunkBytes = 16 * 1024;
// An upstream's response header block may be as large as a client's request header block (the
// sidecar's own 64 KiB; Envoy's default is 60 KiB): Beast's 8 KiB default made a larger one a
// 502 "closed the connection" that counted against the breaker.
constexpr uint32_t kMaxUpstreamHeaderBytes = 64 * 1024;

// An idle keep-alive connection is usable when the upstream has neither closed it (a FIN or RST
// waiting: recv gives 0 or an error) nor sent anything unasked (a stray byte would be read as the
// next response). Nothing waiting (EAGAIN) is the healthy case.
bool StillUsable(tcp::socket& socket) {
  if (!socket.is_open()) return false;
  char byte;
  ssize_t got = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}
}  // namespace

std::string_view UpstreamErrorName(UpstreamError e) {
  switch (e) {
    case UpstreamError::kNone:
      return "none";
    case UpstreamError::kConnect:
      return "connect";
    case UpstreamError::kTimeout:
      return "timeout";
    case UpstreamError::kReset:
      return "reset";
    case UpstreamError::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

UpstreamPool::UpstreamPool(net::io_context& ioc, std::string host, uint16_t port, size_t max_idle)
    : ioc_(ioc),
      host_(std::move(host)),
      port_(port),
      max_idle_(max_idle),
      resolution_(std::make_shared<Resolution>(ioc)) {}

std::shared_ptr<UpstreamPool::Connection> UpstreamPool::Acquire(bool* reused) {
  while (!idle_.empty()) {
    std::shared_ptr<Connection> conn = std::move(idle_.back());
    idle_.pop_back();
    if (StillUsable(conn->stream.socket())) {
      *reused = true;
      return conn;
    }
  }
  *reused = false;
  return std::make_shared<Connection>(ioc_);
}

void UpstreamPool::Release(std::shared_ptr<Connection> conn) {
  if (idle_.size() >= max_idle_ || !conn->stream.socket().is_open()) return;
  conn->buffer.clear();
  idle_.push_back(std::move(conn));
}

void UpstreamPool::Resolve(ResolveHandler done) {
  const std::shared_ptr<Resolution> r = resolution_;
  if (r->resolved) {
    done({}, r->endpoints);
    return;
  }
  r->waiting.push_back(std::move(done));
  if (r->resolving) return;
  r->resolving = true;
  r->resolver.async_resolve(
      host_, std::to_string(port_),
      [r](beast::error_code ec, tcp::resolver::results_type results) {
        r->resolving = false;
        if (!ec) {
          r->endpoints = std::move(results);
          r->resolved = true;
        }
        std::vector<ResolveHandler> waiting = std::move(r->waiting);
        r->waiting.clear();
        for (ResolveHandler& h : waiting) h(ec, r->endpoints);
      });
}

UpstreamCall::UpstreamCall(UpstreamPool* pool, http::request<http::string_body> request,
                           std::chrono::nanoseconds connect_timeout,
                           std::chrono::nanoseconds total_timeout, Handlers handlers)
    : pool_(pool),
      request_(std::move(request)),
      connect_timeout_(connect_timeout),
      handlers_(std::move(handlers)),
      deadline_(pool->ioc()),
      chunk_(kChunkBytes) {
  deadline_.expires_after(total_timeout);
}

std::shared_ptr<UpstreamCall> UpstreamCall::Start(UpstreamPool* pool,
                                                  http::request<http::string_body> request,
                                                  std::chrono::nanoseconds connect_timeout,
                                                  std::chrono::nanoseconds total_timeout,
                                                  Handlers handlers) {
  auto call = std::make_shared<UpstreamCall>(pool, std::move(request), connect_timeout,
                                             total_timeout, std::move(handlers));
  call->Begin();
  return call;
}

void UpstreamCall::Begin() {
  deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->done_) return;
    self->timed_out_ = true;
    self->Fail(UpstreamError::kTimeout);
  });
  conn_ = pool_->Acquire(&reused_);
  if (reused_) {
    Write();
  } else {
    Connect();
  }
}

void UpstreamCall::Connect() {
  pool_->Resolve([self = shared_from_this()](beast::error_code ec,
                                             const tcp::resolver::results_type& endpoints) {
    if (self->done_) return;
    if (ec) {
      self->Fail(UpstreamError::kConnect);
      return;
    }
    self->ConnectTo(endpoints);
  });
}

void UpstreamCall::ConnectTo(const tcp::resolver::results_type& endpoints) {
  conn_->stream.expires_after(connect_timeout_);
  conn_->stream.async_connect(endpoints, [self = shared_from_this(), conn = conn_](
                                             beast::error_code ec, const tcp::endpoint&) {
    if (self->done_) return;
    if (ec) {
      self->pool_->ForgetEndpoints();
      self->Fail(UpstreamError::kConnect);
      return;
    }
    self->conn_->stream.expires_never();
    beast::error_code ignored;
    self->conn_->stream.socket().set_option(tcp::no_delay(true), ignored);
    self->Write();
  });
}

void UpstreamCall::Write() {
  http::async_write(conn_->stream, request_,
                    [self = shared_from_this(), conn = conn_](beast::error_code ec, size_t) {
                      if (self->done_) return;
                      if (ec) {
                        if (!self->MaybeReconnect()) self->Fail(UpstreamError::kReset);
                        return;
                      }
                      self->ReadHeader();
                    });
}

void UpstreamCall::ReadHeader() {
  parser_ = std::make_unique<http::response_parser<http::buffer_body>>();
  parser_->body_limit(std::numeric_limits<uint64_t>::max());
  parser_->header_limit(kMaxUpstreamHeaderBytes);
  http::async_read_header(conn_->stream, conn_->buffer, *parser_,
                          [self = shared_from_this(), conn = conn_](beast::error_code ec, size_t) {
                            if (self->done_) return;
                            if (ec) {
                              // The request was written: the upstream may have read it and
                              // acted on it, so it is not replayed here (a POST is not
                              // idempotent); the retry policy decides.
                              self->Fail(UpstreamError::kReset);
                              return;
                            }
                            // An interim answer (100 Continue, 103 Early Hints) is not the
                            // response (RFC 9110 15.2): read on to the final one. Taken as
                            // final, the real response stayed on the pooled connection and
                            // went to the next client that used it.
                            const unsigned status = self->parser_->get().result_int();
                            if (status >= 100 && status < 200 && status != 101) {
                              self->ReadHeader();
                              return;
                            }
                            self->got_header_ = true;
                            self->handlers_.on_header(self->parser_->get().base(),
                                                      self->parser_->chunked());
                            if (!self->done_) self->ReadBody();
                          });
}

void UpstreamCall::ReadBody() {
  if (done_) return;
  if (parser_->is_done()) {
    Finish(UpstreamError::kNone);
    return;
  }
  parser_->get().body().data = chunk_.data();
  parser_->get().body().size = chunk_.size();
  http::async_read_some(conn_->stream, conn_->buffer, *parser_,
                        [self = shared_from_this(), conn = conn_](beast::error_code ec, size_t) {
                          if (self->done_) return;
                          if (ec == http::error::need_buffer) ec = {};
                          if (ec) {
                            self->Fail(UpstreamError::kReset);
                            return;
                          }
                          size_t got = self->chunk_.size() - self->parser_->get().body().size;
                          if (got == 0) {
                            self->ReadBody();
                            return;
                          }
                          self->handlers_.on_data(std::string_view(self->chunk_.data(), got),
                                                  [self] { self->ReadBody(); });
                        });
}

bool UpstreamCall::MaybeReconnect() {
  if (!reused_ || reconnected_ || got_header_) return false;
  reconnected_ = true;
  reused_ = false;
  conn_ = std::make_shared<UpstreamPool::Connection>(pool_->ioc());
  Connect();
  return true;
}

void UpstreamCall::Cancel() {
  if (done_) return;
  cancelled_ = true;
  Fail(UpstreamError::kCancelled);
}

void UpstreamCall::Fail(UpstreamError error) {
  if (done_) return;
  // Closing aborts the pending operation; its handler, which holds the connection, frees it.
  if (conn_) {
    beast::error_code ignored;
    conn_->stream.socket().close(ignored);
    conn_.reset();
  }
  Finish(error);
}

void UpstreamCall::Finish(UpstreamError error) {
  if (done_) return;
  done_ = true;
  deadline_.cancel();
  if (error == UpstreamError::kNone && conn_ && parser_ && parser_->keep_alive()) {
    pool_->Release(std::move(conn_));
  }
  conn_.reset();
  auto on_done = std::move(handlers_.on_done);
  // Drop the other handlers' captured state later: one of them may be running right now.
  net::post(pool_->ioc(), [self = shared_from_this()] { self->handlers_ = {}; });
  if (on_done) on_done(error);
}

}  // namespace kinfer
