// ProxyServer: kinfer-sidecar's HTTP front (Boost.Beast) around SidecarCore.
//
//   POST /v1/chat/completions, /v1/completions,  policy path: rate limit, cache, degrade,
//        /v1/responses
//                                                admission queue, breaker, retries; SSE relayed
//                                                chunk by chunk
//   other /v1/*, /tokenize, /detokenize          passed through to the upstream (no policy)
//   GET /health                                  alive
//   GET /ready                                   200 when the upstream's /ready is 200, the
//                                                breaker is not open and not draining
//   GET /metrics                                 Prometheus text (SidecarMetrics)
//   GET /stats                                   compact JSON for the operator
//
// Contract:
//  * One io_context thread runs everything (sessions, upstream calls, the core), so the pure
//    policy classes need no locks. Handlers never block.
//  * The connection handling (limits, 100-continue, timeouts, pipelining, malformed requests) is
//    common/http/server_session.h's, shared with kinfer-runtime.
//  * A client that goes away (read EOF while waiting, or a failed write) cancels its queued or
//    upstream request at once.
//  * Every error reply is an OpenAI-style JSON body; 429 and 503 carry Retry-After.
//  * BeginDrain (SIGTERM): stop accepting, answer new requests 503 with `Connection: close`, let
//    queued and in-flight requests finish, then call on_drained (or at drain_timeout).
//  * Reload (SIGHUP): re-read the config file and apply it without dropping connections.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/http/server_session.h"
#include "common/status.h"
#include "sidecar/config/sidecar_config.h"
#include "sidecar/proxy/sidecar_core.h"
#include "sidecar/proxy/upstream_client.h"
#include "sidecar/signals/sidecar_metrics.h"

namespace kinfer {

class Exchange;

class ProxyServer : public SessionHandler {
 public:
  // `config_path` is re-read by Reload(); empty when the sidecar runs on defaults.
  ProxyServer(net::io_context& ioc, const SidecarConfig& config, std::string config_path);
  ~ProxyServer() override;

  // Binds config.listen and starts accepting. UNAVAILABLE when the address cannot be bound.
  Status Listen();
  uint16_t port() const { return acceptor_.port(); }

  void BeginDrain(std::function<void()> on_drained);
  void Reload();

 private:
  friend class Exchange;
  using TimePoint = SidecarCore::TimePoint;

  // SessionHandler
  SessionLimits Limits() const override;
  bool KeepAlive() const override { return !draining_; }
  void OnRequest(const std::shared_ptr<ServerSession>& session) override;
  void OnRefused(ServerSession& session, int status, bool header_read) override;
  void OnResponseOpen() override { ++open_responses_; }
  void OnResponseClosed() override { --open_responses_; }

  // GET /ready: 200 when not draining, the breaker admits, and the upstream's /ready is 200.
  void ReplyReady(const std::shared_ptr<ServerSession>& session);
  // Starts the dispatched requests and answers the expired ones (posted: never re-entrant).
  void Run(AdmissionQueue::Dispatch dispatch);
  // The queued exchange with this id, or null.
  std::shared_ptr<Exchange> Waiting(uint64_t id) const;
  void ArmExpiry();
  void CheckDrained();
  TimePoint Now() const { return SidecarCore::Clock::now(); }

  net::io_context& ioc_;
  std::string config_path_;
  SidecarMetrics metrics_;
  SidecarCore core_;
  UpstreamPool primary_;
  std::unique_ptr<UpstreamPool> fallback_;  // null when the fallback shares the primary upstream
  SessionAcceptor acceptor_;
  // A request id made here (prefix and a fresh number), for an answer no exchange gives.
  std::string NewRequestId();

  uint64_t next_id_ = 1;
  // "sc-<random>-": with an exchange's id, the x-kinfer-request-id of its upstream request (and
  // its x-request-id when the client sent none).
  std::string request_id_prefix_;
  std::unordered_map<uint64_t, std::weak_ptr<Exchange>> waiting_;  // queued in the core
  net::steady_timer expiry_timer_;
  bool expiry_armed_ = false;
  int open_responses_ = 0;  // sessions with a request being answered
  bool draining_ = false;
  std::function<void()> on_drained_;
  net::steady_timer drain_timer_;
  TimePoint drain_deadline_{};
};

}  // namespace kinfer
