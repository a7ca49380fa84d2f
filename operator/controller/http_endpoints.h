// The operator's HTTP endpoints (common/http's Beast sessions, as the runtime's and the sidecar's:
// keep-alive, pipelining, limits and timeouts alike): GET /metrics on the metrics address and
// GET /healthz, /readyz on the probe address (both on one listener when the addresses are the
// same). Addresses are controller-runtime's form: ":8080" (all interfaces), "HOST:PORT", or "0"
// (off).
//
// /healthz: 200 "ok" while `healthy()` (the process's loops are alive), else 500.
// /readyz:  200 "ok" while `ready()` (the informer caches hold their first lists), else 500 with
//           the reason. A standby replica (not leader) is ready: it serves metrics and waits.
//
// Thread safety: Start/Stop from one thread; the callbacks run on the endpoints' io thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace kinfer::controller {

struct HttpEndpointsOptions {
  std::string metrics_address = ":8080";
  std::string probe_address = ":8081";
  std::function<std::string()> metrics_text;  // the exposition page
  std::function<bool()> healthy;
  std::function<bool()> ready;
};

struct ListenAddress {
  std::string host;  // an IP address; "" with port 0: off
  uint16_t port = 0;
  bool off() const { return port == 0; }
  bool operator==(const ListenAddress&) const = default;
};

// ":8080" -> [::]:8080 (every interface, IPv4 and IPv6); "127.0.0.1:9"; "[::1]:9" -> ::1:9; "localhost:9" -> 127.0.0.1:9;
// "0" or "" -> off. INVALID_ARGUMENT for anything else (a host that is not an IP address is
// refused when the endpoints start).
StatusOr<ListenAddress> ParseListenAddress(const std::string& address);

class HttpEndpoints {
 public:
  explicit HttpEndpoints(HttpEndpointsOptions options);
  ~HttpEndpoints();  // Stop()
  // UNAVAILABLE when an address cannot be bound; INVALID_ARGUMENT for a malformed one.
  Status Start();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kinfer::controller
