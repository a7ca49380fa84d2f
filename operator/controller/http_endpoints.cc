#include "operator/controller/http_endpoints.h"

#include <spdlog/spdlog.h>

#include <optional>
#include <thread>

#include "common/http/server_session.h"
#include "common/metrics/metrics.h"
#include "common/request_path.h"

namespace kinfer::controller {

StatusOr<ListenAddress> ParseListenAddress(const std::string& address) {
  if (address.empty() || address == "0") return ListenAddress{};
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("bind address '" + address + "': want HOST:PORT, :PORT or 0");
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stol(port) < 1 || std::stol(port) > 65535) {
    return InvalidArgument("bind address '" + address + "': port must be 1-65535");
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "::";  // both families (SessionAcceptor::Listen)
  if (host == "localhost") host = "127.0.0.1";
  return ListenAddress{host, static_cast<uint16_t>(std::stol(port))};
}

namespace {

http::response<http::string_body> Text(http::status status, std::string body) {
  http::response<http::string_body> res{status, 11};
  res.set(http::field::content_type, "text/plain");
  res.body() = std::move(body);
  return res;
}

// One listening address: /metrics, the probes, or both.
class EndpointHandler : public SessionHandler {
 public:
  EndpointHandler(const HttpEndpointsOptions* options, bool metrics, bool probes)
      : options_(options), metrics_(metrics), probes_(probes) {}

  SessionLimits Limits() const override {
    SessionLimits l;
    l.max_body_bytes = 64 * 1024;  // GETs: nothing to read
    return l;
  }

  void OnRequest(const std::shared_ptr<ServerSession>& session) override {
    const std::optional<std::string> path = RoutedPath(session->path());
    if (!path) {
      session->Reply(Text(http::status::bad_request, "malformed request target\n"));
      return;
    }
    const http::verb method = session->request().method();
    if (method != http::verb::get && method != http::verb::head) {
      session->ReplyMethodNotAllowed("GET, HEAD", *path);
      return;
    }
    if (metrics_ && *path == "/metrics") {
      http::response<http::string_body> res{http::status::ok, 11};
      res.set(http::field::content_type, metrics::kTextContentType);
      res.body() = options_->metrics_text ? options_->metrics_text() : "";
      session->Reply(std::move(res));
    } else if (probes_ && (*path == "/healthz" || *path == "/livez")) {
      const bool ok = !options_->healthy || options_->healthy();
      session->Reply(ok ? Text(http::status::ok, "ok\n") : Text(http::status::internal_server_error, "unhealthy\n"));
    } else if (probes_ && *path == "/readyz") {
      const bool ok = !options_->ready || options_->ready();
      session->Reply(ok ? Text(http::status::ok, "ok\n")
                        : Text(http::status::internal_server_error, "informer caches not synced\n"));
    } else {
      session->Reply(Text(http::status::not_found, "not found\n"));
    }
  }

 private:
  const HttpEndpointsOptions* options_;
  const bool metrics_, probes_;
};

}  // namespace

struct HttpEndpoints::Impl {
  HttpEndpointsOptions options;
  // Declared before the io_context: a session the io_context still holds when it is destroyed
  // points at its handler.
  std::vector<std::unique_ptr<EndpointHandler>> handlers;
  net::io_context ioc{1};
  std::vector<std::unique_ptr<SessionAcceptor>> acceptors;
  std::thread io_thread;
};

HttpEndpoints::HttpEndpoints(HttpEndpointsOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

HttpEndpoints::~HttpEndpoints() { Stop(); }

Status HttpEndpoints::Start() {
  StatusOr<ListenAddress> metrics_at = ParseListenAddress(impl_->options.metrics_address);
  if (!metrics_at.ok()) return metrics_at.status();
  StatusOr<ListenAddress> probes_at = ParseListenAddress(impl_->options.probe_address);
  if (!probes_at.ok()) return probes_at.status();
  struct Want {
    ListenAddress at;
    bool metrics, probes;
  };
  std::vector<Want> wants;
  if (!metrics_at->off() && *metrics_at == *probes_at) {
    wants.push_back({*metrics_at, true, true});
  } else {
    if (!metrics_at->off()) wants.push_back({*metrics_at, true, false});
    if (!probes_at->off()) wants.push_back({*probes_at, false, true});
  }
  for (const Want& w : wants) {
    impl_->handlers.push_back(std::make_unique<EndpointHandler>(&impl_->options, w.metrics, w.probes));
    auto acceptor = std::make_unique<SessionAcceptor>(impl_->ioc, impl_->handlers.back().get());
    if (Status st = acceptor->Listen(w.at.host, w.at.port); !st.ok()) {
      Stop();
      return st;
    }
    impl_->acceptors.push_back(std::move(acceptor));
  }
  if (!impl_->acceptors.empty()) impl_->io_thread = std::thread([impl = impl_.get()] { impl->ioc.run(); });
  return Status::Ok();
}

void HttpEndpoints::Stop() {
  if (impl_->io_thread.joinable()) {
    net::post(impl_->ioc, [impl = impl_.get()] {
      for (auto& a : impl->acceptors) a->Close();
    });
    impl_->ioc.stop();
    impl_->io_thread.join();
  } else {
    for (auto& a : impl_->acceptors) a->Close();
  }
}

}  // namespace kinfer::controller
