#include "sidecar/proxy/proxy_server.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <deque>
#include <optional>
#include <random>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "common/http_errors.h"
#include "common/metrics/metrics.h"
#include "common/request_path.h"
#include "sidecar/proxy/sse_first_token.h"

namespace kinfer {
namespace {

constexpr size_t kMaxBufferedResponse = 64u << 20;  // non-streamed upstream bodies
constexpr auto kReadyProbeTimeout = std::chrono::seconds(1);
constexpr auto kCancelTimeout = std::chrono::seconds(2);
constexpr auto kExpiryTick = std::chrono::milliseconds(5);
constexpr auto kDrainPoll = std::chrono::milliseconds(20);
constexpr std::string_view kJson = "application/json";

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

bool IsHopByHop(std::string_view name) {
  static constexpr std::string_view kNames[] = {
      "connection", "keep-alive", "proxy-connection", "transfer-encoding",
      "te",         "trailer",    "upgrade",          "content-length",
      "host",       "expect"};
  for (std::string_view n : kNames) {
    if (beast::iequals(name, n)) return true;
  }
  return false;
}

// Copies `from`'s end-to-end fields into `to`: neither the hop-by-hop ones nor any field the
// Connection header names (RFC 9110 7.6.1; `Connection: keep-alive, x-foo` makes x-foo hop-by-hop).
template <class From, class To>
void CopyEndToEnd(const From& from, To& to) {
  std::vector<std::string_view> named;
  auto [begin, end] = from.equal_range(http::field::connection);
  for (auto it = begin; it != end; ++it) {
    for (std::string_view token : http::token_list(it->value())) named.push_back(token);
  }
  for (const auto& field : from) {
    const std::string_view name = field.name_string();
    if (IsHopByHop(name)) continue;
    if (std::any_of(named.begin(), named.end(),
                    [name](std::string_view n) { return beast::iequals(name, n); })) {
      continue;
    }
    to.insert(name, field.value());  // every line: Set-Cookie, Vary, ... may repeat
  }
}

// Whether an upstream's 2xx answer may be stored in the response cache. Not when the upstream
// says so (Cache-Control no-store or private, RFC 9111 5.2.2), and not when its body is
// content-coded: the stored bytes would go to later clients without the Content-Encoding (and to
// clients that never asked for that coding), and the id rewrite of a hit cannot read them.
bool StorableUpstreamAnswer(const http::response<http::string_body>& res) {
  const std::string_view coding = res[http::field::content_encoding];
  if (!coding.empty() && !beast::iequals(coding, "identity")) return false;
  std::string_view rest = res[http::field::cache_control];
  while (!rest.empty()) {  // "no-store", "private", "private=\"x\"", "max-age=0", ...
    const size_t comma = rest.find(',');
    std::string_view directive = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    directive = directive.substr(0, directive.find('='));
    while (!directive.empty() && (directive.front() == ' ' || directive.front() == '\t')) {
      directive.remove_prefix(1);
    }
    while (!directive.empty() && (directive.back() == ' ' || directive.back() == '\t')) {
      directive.remove_suffix(1);
    }
    if (beast::iequals(directive, "no-store") || beast::iequals(directive, "private")) return false;
  }
  return true;
}

// The request's id as the client gave it (`x-request-id`), or `generated` when it gave none.
std::string RequestIdOf(const ServerSession::Request& req, std::string generated) {
  std::string_view given = req["x-request-id"];
  return given.empty() ? std::move(generated) : std::string(given);
}

bool IsPolicyPath(std::string_view path) {
  return path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/responses";
}

bool IsPassThroughPath(std::string_view path) {
  return path.substr(0, 4) == "/v1/" || path == "/tokenize" || path == "/detokenize";
}

}  // namespace

// ---- Exchange: one proxied request ---------------------------------------------------------

class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  // `path`: the request's RoutedPath (the upstream still gets the target as the client wrote it).
  Exchange(std::shared_ptr<ServerSession> session, ProxyServer* server, bool policy, std::string path)
      : session_(std::move(session)),
        server_(server),
        policy_(policy),
        path_(std::move(path)),
        arrival_(server->Now()),
        backoff_(server->ioc_) {}

  void Begin();
  // With require_api_key: true when `key` is one of api_keys (`mapped`), else answers 401 and
  // returns false.
  bool RefuseUnknownKey(const std::string& key, bool mapped);
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

  std::shared_ptr<ServerSession> session_;
  ProxyServer* server_;
  bool policy_;
  std::string path_;  // RoutedPath
  std::string request_id_;  // x-request-id (policy paths)
  SidecarCore::TimePoint arrival_;
  SidecarCore::TimePoint started_{};
  State state_ = State::kNew;
  uint64_t id_ = 0;
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
  std::optional<SidecarCore::TimePoint> first_token_at_;  // set once the first token arrived
  SseFirstTokenDetector first_token_;
  int status_ = 0;
  bool shed_ = false;  // the upstream's answer carried Retry-After: load it shed on purpose
  http::response<http::string_body> buffered_;

  bool Success() const { return status_ >= 200 && status_ < 300; }
};

bool Exchange::RefuseUnknownKey(const std::string& key, bool mapped) {
  if (mapped) return true;
  // OpenAI's answer to a missing or unknown key (the key itself is never echoed).
  session_->SetAnswerHeader("www-authenticate", "Bearer");
  const std::string message = key.empty()
                                  ? "no API key: send it as Authorization: Bearer <key> or x-api-key"
                                  : "the API key is not one this service accepts";
  if (policy_) {
    ReplyError(401, message, std::nullopt, "invalid_api_key");
  } else {
    session_->ReplyJson(401, ErrorBody(401, message, {}, "invalid_api_key"));
  }
  return false;
}

void Exchange::Begin() {
  const auto& req = session_->request();
  HeaderLookup lookup = [&req](std::string_view name) -> std::optional<std::string_view> {
    auto it = req.find(name);
    if (it == req.end()) return std::nullopt;
    return it->value();
  };
  if (!policy_) {
    if (server_->draining_) {
      session_->ReplyError(503, "the sidecar is shutting down", 1);
      return;
    }
    // require_api_key covers every proxied path (/tokenize, /v1/models, ...), not only the
    // generation routes: "only the keys of api_keys are served".
    if (core().config().require_api_key) {
      const std::string key = ApiKeyFrom(lookup);
      if (!RefuseUnknownKey(key, core().config().api_keys.count(key) != 0)) return;
    }
    state_ = State::kUpstream;
    Attempt();
    return;
  }
  // Every answer carries the request's id, the client's own or one made here (as Envoy makes
  // one), and the upstream gets the same, so that the client can name its request upstream.
  id_ = server_->next_id_++;
  request_id_ = RequestIdOf(req, UpstreamRequestId());
  session_->SetAnswerHeader("x-request-id", request_id_);
  // Until the request is read and admitted, its answers count under the default class.
  info_.priority = core().config().ClassIndex(core().config().default_class);
  std::string param;
  StatusOr<RequestInfo> info = ParseRequestInfo(path_, req.body(), lookup, core().config(), &param);
  if (!info.ok()) {
    CountResponse(400);
    session_->ReplyJson(400, ErrorBody(400, info.status().message(), param));
    return;
  }
  if (core().config().require_api_key && !RefuseUnknownKey(info->api_key, info->key_mapped)) {
    return;
  }
  info_ = std::move(*info);
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
      res.body() = FreshResponseIdentity(std::move(v.cached.body), UpstreamRequestId(),
                                         std::chrono::duration_cast<std::chrono::seconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
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
      ex->RejectQueued("displaced",
                       "overloaded: pushed out of the queue by more important requests");
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
  // Rerouted to the fallback by OnStart (the breaker refused the primary): a degraded answer is
  // not the request's to store.
  if (!route_.degraded.empty()) cache_key_.reset();
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

std::string ProxyServer::NewRequestId() { return request_id_prefix_ + std::to_string(next_id_++); }

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
  http::request<http::string_body> out{in.method(), url.base_path + std::string(session_->target()),
                                       11};
  CopyEndToEnd(in, out);
  out.set(http::field::host, url.host + ":" + std::to_string(url.port));
  // X-Forwarded-For gains the client's address (all of the client's own lines kept, in order).
  std::string forwarded_for;
  auto [xff_begin, xff_end] = in.equal_range("x-forwarded-for");
  for (auto it = xff_begin; it != xff_end; ++it) {
    if (!forwarded_for.empty()) forwarded_for += ", ";
    forwarded_for.append(it->value());
  }
  if (!session_->peer_address().empty()) {
    if (!forwarded_for.empty()) forwarded_for += ", ";
    forwarded_for += session_->peer_address();
  }
  if (!forwarded_for.empty()) out.set("x-forwarded-for", forwarded_for);
  // With require_api_key the sidecar is the one that checks keys: they go no further (the
  // runtime needs none, and a fallback upstream elsewhere must not receive the clients' keys).
  if (server_->core_.config().require_api_key) {
    out.erase(http::field::authorization);
    out.erase("x-api-key");
  }
  if (in.count("x-forwarded-proto") == 0) out.set("x-forwarded-proto", "http");
  out.keep_alive(true);
  out.body() = (policy_ && (route_.rewrite() || info_.body_priority))
                   ? RewriteBody(info_, route_.model, route_.max_tokens)
                   : in.body();
  // The runtime orders its own queue by this header: the class the sidecar decided (its index,
  // which is the runtime's scale: critical 0, standard 1, batch 2 with the default classes).
  if (policy_) {
    out.set("x-kinfer-priority", std::to_string(info_.priority));
    out.set("x-kinfer-tenant", RuntimeTenant(info_));
    out.set("x-kinfer-request-id", UpstreamRequestId());
    out.set("x-request-id", request_id_);
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
  session_->WatchClient();
}

void Exchange::OnHeader(const UpstreamCall::Header& header, bool chunked) {
  status_ = header.result_int();
  // Read here: a whole response's header goes to the client with its body (moved away).
  shed_ = header.count(http::field::retry_after) != 0;
  if (status_ == 503 && policy_ && MaybeRetry()) {
    if (!shed_) metrics().CountUpstreamError("status_5xx");  // a shed 503 is no failed attempt
    retrying_ = true;
    call_->Cancel();
    return;
  }
  std::string_view content_type = header[http::field::content_type];
  sse_ = content_type.find("text/event-stream") != std::string_view::npos;
  streaming_ = chunked || sse_;
  // The status as a number with its reason phrase: one Beast has no name for (418, 520) was
  // relayed as "000 <unknown-status>" (RFC 9110 15: a proxy forwards what it does not know).
  if (!streaming_) {
    buffered_ = http::response<http::string_body>{};
    buffered_.version(11);
    buffered_.result(header.result_int());
    buffered_.reason(header.reason());
    CopyEndToEnd(header, buffered_);
    return;
  }
  http::response<http::empty_body> res;
  res.version(11);
  res.result(header.result_int());
  res.reason(header.reason());
  CopyEndToEnd(header, res);
  if (!route_.degraded.empty()) res.set("x-kinfer-degraded", route_.degraded);
  response_started_ = true;
  session_->StartStream(std::move(res), [self = shared_from_this()](bool ok) {
    if (!ok) self->OnClientGone();
  });
}

void Exchange::OnData(std::string_view data, std::function<void()> next) {
  // TTFT: the first token of a 2xx SSE stream; the first byte of another 2xx chunked body. An
  // error is no first token (it would pull the percentiles the autoscaler reads down).
  if (!first_token_at_ && streaming_ && Success() &&
      (!sse_ || (first_token_.Feed(data) && first_token_.token()))) {
    auto now = server_->Now();
    first_token_at_ = now;
    double ttft = Seconds(now - arrival_);
    if (policy_) {
      metrics().ObserveTtft(info_.priority, ttft);
      core().RecordTtft(ttft, route_, now);
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
    // A stream the client left keeps the status it started with (as the runtime counts it).
    if (response_started_) CountResponse(status_);
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
    } else if (!sse_) {
      // A chunked body that is not an event stream has no way to say it failed: the connection
      // closes without the last chunk, and the client sees it incomplete (Envoy resets it).
      session_->AbortStream();
      CountResponse(status_);
    } else {
      // Mid-stream: tell the client in the stream's own format, then end it cleanly.
      std::string event = "data: " +
                          ErrorBody(502,
                                    std::string("the upstream failed mid-stream: ") +
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
    if (policy_ && Success()) {
      double ttft = Seconds(now - arrival_);
      metrics().ObserveTtft(info_.priority, ttft);
      core().RecordTtft(ttft, route_, now);
    }
    if (!route_.degraded.empty()) buffered_.set("x-kinfer-degraded", route_.degraded);
    if (cache_key_) {
      buffered_.set("x-kinfer-cache", "miss");
    }
    if (cache_key_ && StorableUpstreamAnswer(buffered_)) {
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
      status_, session_->request().count("x-kinfer-timeout") != 0, shed_);
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
    std::optional<SidecarCore::Duration> ttft;
    if (streaming_ && first_token_at_) ttft = *first_token_at_ - started_;
    server_->Run(core().OnFinished(id_, route_, result, now - started_, now, ttft));
  }
}

// ---- ProxyServer: routing -------------------------------------------------------------------

void ProxyServer::OnRequest(const std::shared_ptr<ServerSession>& session) {
  const auto& req = session->request();
  // Routed as the runtime routes it, so that no way of writing a policy path passes the policies.
  const std::optional<std::string> routed = RoutedPath(session->path());
  if (!routed) {
    session->ReplyError(400, "malformed request target: a '%' not followed by two hex digits");
    return;
  }
  const std::string& path = *routed;
  const bool get = req.method() == http::verb::get;
  if (get && path == "/health") {
    session->ReplyJson(200, R"({"status":"ok"})");
  } else if (get && path == "/ready") {
    ReplyReady(session);
  } else if (get && path == "/metrics") {
    core_.UpdateGauges(Now());
    metrics_.SetConnections(acceptor_.open_connections(), acceptor_.rejected_connections());
    http::response<http::string_body> res{http::status::ok, 11};
    res.set(http::field::content_type, metrics::kTextContentType);
    res.body() = metrics_.ExposeText();
    session->Reply(std::move(res));
  } else if (get && path == "/stats") {
    session->ReplyJson(200, core_.StatsJson(Now()));
  } else if (path == "/health" || path == "/ready" || path == "/metrics" || path == "/stats") {
    session->ReplyMethodNotAllowed("GET, HEAD", path);  // a HEAD reads as GET
  } else if (IsPolicyPath(path) || IsPassThroughPath(path)) {
    bool policy = IsPolicyPath(path);
    if (policy && req.method() != http::verb::post) {
      OnRefused(*session, 405, true);  // counted, and answered with an x-request-id, as a 413 is
      session->ReplyMethodNotAllowed("POST", path);
      return;
    }
    auto exchange = std::make_shared<Exchange>(session, this, policy, path);
    // The session holds the exchange while it answers; a client that leaves cancels it.
    session->Hold(exchange, [ex = exchange.get()] { ex->OnClientGone(); });
    exchange->Begin();
  } else {
    session->ReplyError(
        404, "no route for " + std::string(req.method_string()) + " " + std::string(path));
  }
}

// An answer the session gave itself (a 413 from Content-Length, a malformed body, ...) on a policy
// path is a policy path's answer too: counted under the default class, as the body that could name
// another class (or the header's class, unchecked) was not read.
void ProxyServer::OnRefused(ServerSession& session, int status, bool header_read) {
  if (!header_read) return;  // no path to judge by
  const std::optional<std::string> path = RoutedPath(session.path());
  if (!path || !IsPolicyPath(*path)) return;
  const SidecarConfig& config = core_.config();
  metrics_.CountResponse(config.ClassIndex(config.default_class), status);
  session.SetAnswerHeader("x-request-id", RequestIdOf(session.request(), NewRequestId()));
}

void ProxyServer::ReplyReady(const std::shared_ptr<ServerSession>& session) {
  auto now = Now();
  if (draining_) {
    session->ReplyJson(503, R"({"status":"draining"})");
    return;
  }
  if (!core_.Ready(now)) {
    session->ReplyJson(503, R"({"status":"breaker_open"})");
    return;
  }
  const UpstreamUrl& url = core_.config().upstream;
  http::request<http::string_body> probe{http::verb::get, url.base_path + "/ready", 11};
  probe.set(http::field::host, url.host + ":" + std::to_string(url.port));
  probe.keep_alive(true);
  auto status = std::make_shared<int>(0);
  UpstreamCall::Handlers h;
  h.on_header = [status](const UpstreamCall::Header& header, bool) {
    *status = header.result_int();
  };
  h.on_data = [](std::string_view, std::function<void()> next) { next(); };
  h.on_done = [session, status](UpstreamError error) {
    if (error == UpstreamError::kNone && *status == 200) {
      session->ReplyJson(200, R"({"status":"ready"})");
    } else {
      session->ReplyJson(503, R"({"status":"upstream_not_ready"})");
    }
  };
  UpstreamCall::Start(&primary_, std::move(probe), core_.config().connect_timeout,
                      kReadyProbeTimeout, std::move(h));
}

// ---- ProxyServer ---------------------------------------------------------------------------

ProxyServer::ProxyServer(net::io_context& ioc, const SidecarConfig& config, std::string config_path)
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
      acceptor_(ioc, this),
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
  return acceptor_.Listen(listen.host, listen.port);
}

SessionLimits ProxyServer::Limits() const {
  const SidecarConfig& c = core_.config();
  SessionLimits l;
  l.max_body_bytes = c.max_body_bytes;
  l.idle_timeout = c.client_idle_timeout;
  l.write_timeout = c.client_write_timeout;
  l.max_connections = static_cast<size_t>(c.max_connections);
  return l;
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
  acceptor_.Close();
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
