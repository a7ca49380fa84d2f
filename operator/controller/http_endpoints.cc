#include "operator/controller/http_endpoints.h"

#include <cpprest/http_listener.h>

#include "common/metrics/metrics.h"

namespace kinfer::controller {

namespace http = web::http;
using web::http::experimental::listener::http_listener;

StatusOr<std::string> ListenUrl(const std::string& address) {
  if (address.empty() || address == "0") return std::string();
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("bind address '" + address + "': want HOST:PORT, :PORT or 0");
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stol(port) < 1 || std::stol(port) > 65535) {
    return InvalidArgument("bind address '" + address + "': port must be 1-65535");
  }
  if (host.empty()) host = "0.0.0.0";
  return "http://" + host + ":" + port;
}

struct HttpEndpoints::Impl {
  HttpEndpointsOptions options;
  std::vector<std::unique_ptr<http_listener>> listeners;

  void Handle(http::http_request req, bool metrics, bool probes) const {
    const std::string path = req.relative_uri().path();
    if (req.method() != http::methods::GET && req.method() != http::methods::HEAD) {
      req.reply(http::status_codes::MethodNotAllowed, "GET only\n", "text/plain");
      return;
    }
    if (metrics && path == "/metrics") {
      req.reply(http::status_codes::OK, options.metrics_text ? options.metrics_text() : "",
                kinfer::metrics::kTextContentType);
      return;
    }
    if (probes && (path == "/healthz" || path == "/livez")) {
      const bool ok = !options.healthy || options.healthy();
      req.reply(ok ? http::status_codes::OK : http::status_codes::InternalError,
                ok ? "ok\n" : "unhealthy\n", "text/plain");
      return;
    }
    if (probes && path == "/readyz") {
      const bool ok = !options.ready || options.ready();
      req.reply(ok ? http::status_codes::OK : http::status_codes::InternalError,
                ok ? "ok\n" : "informer caches not synced\n", "text/plain");
      return;
    }
    req.reply(http::status_codes::NotFound, "not found\n", "text/plain");
  }
};

HttpEndpoints::HttpEndpoints(HttpEndpointsOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
}

HttpEndpoints::~HttpEndpoints() { Stop(); }

Status HttpEndpoints::Start() {
  StatusOr<std::string> metrics_url = ListenUrl(impl_->options.metrics_address);
  if (!metrics_url.ok()) return metrics_url.status();
  StatusOr<std::string> probe_url = ListenUrl(impl_->options.probe_address);
  if (!probe_url.ok()) return probe_url.status();
  struct Want {
    std::string url;
    bool metrics, probes;
  };
  std::vector<Want> wants;
  if (!metrics_url->empty() && *metrics_url == *probe_url) {
    wants.push_back({*metrics_url, true, true});
  } else {
    if (!metrics_url->empty()) wants.push_back({*metrics_url, true, false});
    if (!probe_url->empty()) wants.push_back({*probe_url, false, true});
  }
  for (const Want& w : wants) {
    auto l = std::make_unique<http_listener>(w.url);
    const Impl* impl = impl_.get();
    const bool m = w.metrics, p = w.probes;
    l->support([impl, m, p](http::http_request req) { impl->Handle(std::move(req), m, p); });
    try {
      l->open().wait();
    } catch (const std::exception& e) {
      Stop();
      return Unavailable("cannot listen on " + w.url + ": " + e.what());
    }
    impl_->listeners.push_back(std::move(l));
  }
  return Status::Ok();
}

void HttpEndpoints::Stop() {
  for (auto& l : impl_->listeners) {
    try {
      l->close().wait();
    } catch (const std::exception&) {
    }
  }
  impl_->listeners.clear();
}

}  // namespace kinfer::controller
