#include "sidecar/proxy/proxy_server.h"

#include <cctype>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/http_errors.h"
#include "common/metrics/metrics.h"
#include "sidecar/proxy/sse_first_token.h"

namespace kinfer {
namespace {

constexpr size_t kHeaderLimit = 64 * 1024;
constexpr auto kIdleTimeout = std::chrono::seconds(75);
constexpr size_t kMaxPipelinedBytes = 64 * 1024;
constexpr size_t kMaxBufferedResponse = 64u << 20;  // non-streamed upstream bodies
constexpr auto kReadyProbeTimeout = std::chrono::seconds(1);
constexpr auto kCancelTimeout = std::chrono::seconds(2);
constexpr auto kExpiryTick = std::chrono::milliseconds(5);
constexpr auto kDrainPoll = std::chrono::milliseconds(20);
constexpr std::string_view kJson = "application/json";

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

bool IsHopByHop(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
      "trailer",    "upgrade",    "content-length",   "host",              "expect"};
  for (std::string_view n : kNames) {
    if (beast::iequals(name, n)) return true;
  }
  return false;
}

std::string_view PathOf(std::string_view target) {
  size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

bool IsPolicyPath(std::string_view path) {
  return path == "/v1/chat/completions" || path == "/v1/completions";
}

bool IsPassThroughPath(std::string_view path) {
  return path.substr(0, 4) == "/v1/" || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

// ---- Session: one inbound connection -------------------------------------------------------

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ProxyServer* server) : stream_(std::move(socket)), server_(server) {}

  void Start() { DoRead(); }

  const http::request<http::string_body>& request() const { return parser_->get(); }
  bool keep_alive() const { return keep_alive_; }

  // A whole response. Ends the current request.
  void Reply(http::response<http::string_body> res) {
    res.version(11);
    res.keep_alive(keep_alive_);
    res.prepare_payload();
    auto msg = std::make_shared<http::response<http::string_body>>(std::move(res));
    ArmWriteTimer();
    http::async_write(stream_, *msg,
                      [self = shared_from_this(), msg](beast::error_code ec, size_t) {
                        self->Finished(!ec && self->keep_alive_);
                      });
  }

  void ReplyJson(int status, std::string body,
                 std::optional<int64_t> retry_after_seconds = std::nullopt,
                 std::string_view degraded = {}) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, kJson);
    if (retry_after_seconds) res.set(http::field::retry_after, std::to_string(*retry_after_seconds));
    if (!degraded.empty()) res.set("x-kinfer-degraded", degraded);
    res.body() = std::move(body);
    Reply(std::move(res));
  }

  void ReplyError(int status, std::string_view message,
                  std::optional<int64_t> retry_after_seconds = std::nullopt,
                  std::string_view code = {}) {
    ReplyJson(status, ErrorBody(status, message, {}, code), retry_after_seconds);
  }

  // 405 with Allow and a JSON body.
  void ReplyMethodNotAllowed(std::string_view allow, std::string_view path) {
    http::response<http::string_body> res{http::status::method_not_allowed, 11};
    res.set(http::field::content_type, kJson);
    res.set(http::field::allow, allow);
    res.body() = ErrorBody(405, "use " + std::string(allow) + " for " + std::string(path));
    Reply(std::move(res));
  }

  // Streaming: the header (chunked), then chunks, then the end. Writes are queued in order;
  // `done(ok)` runs when that write finished (ok false: the client is gone).
  void StartStream(http::response<http::empty_body> res, std::function<void(bool)> done) {
    res.version(11);
    res.keep_alive(keep_alive_);
    res.chunked(true);
    auto msg = std::make_shared<http::response<http::empty_body>>(std::move(res));
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*msg);
    Enqueue(PendingWrite{{}, [msg, sr](Session* s, auto cb) {
                           http::async_write_header(s->stream_, *sr, std::move(cb));
                         },
                         std::move(done)});
  }
  void WriteChunk(std::string_view data, std::function<void(bool)> done) {
    if (data.empty()) {
      done(!closed_);
      return;
    }
    char size[24];
    int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string framed;
    framed.reserve(n + data.size() + 2);
    framed.append(size, n).append(data).append("\r\n");
    Enqueue(PendingWrite{std::move(framed), nullptr, std::move(done)});
  }
  // Ends the chunked body; the request is over once it is written.
  void EndStream() {
    Enqueue(PendingWrite{"0\r\n\r\n", nullptr, [self = shared_from_this()](bool ok) {
                           self->Finished(ok && self->keep_alive_);
                         }});
  }

  // Watches the socket while a request waits, so a client that goes away is noticed.
  void WatchClient();

  void Close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    EndRequest();
  }

 private:
  struct PendingWrite {
    std::string bytes;  // written as is, unless `custom` is set
    std::function<void(Session*, std::function<void(beast::error_code, size_t)>)> custom;
    std::function<void(bool)> done;
  };

  void DoRead() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_->core_.config().max_body_bytes);
    stream_.expires_after(kIdleTimeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->OnHeader(ec);
                            });
  }

  void OnHeader(beast::error_code ec) {
    if (ec == http::error::body_limit) {  // Content-Length alone is over the limit
      BeginRequest();
      keep_alive_ = false;
      ReplyError(413, "request body is over the limit of " +
                          std::to_string(server_->core_.config().max_body_bytes) + " bytes");
      return;
    }
    if (ec) {
      if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
          ec != net::error::connection_reset && ec != net::error::operation_aborted &&
          ec != net::error::eof) {
        BeginRequest();
        keep_alive_ = false;
        ReplyError(ec == http::error::header_limit ? 431 : 400,
                   "malformed HTTP request: " + ec.message());
        return;
      }
      Close();
      return;
    }
    BeginRequest();
    auto& req = parser_->get();
    keep_alive_ = req.keep_alive() && !server_->draining_;
    if (auto len = parser_->content_length(); len && *len > server_->core_.config().max_body_bytes) {
      keep_alive_ = false;  // the body stays unread
      ReplyError(413, "request body of " + std::to_string(*len) + " bytes is over the limit of " +
                          std::to_string(server_->core_.config().max_body_bytes) + " bytes");
      return;
    }
    if (beast::iequals(req[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      http::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code ec, size_t) {
        if (ec) return self->Close();
        self->ReadBody();
      });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->OnBody(ec);
                     });
  }

  void OnBody(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      ReplyError(413, "request body is over the limit of " +
                          std::to_string(server_->core_.config().max_body_bytes) + " bytes");
      return;
    }
    if (ec && ec.category() == http::make_error_code(http::error::bad_chunk).category() &&
        ec != http::error::partial_message && ec != http::error::end_of_stream) {
      // A malformed body (a bad chunk size, say) gets an answer, then the connection closes.
      keep_alive_ = false;
      ReplyError(400, "malformed HTTP request body: " + ec.message());
      return;
    }
    if (ec) {
      Close();
      return;
    }
    stream_.expires_never();
    Handle();
  }

  void Handle();
  void ReplyReady();

  void BeginRequest() {
    if (!in_request_) {
      in_request_ = true;
      ++server_->open_responses_;
    }
  }
  void EndRequest();

  void Finished(bool keep_alive) {
    EndRequest();
    if (!keep_alive || closed_) {
      Close();
      return;
    }
    if (watching_) {
      read_after_watch_ = true;  // the pending watch read becomes the next request's first read
      stream_.expires_after(kIdleTimeout);  // and it waits no longer than any idle connection
      if (buffer_.size() > 0) {
        // The watch already holds the next (pipelined) request: stop waiting for more bytes,
        // which a pipelining client sends only after this answer, and parse it now.
        beast::error_code ignored;
        stream_.socket().cancel(ignored);
      }
      return;
    }
    DoRead();
  }

  void Enqueue(PendingWrite write) {
    if (closed_) {
      if (write.done) write.done(false);
      return;
    }
    writes_.push_back(std::move(write));
    if (writes_.size() == 1) WriteNext();
  }

  // Every write to the client runs under client_write_timeout: a client that stops reading (a
  // full socket buffer) would otherwise hold its request's admission slot, and the upstream
  // request behind it, for as long as it liked. On expiry the stream closes the socket, the write
  // fails, and the exchange ends as if the client had gone (the upstream request is cancelled).
  void ArmWriteTimer() { stream_.expires_after(server_->core_.config().client_write_timeout); }

  void WriteNext() {
    auto on_written = [self = shared_from_this()](beast::error_code ec, size_t) {
      PendingWrite done = std::move(self->writes_.front());
      self->writes_.pop_front();
      // Nothing left to write: no timer while the stream waits for the upstream's next bytes.
      if (!ec && self->writes_.empty()) self->stream_.expires_never();
      if (ec) {
        // The client is gone: fail every queued write too.
        std::deque<PendingWrite> rest;
        rest.swap(self->writes_);
        if (done.done) done.done(false);
        for (auto& w : rest) {
          if (w.done) w.done(false);
        }
        self->Close();
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

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  ProxyServer* server_;
  std::shared_ptr<Exchange> exchange_;
  std::deque<PendingWrite> writes_;
  bool keep_alive_ = true;
  bool in_request_ = false;
  bool watching_ = false;
  bool read_after_watch_ = false;
  bool closed_ = false;

  friend class Exchange;
};

// ---- Exchange: one proxied request ---------------------------------------------------------

class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<Session> session, ProxyServer* server, bool policy)
      : session_(std::move(session)),
        server_(server),
        policy_(policy),
        arrival_(server->Now()),
        backoff_(server->ioc_) {}

  void Begin();
  void StartUpstream();
  // A queued request leaves the queue without starting (deadline passed, or displaced by a more
  // important arrival): 503 with the reason.
  void RejectQueued(std::string_view reason, std::string_view message);
  void OnClientGone();

 private:
  enum class State { kNew, kQueued, kUpstream, kDone };

  SidecarCore& core() { return server_->core_; }
  SidecarMetrics& metrics() { return server_->metrics_; }
  void Attempt();
  void OnHeader(const UpstreamCall::Header& header, bool chunked);
  void OnData(std::string_view data, std::function<void()> next);
  void OnDone(UpstreamError error);
  bool MaybeRetry();
  void FailBeforeResponse(UpstreamError error);
  void Complete(SidecarCore::Result result);
  void CountResponse(int status) {
    if (policy_) metrics().CountResponse(info_.priority, status);
  }
  void ReplyError(int status, std::string_view message, std::optional<int64_t> retry_after = {},
                  std::string_view code = {}) {
    CountResponse(status);
    session_->ReplyError(status, message, retry_after, code);
  }
  http::request<http::string_body> BuildUpstreamRequest() const;
  std::string UpstreamRequestId() const;
  void CancelUpstream();
  // The upstream this exchange's route goes to: its URL and its connection pool.
  const UpstreamUrl& RouteUrl() const;
  UpstreamPool* RoutePool() const;

  std::shared_ptr<Session> session_;
  ProxyServer* server_;
  bool policy_;
  SidecarCore::TimePoint arrival_;
  SidecarCore::TimePoint started_{};
  State state_ = State::kNew;
  uint64_t id_ = 0;
  std::string path_;
  RequestInfo info_;
  SidecarCore::Route route_;
  std::optional<CacheKey> cache_key_;
  std::shared_ptr<UpstreamCall> call_;
  net::steady_timer backoff_;
  int retries_ = 0;
  bool retrying_ = false;
  bool too_large_ = false;  // a non-streamed body over kMaxBufferedResponse
  bool streaming_ = false;
  bool sse_ = false;
  bool response_started_ = false;
  bool first_token_seen_ = false;
  SseFirstTokenDetector first_token_;
  int status_ = 0;
  http::response<http::string_body> buffered_;
};

void Exchange::Begin() {
  const auto& req = session_->request();
  path_ = std::string(PathOf(req.target()));
  if (!policy_) {
    if (server_->draining_) {
      session_->ReplyError(503, "the sidecar is shutting down", 1);
      return;
    }
    state_ = State::kUpstream;
    Attempt();
    return;
  }
  HeaderLookup lookup = [&req](std::string_view name) -> std::optional<std::string_view> {
    auto it = req.find(name);
    if (it == req.end()) return std::nullopt;
    return it->value();
  };
  StatusOr<RequestInfo> info = ParseRequestInfo(req.body(), lookup, core().config());
  if (!info.ok()) {
    info_.priority = core().config().ClassIndex(core().config().default_class);
    ReplyError(400, info.status().message());
    return;
  }
  info_ = std::move(*info);
  id_ = server_->next_id_++;
  SidecarCore::Verdict v = core().OnArrival(id_, path_, info_, arrival_);
  switch (v.action) {
    case SidecarCore::Action::kReject: {
      std::optional<int64_t> retry_after;
      if (v.retry_after) retry_after = RetryAfterSeconds(*v.retry_after);
      ReplyError(v.http_status, v.message, retry_after, v.reason);
      return;
    }
    case SidecarCore::Action::kCacheHit: {
      http::response<http::string_body> res{static_cast<http::status>(v.cached.status), 11};
      res.set(http::field::content_type, v.cached.content_type);
      res.set("x-kinfer-cache", "hit");
      res.body() = std::move(v.cached.body);
      CountResponse(v.cached.status);
      metrics().ObserveE2e(info_.priority, Seconds(server_->Now() - arrival_));
      session_->Reply(std::move(res));
      return;
    }
    case SidecarCore::Action::kStart:
    case SidecarCore::Action::kQueued:
      break;
  }
  route_ = std::move(v.route);
  cache_key_ = std::move(v.cache_key);
  if (v.action == SidecarCore::Action::kStart) {
    StartUpstream();
    return;
  }
  state_ = State::kQueued;
  server_->waiting_[id_] = weak_from_this();
  if (v.displaced) {
    if (auto ex = server_->Waiting(*v.displaced)) {
      ex->RejectQueued("displaced", "overloaded: pushed out of the queue by more important requests");
    }
  }
  session_->WatchClient();
  server_->ArmExpiry();
}

void Exchange::StartUpstream() {
  if (state_ == State::kDone) return;
  server_->waiting_.erase(id_);
  state_ = State::kUpstream;
  started_ = server_->Now();
  metrics().ObserveQueueWait(info_.priority, Seconds(started_ - arrival_));
  if (auto retry_after = core().OnStart(id_, route_, info_.priority, started_)) {
    ReplyError(503, "the upstream is unavailable (circuit breaker open)",
               RetryAfterSeconds(*retry_after), "breaker_open");
    Complete(SidecarCore::Result::kIgnored);
    return;
  }
  Attempt();
}

void Exchange::RejectQueued(std::string_view reason, std::string_view message) {
  if (state_ != State::kQueued) return;
  state_ = State::kDone;
  server_->waiting_.erase(id_);
  metrics().CountRejected(info_.priority, reason);
  ReplyError(503, message, RetryAfterSeconds(core().config().admission.min_retry_after), reason);
}

void Exchange::OnClientGone() {
  if (state_ == State::kDone) return;
  metrics().CountClientDisconnect();
  if (state_ == State::kQueued) {
    state_ = State::kDone;
    server_->waiting_.erase(id_);
    if (!core().Cancel(id_)) {
      // Already dispatched to start (the start is posted): give its slot back.
      server_->Run(core().OnFinished(id_, {}, SidecarCore::Result::kIgnored, {}, server_->Now()));
    }
    session_->Close();
    return;
  }
  if (call_) {
    // Closing the connection stops a stream (the runtime's next write fails), not a whole
    // response: the runtime writes nothing until the end. Name it and cancel it.
    if (policy_ && !streaming_) CancelUpstream();
    call_->Cancel();  // OnDone(kCancelled) completes the exchange
  } else if (state_ == State::kUpstream) {
    backoff_.cancel();
    Complete(SidecarCore::Result::kIgnored);
  }
  session_->Close();
}

std::string Exchange::UpstreamRequestId() const {
  return server_->request_id_prefix_ + std::to_string(id_);
}

// Fire and forget: POST /cancel {"request_id": ...} to the upstream this exchange's request went
// to. kinfer-runtime stops the generation (runtime/server/cancel_registry.h); another upstream
// answers 404, which changes nothing.
void Exchange::CancelUpstream() {
  const SidecarConfig& config = core().config();
  const UpstreamUrl& url = RouteUrl();
  http::request<http::string_body> req{http::verb::post, url.base_path + "/cancel", 11};
  req.set(http::field::host, url.host + ":" + std::to_string(url.port));
  req.set(http::field::content_type, kJson);
  req.keep_alive(true);
  req.body() = nlohmann::json{{"request_id", UpstreamRequestId()}}.dump();
  req.prepare_payload();
  UpstreamCall::Handlers h;
  h.on_header = [](const UpstreamCall::Header&, bool) {};
  h.on_data = [](std::string_view, std::function<void()> next) { next(); };
  h.on_done = [](UpstreamError) {};
  UpstreamCall::Start(RoutePool(), std::move(req), config.connect_timeout, kCancelTimeout,
                      std::move(h));
}

const UpstreamUrl& Exchange::RouteUrl() const {
  const SidecarConfig& config = server_->core_.config();
  return route_.fallback_upstream ? config.fallback_upstream : config.upstream;
}

UpstreamPool* Exchange::RoutePool() const {
  return route_.fallback_upstream && server_->fallback_ ? server_->fallback_.get()
                                                        : &server_->primary_;
}

http::request<http::string_body> Exchange::BuildUpstreamRequest() const {
  const auto& in = session_->request();
  const UpstreamUrl& url = RouteUrl();
  http::request<http::string_body> out{in.method(), url.base_path + std::string(in.target()), 11};
  for (const auto& field : in) {
    if (!IsHopByHop(field.name_string())) out.set(field.name_string(), field.value());
  }
  out.set(http::field::host, url.host + ":" + std::to_string(url.port));
  out.keep_alive(true);
  out.body() = (policy_ && (route_.rewrite() || info_.body_priority))
                   ? RewriteBody(info_, route_.model, route_.max_tokens)
                   : in.body();
  // The runtime orders its own queue by this header: the class the sidecar decided (its index,
  // which is the runtime's scale: critical 0, standard 1, batch 2 with the default classes).
  if (policy_) {
    out.set("x-kinfer-priority", std::to_string(info_.priority));
    out.set("x-kinfer-request-id", UpstreamRequestId());
  }
  out.prepare_payload();
  return out;
}

void Exchange::Attempt() {
  UpstreamPool* pool = RoutePool();
  UpstreamCall::Handlers h;
  auto self = shared_from_this();
  h.on_header = [self](const UpstreamCall::Header& header, bool chunked) {
    self->OnHeader(header, chunked);
  };
  h.on_data = [self](std::string_view data, std::function<void()> next) {
    self->OnData(data, std::move(next));
  };
  h.on_done = [self](UpstreamError error) { self->OnDone(error); };
  const SidecarConfig& c = core().config();
  call_ = UpstreamCall::Start(pool, BuildUpstreamRequest(), c.connect_timeout, c.upstream_timeout,
                              std::move(h));
  if (!session_->watching_) session_->WatchClient();
}

void Exchange::OnHeader(const UpstreamCall::Header& header, bool chunked) {
  status_ = header.result_int();
  if (status_ == 503 && policy_ && MaybeRetry()) {
    metrics().CountUpstreamError("status_5xx");
    retrying_ = true;
    call_->Cancel();
    return;
  }
  std::string_view content_type = header[http::field::content_type];
  sse_ = content_type.find("text/event-stream") != std::string_view::npos;
  streaming_ = chunked || sse_;
  if (!streaming_) {
    buffered_ = http::response<http::string_body>{header.result(), 11};
    for (const auto& field : header) {
      if (!IsHopByHop(field.name_string())) buffered_.set(field.name_string(), field.value());
    }
    return;
  }
  http::response<http::empty_body> res{header.result(), 11};
  for (const auto& field : header) {
    if (!IsHopByHop(field.name_string())) res.set(field.name_string(), field.value());
  }
  if (!route_.degraded.empty()) res.set("x-kinfer-degraded", route_.degraded);
  response_started_ = true;
  session_->StartStream(std::move(res), [self = shared_from_this()](bool ok) {
    if (!ok) self->OnClientGone();
  });
}

void Exchange::OnData(std::string_view data, std::function<void()> next) {
  // TTFT: the first token of an SSE stream; the first byte of another chunked body.
  if (!first_token_seen_ && streaming_ && (!sse_ || first_token_.Feed(data))) {
    first_token_seen_ = true;
    auto now = server_->Now();
    double ttft = Seconds(now - arrival_);
    if (policy_) {
      metrics().ObserveTtft(info_.priority, ttft);
      core().RecordTtft(ttft, now);
    }
  }
  if (!streaming_) {
    if (buffered_.body().size() + data.size() > kMaxBufferedResponse) {
      too_large_ = true;
      call_->Cancel();
      return;
    }
    buffered_.body().append(data);
    next();
    return;
  }
  session_->WriteChunk(data, [self = shared_from_this(), next = std::move(next)](bool ok) {
    if (!ok) {
      self->OnClientGone();
      return;
    }
    next();
  });
}

bool Exchange::MaybeRetry() {
  if (response_started_ || retries_ >= core().config().retries.max_retries) return false;
  if (!core().TryRetry(server_->Now())) return false;
  ++retries_;
  return true;
}

void Exchange::OnDone(UpstreamError error) {
  call_.reset();
  if (retrying_) {
    retrying_ = false;
    if (state_ == State::kDone) return;
    backoff_.expires_after(core().config().retries.backoff);
    backoff_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->state_ == State::kDone) return;
      self->Attempt();
    });
    return;
  }
  if (state_ == State::kDone) return;
  using Result = SidecarCore::Result;
  if (error == UpstreamError::kCancelled) {
    if (too_large_) {
      ReplyError(502, "the upstream response is too large to relay", std::nullopt,
                 "upstream_too_large");
    }
    Complete(Result::kIgnored);  // the client went away (OnClientGone), or too large
    return;
  }
  if (error != UpstreamError::kNone) {
    metrics().CountUpstreamError(UpstreamErrorName(error));
    if (!response_started_) {
      if (error == UpstreamError::kConnect && policy_ && MaybeRetry()) {
        retrying_ = true;
        OnDone(UpstreamError::kNone);  // schedules the retry
        return;
      }
      FailBeforeResponse(error);
    } else {
      // Mid-stream: tell the client in the stream's own format, then end it cleanly.
      std::string event = "data: " +
                          ErrorBody(502, std::string("the upstream failed mid-stream: ") +
                                             std::string(UpstreamErrorName(error)),
                                    {}, "upstream_" + std::string(UpstreamErrorName(error))) +
                          "\n\n";
      session_->WriteChunk(event, [](bool) {});
      session_->EndStream();
      CountResponse(status_);
    }
    Complete(Result::kFailure);
    return;
  }
  // The upstream finished cleanly.
  auto now = server_->Now();
  if (streaming_) {
    session_->EndStream();
  } else {
    if (policy_) {
      double ttft = Seconds(now - arrival_);
      metrics().ObserveTtft(info_.priority, ttft);
      core().RecordTtft(ttft, now);
    }
    if (!route_.degraded.empty()) buffered_.set("x-kinfer-degraded", route_.degraded);
    if (cache_key_) {
      buffered_.set("x-kinfer-cache", "miss");
      CachedResponse cached;
      cached.status = status_;
      cached.content_type = std::string(buffered_[http::field::content_type]);
      cached.body = buffered_.body();
      cached.complete = true;
      core().StoreInCache(*cache_key_, std::move(cached), now);
    }
    session_->Reply(std::move(buffered_));
  }
  CountResponse(status_);
  const Result result = SidecarCore::ResultForUpstreamStatus(
      status_, session_->request().count("x-kinfer-timeout") != 0);
  if (result == Result::kFailure) metrics().CountUpstreamError("status_5xx");
  Complete(result);
}

void Exchange::FailBeforeResponse(UpstreamError error) {
  switch (error) {
    case UpstreamError::kTimeout:
      ReplyError(504, "the upstream did not answer in time", std::nullopt, "upstream_timeout");
      break;
    case UpstreamError::kConnect:
      ReplyError(503, "cannot connect to the upstream", 1, "upstream_connect");
      break;
    default:
      ReplyError(502, "the upstream closed the connection without a complete response",
                 std::nullopt, "upstream_reset");
      break;
  }
}

void Exchange::Complete(SidecarCore::Result result) {
  if (state_ == State::kDone) return;
  bool was_upstream = state_ == State::kUpstream;
  state_ = State::kDone;
  auto now = server_->Now();
  if (!policy_) return;
  metrics().ObserveE2e(info_.priority, Seconds(now - arrival_));
  if (was_upstream) {
    server_->Run(core().OnFinished(id_, route_, result, now - started_, now));
  }
}

// ---- Session methods that need Exchange ----------------------------------------------------

void Session::WatchClient() {
  if (watching_ || closed_) return;
  watching_ = true;
  auto space = buffer_.prepare(4096);
  stream_.socket().async_read_some(space, [self = shared_from_this()](beast::error_code ec,
                                                                        size_t n) {
    self->watching_ = false;
    if (!ec) self->buffer_.commit(n);
    if (self->read_after_watch_) {
      self->read_after_watch_ = false;
      const bool pipelined = ec == net::error::operation_aborted && self->buffer_.size() > 0;
      if (ec && !pipelined) return self->Close();
      return self->DoRead();
    }
    if (ec) {
      // Hold the exchange: OnClientGone closes the session, which drops its reference.
      if (auto exchange = self->exchange_) exchange->OnClientGone();
      self->Close();
      return;
    }
    // Pipelined bytes of the next request: keep them and keep watching (bounded).
    if (self->exchange_ && self->buffer_.size() < kMaxPipelinedBytes) self->WatchClient();
  });
}

void Session::EndRequest() {
  if (in_request_) {
    in_request_ = false;
    --server_->open_responses_;
  }
  exchange_.reset();
}

void Session::Handle() {
  const auto& req = parser_->get();
  std::string_view path = PathOf(req.target());
  const bool get = req.method() == http::verb::get;
  if (get && path == "/health") {
    ReplyJson(200, R"({"status":"ok"})");
  } else if (get && path == "/ready") {
    ReplyReady();
  } else if (get && path == "/metrics") {
    server_->core_.UpdateGauges(server_->Now());
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::content_type, metrics::kTextContentType);
    res.body() = server_->metrics_.ExposeText();
    Reply(std::move(res));
  } else if (get && path == "/stats") {
    ReplyJson(200, server_->core_.StatsJson(server_->Now()));
  } else if (path == "/health" || path == "/ready" || path == "/metrics" || path == "/stats") {
    // A body after a HEAD answer would be read as the next response: close after it instead.
    if (req.method() == http::verb::head) keep_alive_ = false;
    ReplyMethodNotAllowed("GET", path);
  } else if (IsPolicyPath(path) || IsPassThroughPath(path)) {
    bool policy = IsPolicyPath(path);
    if (policy && req.method() != http::verb::post) {
      ReplyMethodNotAllowed("POST", path);
      return;
    }
    exchange_ = std::make_shared<Exchange>(shared_from_this(), server_, policy);
    exchange_->Begin();
  } else {
    ReplyError(404, "no route for " + std::string(req.method_string()) + " " + std::string(path));
  }
}

void Session::ReplyReady() {
  auto now = server_->Now();
  if (server_->draining_) {
    ReplyJson(503, R"({"status":"draining"})");
    return;
  }
  if (!server_->core_.Ready(now)) {
    ReplyJson(503, R"({"status":"breaker_open"})");
    return;
  }
  const UpstreamUrl& url = server_->core_.config().upstream;
  http::request<http::string_body> probe{http::verb::get, url.base_path + "/ready", 11};
  probe.set(http::field::host, url.host + ":" + std::to_string(url.port));
  probe.keep_alive(true);
  auto status = std::make_shared<int>(0);
  UpstreamCall::Handlers h;
  h.on_header = [status](const UpstreamCall::Header& header, bool) {
    *status = header.result_int();
  };
  h.on_data = [](std::string_view, std::function<void()> next) { next(); };
  h.on_done = [self = shared_from_this(), status](UpstreamError error) {
    if (error == UpstreamError::kNone && *status == 200) {
      self->ReplyJson(200, R"({"status":"ready"})");
    } else {
      self->ReplyJson(503, R"({"status":"upstream_not_ready"})");
    }
  };
  UpstreamCall::Start(&server_->primary_, std::move(probe),
                      server_->core_.config().connect_timeout, kReadyProbeTimeout, std::move(h));
}

// ---- ProxyServer ---------------------------------------------------------------------------

ProxyServer::ProxyServer(net::io_context& ioc, const SidecarConfig& config,
                         std::string config_path)
    : ioc_(ioc),
      config_path_(std::move(config_path)),
      metrics_(
          [&config] {
            std::vector<std::string> names;
            for (const auto& c : config.classes) names.push_back(c.name);
            return names;
          }(),
          config.ttft_buckets, config.e2e_buckets),
      core_(config, &metrics_),
      primary_(ioc, config.upstream.host, config.upstream.port),
      acceptor_(ioc),
      expiry_timer_(ioc),
      drain_timer_(ioc) {
  std::random_device rd;
  char tag[24];
  std::snprintf(tag, sizeof tag, "sc-%08x%08x-", rd(), rd());
  request_id_prefix_ = tag;
  if (config.has_fallback_upstream) {
    fallback_ = std::make_unique<UpstreamPool>(ioc, config.fallback_upstream.host,
                                               config.fallback_upstream.port);
  }
}

ProxyServer::~ProxyServer() = default;

Status ProxyServer::Listen() {
  const HostPort& listen = core_.config().listen;
  beast::error_code ec;
  auto address = net::ip::make_address(listen.host, ec);
  if (ec) return InvalidArgument("listen: bad address '" + listen.host + "': " + ec.message());
  tcp::endpoint endpoint(address, listen.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Unavailable("cannot listen on " + listen.host + ":" + std::to_string(listen.port) +
                       ": " + ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
  Accept();
  return Status();
}

void ProxyServer::Accept() {
  acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      spdlog::warn("accept failed: {}", ec.message());
    } else {
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), this)->Start();
    }
    Accept();
  });
}

void ProxyServer::Run(AdmissionQueue::Dispatch dispatch) {
  if (dispatch.start.empty() && dispatch.expired.empty()) return;
  net::post(ioc_, [this, d = std::move(dispatch)] {
    for (uint64_t id : d.expired) {
      if (auto ex = Waiting(id)) {
        ex->RejectQueued("deadline_expired",
                         "overloaded: the request could not start before its deadline");
      }
    }
    for (uint64_t id : d.start) {
      if (!waiting_.count(id)) continue;  // its client left meanwhile (OnClientGone freed it)
      if (auto ex = Waiting(id)) {
        ex->StartUpstream();
      } else {
        // The exchange vanished without telling the core (cannot happen by design): free it.
        waiting_.erase(id);
        Run(core_.OnFinished(id, {}, SidecarCore::Result::kIgnored, {}, Now()));
      }
    }
  });
}

std::shared_ptr<Exchange> ProxyServer::Waiting(uint64_t id) const {
  auto it = waiting_.find(id);
  return it == waiting_.end() ? nullptr : it->second.lock();
}

void ProxyServer::ArmExpiry() {
  if (expiry_armed_) return;
  expiry_armed_ = true;
  expiry_timer_.expires_after(kExpiryTick);
  expiry_timer_.async_wait([this](beast::error_code ec) {
    expiry_armed_ = false;
    if (ec) return;
    AdmissionQueue::Dispatch d;
    d.expired = core_.Expire(Now());
    Run(std::move(d));
    if (!waiting_.empty()) ArmExpiry();
  });
}

void ProxyServer::BeginDrain(std::function<void()> on_drained) {
  if (draining_) return;
  draining_ = true;
  on_drained_ = std::move(on_drained);
  core_.StartDraining();
  beast::error_code ignored;
  acceptor_.close(ignored);
  drain_deadline_ = Now() + core_.config().drain_timeout;
  spdlog::info("draining: {} requests outstanding, {} responses open (timeout {:.0f}s)",
               core_.outstanding(), open_responses_, Seconds(core_.config().drain_timeout));
  CheckDrained();
}

void ProxyServer::CheckDrained() {
  bool idle = core_.outstanding() == 0 && open_responses_ == 0;
  if (idle || Now() >= drain_deadline_) {
    if (!idle) {
      spdlog::warn("drain timeout: {} requests still outstanding", core_.outstanding());
    }
    if (on_drained_) {
      auto done = std::move(on_drained_);
      on_drained_ = nullptr;
      done();
    }
    return;
  }
  drain_timer_.expires_after(kDrainPoll);
  drain_timer_.async_wait([this](beast::error_code ec) {
    if (!ec) CheckDrained();
  });
}

void ProxyServer::Reload() {
  if (config_path_.empty()) {
    spdlog::warn("SIGHUP: no --config file to reload");
    return;
  }
  StatusOr<SidecarConfig> next = LoadSidecarConfigFile(config_path_);
  if (!next.ok()) {
    metrics_.CountReload(false);
    spdlog::error("SIGHUP: keeping the running config: {}", next.status().ToString());
    return;
  }
  const SidecarConfig& cur = core_.config();
  if (next->listen.host != cur.listen.host || next->listen.port != cur.listen.port ||
      next->upstream.host != cur.upstream.host || next->upstream.port != cur.upstream.port ||
      next->fallback_upstream_text != cur.fallback_upstream_text) {
    spdlog::warn("SIGHUP: listen/upstream addresses changed; they apply after a restart");
  }
  StatusOr<AdmissionQueue::Dispatch> dispatch = core_.Reconfigure(*next, Now());
  if (!dispatch.ok()) {
    metrics_.CountReload(false);
    spdlog::error("SIGHUP: keeping the running config: {}", dispatch.status().ToString());
    return;
  }
  metrics_.CountReload(true);
  spdlog::info("SIGHUP: configuration reloaded from {}", config_path_);
  Run(std::move(*dispatch));
}

}  // namespace kinfer
