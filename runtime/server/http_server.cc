#include "runtime/server/http_server.h"

#include <cpprest/http_listener.h>
#include <cpprest/producerconsumerstream.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/http_errors.h"
#include "runtime/server/http_types.h"
#include "runtime/server/openai_protocol.h"
#include "runtime/server/router.h"

namespace kinfer {
namespace {

namespace http = web::http;
using Clock = std::chrono::steady_clock;

// Writes SSE bytes into the response body stream. Closed() once the reply task has failed
// (the client went away) or a write failed.
class CpprestSink final : public ChunkSink {
 public:
  CpprestSink(concurrency::streams::producer_consumer_buffer<uint8_t> buf,
              std::shared_ptr<std::atomic<bool>> failed)
      : buf_(std::move(buf)), failed_(std::move(failed)) {}

  bool Write(std::string_view data) override {
    if (failed_->load()) return false;
    try {
      buf_.putn_nocopy(reinterpret_cast<const uint8_t*>(data.data()), data.size()).wait();
      buf_.sync().wait();
    } catch (...) {
      failed_->store(true);
    }
    return !failed_->load();
  }
  bool Closed() const override { return failed_->load(); }

 private:
  concurrency::streams::producer_consumer_buffer<uint8_t> buf_;
  std::shared_ptr<std::atomic<bool>> failed_;
};

http::http_response ToCpprest(const HttpResponse& r) {
  http::http_response out(static_cast<http::status_code>(r.status));
  for (const auto& [k, v] : r.headers) out.headers().add(k, v);
  return out;
}

// A sink for a stream whose reply could not even start: every write fails.
class DeadSink final : public ChunkSink {
 public:
  bool Write(std::string_view) override { return false; }
  bool Closed() const override { return true; }
};

}  // namespace

struct HttpServer::Impl {
  HttpServerOptions options;
  Router* router;
  std::unique_ptr<http::experimental::listener::http_listener> listener;

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;     // guarded by mu
  bool stopped = false;  // guarded by mu

  void OnRequest(http::http_request req);
  void Serve(http::http_request req);
  void Reply(http::http_request& req, HttpResponse& resp);
  void Done() {
    std::lock_guard<std::mutex> lock(mu);
    --in_flight;
    cv.notify_all();
  }
};

HttpServer::HttpServer(HttpServerOptions options, Router* router)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->router = router;
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start() {
  const std::string url =
      "http://" + impl_->options.host + ":" + std::to_string(impl_->options.port);
  try {
    impl_->listener = std::make_unique<http::experimental::listener::http_listener>(url);
    Impl* impl = impl_.get();
    auto handler = [impl](http::http_request req) { impl->OnRequest(std::move(req)); };
    impl_->listener->support(handler);
    // cpprestsdk answers TRACE (echoing the request's headers, Authorization included) and
    // OPTIONS itself unless a handler is registered for the method: route both to the Router,
    // which answers 405 with a JSON body as for any other method a route does not take.
    impl_->listener->support(http::methods::TRCE, handler);
    impl_->listener->support(http::methods::OPTIONS, handler);
    impl_->listener->open().wait();
  } catch (const std::exception& e) {
    impl_->listener.reset();
    return Unavailable("cannot listen on " + url + ": " + e.what());
  }
  return Status::Ok();
}

void HttpServer::Stop(int grace_seconds) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;  // new connections' requests get 503 from here on
  }
  if (!impl_->listener) return;
  // Let running generations end cleanly first (they cancel at their next poll and close their
  // streams with an error event and [DONE]); closing the listener would cut their connections.
  impl_->router->BeginShutdown();
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    if (!impl_->cv.wait_for(lock, std::chrono::seconds(grace_seconds),
                            [&] { return impl_->in_flight == 0; })) {
      spdlog::warn("{} requests still in flight after {} s", impl_->in_flight, grace_seconds);
    }
  }
  try {
    impl_->listener->close().wait();
  } catch (const std::exception& e) {
    spdlog::warn("closing the listener: {}", e.what());
  }
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->cv.wait_for(lock, std::chrono::seconds(1), [&] { return impl_->in_flight == 0; });
}

void HttpServer::Impl::OnRequest(http::http_request req) {
  bool admitted = false;
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = stopped;
    if (!stopped && in_flight < options.max_in_flight) {
      ++in_flight;
      admitted = true;
    }
  }
  if (!admitted) {
    HttpResponse r = ErrorResponse(
        Unavailable(stopping ? "the server is shutting down" : "too many requests in flight"),
        ErrorDetail{});
    Reply(req, r);
    return;
  }
  try {
    std::thread([this, req]() mutable {
      Serve(std::move(req));
      Done();
    }).detach();
  } catch (const std::exception& e) {  // thread creation failed
    Done();
    HttpResponse r = ErrorResponse(Unavailable(std::string("cannot start a thread: ") + e.what()),
                                   ErrorDetail{});
    Reply(req, r);
  }
}

void HttpServer::Impl::Serve(http::http_request req) {
  HttpRequest in;
  HttpResponse resp;
  try {
    in.method = req.method();
    in.path = web::uri::decode(req.relative_uri().path());
    if (auto h = req.headers().find("x-kinfer-priority"); h != req.headers().end()) {
      in.priority_header = h->second;
    }
    if (auto h = req.headers().find("x-kinfer-request-id"); h != req.headers().end()) {
      in.request_id = h->second.substr(0, 256);
    }
    if (auto h = req.headers().find("x-kinfer-tenant"); h != req.headers().end()) {
      in.tenant_header = h->second;
    }
    if (auto h = req.headers().find("x-kinfer-timeout"); h != req.headers().end()) {
      in.timeout_header = h->second;
    }
    const size_t limit = options.max_body_bytes;
    const uint64_t declared = req.headers().content_length();
    std::vector<unsigned char> body;
    if (declared > limit) {
      // Drain a moderately oversized body so that the client can read the 413; drop the
      // connection's body otherwise.
      if (declared <= 16 * static_cast<uint64_t>(limit)) body = req.extract_vector().get();
      resp = ErrorResponse(413, "request body of " + std::to_string(declared) +
                                    " bytes exceeds the limit of " + std::to_string(limit) +
                                    " bytes (--max-body-bytes)");
    } else {
      body = req.extract_vector().get();
      if (body.size() > limit) {
        resp = ErrorResponse(413, "request body of " + std::to_string(body.size()) +
                                      " bytes exceeds the limit of " + std::to_string(limit) +
                                      " bytes (--max-body-bytes)");
      } else {
        in.body.assign(body.begin(), body.end());
        resp = router->Handle(in);
      }
    }
  } catch (const std::exception& e) {
    resp = ErrorResponse(400, std::string("cannot read the request: ") + e.what());
  }
  router->metrics().CountHttp(resp.route, resp.status);
  Reply(req, resp);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - in.received).count();
  if (resp.route == "health" || resp.route == "ready" || resp.route == "metrics") {
    spdlog::debug("{} {} -> {} ({:.1f} ms)", in.method, in.path, resp.status, ms);
  } else {
    spdlog::info("{} {} -> {} ({:.1f} ms)", in.method, in.path, resp.status, ms);
  }
}

void HttpServer::Impl::Reply(http::http_request& req, HttpResponse& resp) {
  http::http_response out = ToCpprest(resp);
  if (!resp.stream) {
    out.set_body(resp.body, resp.content_type);
    try {
      req.reply(out).wait();
    } catch (const std::exception& e) {
      spdlog::debug("reply failed (client gone?): {}", e.what());
    }
    return;
  }
  // Streaming: the body is read by cpprestsdk from `buf` as we write into it.
  concurrency::streams::producer_consumer_buffer<uint8_t> buf;
  auto failed = std::make_shared<std::atomic<bool>>(false);
  pplx::task<void> replied;
  try {
    out.set_body(concurrency::streams::istream(buf), resp.content_type);
    replied = req.reply(out);
    replied.then([failed](pplx::task<void> t) {
      try {
        t.get();
      } catch (...) {
        failed->store(true);  // the client went away mid-stream
      }
    });
  } catch (const std::exception& e) {
    spdlog::warn("cannot start a streamed reply: {}", e.what());
    DeadSink dead;
    resp.stream(dead);  // lets the generation see a closed client and cancel
    return;
  }
  CpprestSink sink(buf, failed);
  resp.stream(sink);
  try {
    buf.close(std::ios_base::out).wait();
    replied.wait();
  } catch (const std::exception& e) {
    spdlog::debug("streamed reply ended with: {}", e.what());
  }
}

}  // namespace kinfer
