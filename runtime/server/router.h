// Router: the HTTP API of kinfer-runtime, transport-neutral (the Beast adapter in
// http_server.h feeds it HttpRequest values).
//
//   GET  /health                -> 200 {"status":"ok"} while the process is up
//   GET  /ready                 -> 200 once the model is loaded, else 503
//   GET  /metrics               -> Prometheus text (server_metrics.h)
//   GET  /v1/models[/ID]        -> the served model
//   POST /v1/chat/completions   -> generation.h
//   POST /v1/completions        -> generation.h
//   POST /tokenize, /detokenize -> llama.cpp-compatible
//   POST /cancel                -> {"request_id": ID}: cancels the generations sent with
//                                  x-kinfer-request-id: ID (cancel_registry.h); not under /v1/,
//                                  so kinfer-sidecar never passes a client's call through
// Unknown paths are 404, known paths with another method 405 (with Allow); bodies are JSON
// errors in the OpenAI shape.
//
// Threading: Handle may be called concurrently from any number of threads. SetModel is called
// once (from main, after loading) and publishes the model with release/acquire ordering; the
// model then lives as long as the Router. BeginShutdown makes running generations cancel and
// new ones answer 503. The Router must outlive every in-flight Handle call and stream function
// (the HTTP adapter's Stop() waits for them).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <utility>

#include "common/metrics/metrics.h"
#include "runtime/server/cancel_registry.h"
#include "runtime/server/http_types.h"
#include "runtime/server/server_metrics.h"

namespace kinfer {

class ServedModel;

class Router {
 public:
  // `registry` must outlive the Router; the runtime's metrics are registered in it.
  explicit Router(metrics::Registry* registry);
  ~Router();

  // Publishes the loaded model: /ready turns 200 and the API answers. REQUIRES: called once.
  void SetModel(std::unique_ptr<ServedModel> model);
  void BeginShutdown() { stopping_.store(true); }

  // Never throws; an unexpected exception becomes a 500 JSON error.
  HttpResponse Handle(const HttpRequest& request);

  RuntimeMetrics& metrics() { return metrics_; }
  // What /metrics reads of the HTTP listener: connections open now and refused for the cap
  // since the start. REQUIRES: set before requests arrive (HttpServer::Start does).
  void SetConnectionCounts(std::function<std::pair<size_t, uint64_t>()> counts) {
    connection_counts_ = std::move(counts);
  }

  // The route a path (a RoutedPath) belongs to, whatever the method: the `route` label of
  // http_requests_total ("other" for none).
  static std::string RouteOf(std::string_view path);
  // Counts an answer given without reaching a route: the connection's own (413 over the body
  // limit, 400 malformed, 431, 501) or a 503 while too many requests are in flight or the server
  // stops. `path` is nullopt when the header could not be read. A generation path's refusal is
  // also a request: `invalid` (4xx) or `rejected` (503) in requests_total.
  void CountRefused(std::optional<std::string_view> path, int status);

 private:
  HttpResponse Dispatch(const HttpRequest& request);
  HttpResponse Tokenize(const HttpRequest& request, ServedModel& model);
  HttpResponse Detokenize(const HttpRequest& request, ServedModel& model);
  HttpResponse Models(const std::string& path, ServedModel& model);
  HttpResponse Metrics();
  // The model, or nullptr while loading.
  ServedModel* model() const { return model_.load(std::memory_order_acquire); }

  metrics::Registry* registry_;
  RuntimeMetrics metrics_;
  std::unique_ptr<ServedModel> owned_model_;  // written once by SetModel
  std::atomic<ServedModel*> model_{nullptr};
  std::atomic<bool> stopping_{false};
  CancelRegistry cancels_;
  std::function<std::pair<size_t, uint64_t>()> connection_counts_;
};

}  // namespace kinfer
