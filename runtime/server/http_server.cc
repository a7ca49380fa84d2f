#include "runtime/server/http_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "common/http/server_session.h"
#include "common/http_errors.h"
#include "common/request_path.h"
#include "runtime/server/http_types.h"
#include "runtime/server/openai_protocol.h"
#include "runtime/server/router.h"

namespace kinfer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kIoWaitTick = std::chrono::milliseconds(100);

std::string HeaderOf(const ServerSession::Request& req, std::string_view name) {
  auto it = req.find(name);
  return it == req.end() ? std::string() : std::string(it->value());
}

template <class Body>
void SetHeaders(http::response<Body>& out, const HttpResponse& r) {
  out.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) out.set(k, v);
}

http::response<http::string_body> ToBeast(HttpResponse& r) {
  http::response<http::string_body> out{static_cast<http::status>(r.status), 11};
  SetHeaders(out, r);
  out.body() = std::move(r.body);
  return out;
}

}  // namespace

struct HttpServer::Impl final : SessionHandler, std::enable_shared_from_this<HttpServer::Impl> {
  HttpServerOptions options;
  Router* router = nullptr;
  net::io_context ioc{1};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::optional<SessionAcceptor> acceptor;
  std::thread io_thread;
  std::atomic<bool> stopping{false};    // new requests get 503
  std::atomic<bool> io_stopped{false};  // the io thread has ended: nothing posted runs

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;  // guarded by mu

  // SessionHandler (io thread)
  SessionLimits Limits() const override {
    SessionLimits l;
    l.max_body_bytes = options.max_body_bytes;
    l.idle_timeout = options.idle_timeout;
    l.write_timeout = options.write_timeout;
    l.max_connections = options.max_connections;
    return l;
  }
  bool KeepAlive() const override { return !stopping.load(); }
  void OnRequest(const std::shared_ptr<ServerSession>& session) override;
  void OnRefused(ServerSession& session, int status, bool header_read) override {
    std::optional<std::string> path;
    if (header_read) path = RoutedPath(session.path());
    router->CountRefused(path ? std::optional<std::string_view>(*path) : std::nullopt, status);
  }

  // On the request's own thread.
  void Serve(const std::shared_ptr<ServerSession>& session, HttpRequest in,
             const std::shared_ptr<std::atomic<bool>>& gone);
  void Done() {
    std::lock_guard<std::mutex> lock(mu);
    --in_flight;
    cv.notify_all();
  }

  class Writer;
};

// Writes a response through the session from the request's thread. Writes are posted to the io
// thread in order. A stream goes on generating while its chunks are sent; it waits only when
// more than kMaxUnsentBytes are not yet written (a slow client). Reply and End wait until the
// response is written (or the client is gone, or the io thread stopped), so that a request counts
// as in flight until then.
class HttpServer::Impl::Writer final : public ChunkSink {
 public:
  Writer(HttpServer::Impl* impl, std::shared_ptr<ServerSession> session,
         std::shared_ptr<std::atomic<bool>> gone)
      : impl_(impl),
        session_(std::move(session)),
        gone_(std::move(gone)),
        state_(std::make_shared<State>()) {}

  void Begin(http::response<http::empty_body> header) {
    auto h = std::make_shared<http::response<http::empty_body>>(std::move(header));
    Post(0, [h](ServerSession& s, std::function<void(bool)> done) {
      s.StartStream(std::move(*h), std::move(done));
    });
  }
  bool Write(std::string_view data) override {
    if (Closed()) return false;
    {
      std::unique_lock<std::mutex> lock(state_->mu);
      while (state_->unsent > kMaxUnsentBytes && !state_->failed && !Stopped()) {
        state_->cv.wait_for(lock, kIoWaitTick);
      }
    }
    if (Closed()) return false;
    Post(data.size(), [d = std::string(data)](ServerSession& s, std::function<void(bool)> done) {
      s.WriteChunk(d, std::move(done));
    });
    return true;
  }
  bool Closed() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->failed || gone_->load() || Stopped();
  }
  // A whole response.
  void Reply(http::response<http::string_body> res) {
    if (Closed()) return;
    auto r = std::make_shared<http::response<http::string_body>>(std::move(res));
    Post(0, [r](ServerSession& s, std::function<void(bool)> done) {
      s.Reply(std::move(*r), std::move(done));
    });
    WaitWritten();
  }
  // Cuts a stream short: what was posted is written, then the connection closes without the last
  // chunk (the client sees the body incomplete); End() does nothing after it.
  void Abort() {
    if (Closed()) return;
    Post(0, [](ServerSession& s, std::function<void(bool)> done) {
      s.AbortStream();
      done(false);
    });
    WaitWritten();
  }
  // Ends a streamed body.
  void End() {
    if (Closed()) return;
    Post(0, [](ServerSession& s, std::function<void(bool)> done) { s.EndStream(std::move(done)); });
    WaitWritten();
  }

 private:
  static constexpr size_t kMaxUnsentBytes = 64 * 1024;

  struct State {
    std::mutex mu;
    std::condition_variable cv;
    size_t unsent = 0;  // bytes posted, not yet written
    int writes = 0;     // writes posted, not yet finished
    bool failed = false;
  };

  bool Stopped() const { return impl_->io_stopped.load(); }

  void WaitWritten() {
    std::unique_lock<std::mutex> lock(state_->mu);
    while (state_->writes > 0 && !state_->failed && !Stopped()) {
      state_->cv.wait_for(lock, kIoWaitTick);
    }
  }

  void Post(size_t bytes, std::function<void(ServerSession&, std::function<void(bool)>)> write) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->unsent += bytes;
      ++state_->writes;
    }
    net::post(impl_->ioc, [s = session_, st = state_, bytes, write = std::move(write)] {
      write(*s, [st, bytes](bool ok) {
        std::lock_guard<std::mutex> lock(st->mu);
        st->unsent -= bytes;
        --st->writes;
        if (!ok) st->failed = true;
        st->cv.notify_all();
      });
    });
  }

  HttpServer::Impl* impl_;
  std::shared_ptr<ServerSession> session_;
  std::shared_ptr<std::atomic<bool>> gone_;
  std::shared_ptr<State> state_;  // shared with the posted writes
};

HttpServer::HttpServer(HttpServerOptions options, Router* router)
    : impl_(std::make_shared<Impl>()) {
  impl_->options = std::move(options);
  impl_->router = router;
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  Impl* impl = impl_.get();
  if (impl->options.port < 0 || impl->options.port > 65535) {
    return InvalidArgument("port out of range: " + std::to_string(impl->options.port));
  }
  impl->acceptor.emplace(impl->ioc, impl);
  impl->router->SetConnectionCounts(impl->acceptor->CountsReader());
  Status st = impl->acceptor->Listen(impl->options.host, static_cast<uint16_t>(impl->options.port));
  if (!st.ok()) {
    impl->acceptor.reset();
    return st;
  }
  impl->work.emplace(net::make_work_guard(impl->ioc));
  impl->io_thread = std::thread([impl] {
    try {
      impl->ioc.run();
    } catch (const std::exception& e) {
      spdlog::error("HTTP io thread ended: {}", e.what());
    }
    impl->io_stopped.store(true);
  });
  return Status::Ok();
}

void HttpServer::Stop(int grace_seconds) {
  Impl* impl = impl_.get();
  if (impl->stopping.exchange(true)) return;  // new requests get 503 from here on
  if (!impl->io_thread.joinable()) return;
  // Let running generations end cleanly first (they cancel at their next poll and close their
  // streams with an error event and [DONE]); stopping the io thread would cut their connections.
  impl->router->BeginShutdown();
  {
    std::unique_lock<std::mutex> lock(impl->mu);
    if (!impl->cv.wait_for(lock, std::chrono::seconds(grace_seconds),
                           [&] { return impl->in_flight == 0; })) {
      spdlog::warn("{} requests still in flight after {} s", impl->in_flight, grace_seconds);
    }
  }
  // Every request's response is written by now (a request is in flight until it is): close the
  // listener and stop the io thread, which drops the idle connections.
  auto closed = std::make_shared<std::promise<void>>();
  std::future<void> acceptor_closed = closed->get_future();
  net::post(impl->ioc, [impl, closed] {
    impl->acceptor->Close();
    closed->set_value();
  });
  acceptor_closed.wait_for(std::chrono::seconds(1));
  impl->work.reset();
  impl->ioc.stop();
  impl->io_thread.join();
  impl->io_stopped.store(true);
  // The request threads end once their generation has (cancelled at the engine's next step, which
  // a long CPU prefill chunk can hold for seconds): the caller then destroys the router, model
  // and engine they use, so they are waited for, not one second only as before.
  std::unique_lock<std::mutex> lock(impl->mu);
  if (!impl->cv.wait_for(lock, std::chrono::seconds(30), [&] { return impl->in_flight == 0; })) {
    spdlog::warn("{} request threads still running 30 s after the stop", impl->in_flight);
  }
}

void HttpServer::Impl::OnRequest(const std::shared_ptr<ServerSession>& session) {
  const ServerSession::Request& req = session->request();
  // A caller's x-request-id comes back on every answer (as Envoy and vLLM's
  // --enable-request-id-headers do), so that a client or the sidecar can match answers to logs.
  HttpRequest in;
  in.trace_id = std::string(req["x-request-id"].substr(0, 256));
  if (!in.trace_id.empty()) session->SetAnswerHeader("x-request-id", in.trace_id);
  in.method = std::string(req.method_string());
  std::optional<std::string> path = RoutedPath(session->path());
  if (!path) {
    session->ReplyError(400, "malformed request target: a '%' not followed by two hex digits");
    return;
  }
  in.path = std::move(*path);
  in.priority_header = HeaderOf(req, "x-kinfer-priority");
  in.request_id = HeaderOf(req, "x-kinfer-request-id").substr(0, 256);
  in.tenant_header = HeaderOf(req, "x-kinfer-tenant");
  in.timeout_header = HeaderOf(req, "x-kinfer-timeout");
  in.body = req.body();

  // The probes and /metrics are not held to the cap: under a full load of slow streams the
  // kubelet's liveness probe and the scrape must still be answered (a 503 there restarted a busy
  // pod and hid its metrics when they mattered most).
  const bool probe = in.path == "/health" || in.path == "/ready" || in.path == "/metrics";
  bool admitted = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!stopping.load() && (probe || in_flight < options.max_in_flight)) {
      ++in_flight;
      admitted = true;
    }
  }
  if (!admitted) {
    HttpResponse r = ErrorResponse(Unavailable(stopping.load() ? "the server is shutting down"
                                                               : "too many requests in flight"),
                                   ErrorDetail{});
    router->CountRefused(in.path, r.status);
    session->Reply(ToBeast(r));
    return;
  }
  auto gone = std::make_shared<std::atomic<bool>>(false);
  session->Hold(gone, [gone] { gone->store(true); });
  in.client_gone = [gone] { return gone->load(); };
  session->WatchClient();
  try {
    std::thread([self = shared_from_this(), s = session, in = std::move(in), gone]() mutable {
      self->Serve(s, std::move(in), gone);
      s.reset();  // before the last reference to Impl (and its io_context) can go
      self->Done();
    }).detach();
  } catch (const std::exception& e) {  // thread creation failed
    Done();
    session->ReplyError(503, std::string("cannot start a thread: ") + e.what(), kRetryAfterSeconds);
  }
}

namespace {

// A client's text as one log line: control characters (a decoded %0a in the path made a line of
// its own, a forged log entry) are written \xNN.
std::string LogSafe(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

void HttpServer::Impl::Serve(const std::shared_ptr<ServerSession>& session, HttpRequest in,
                             const std::shared_ptr<std::atomic<bool>>& gone) {
  HttpResponse resp;
  try {
    resp = router->Handle(in);
  } catch (const std::exception& e) {
    resp = ErrorResponse(Internal(std::string("unexpected error: ") + e.what()), ErrorDetail{});
  }
  router->metrics().CountHttp(resp.route, resp.status);
  Writer writer(this, session, gone);
  if (!resp.stream) {
    writer.Reply(ToBeast(resp));
  } else {
    http::response<http::empty_body> header{static_cast<http::status>(resp.status), 11};
    SetHeaders(header, resp);
    writer.Begin(std::move(header));  // when it fails the writer is closed: the generation cancels
    try {
      resp.stream(writer);
    } catch (const std::exception& e) {
      // On a detached thread an escaping exception would end the process: the stream is cut
      // (its client sees no end) and the server goes on.
      spdlog::error("{} {}: the response stream failed: {}", in.method, LogSafe(in.path), e.what());
      writer.Abort();
    }
    writer.End();
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - in.received).count();
  const std::string id = in.trace_id.empty() ? "" : " x-request-id=" + LogSafe(in.trace_id);
  const std::string path = LogSafe(in.path);
  if (resp.route == "health" || resp.route == "ready" || resp.route == "metrics") {
    spdlog::debug("{} {} -> {} ({:.1f} ms){}", in.method, path, resp.status, ms, id);
  } else {
    spdlog::info("{} {} -> {} ({:.1f} ms){}", in.method, path, resp.status, ms, id);
  }
}

}  // namespace kinfer
