// RuntimeMetrics: every metric kinfer-runtime exposes on /metrics, declared in one place
// (docs/metrics.md describes each one). Names follow vLLM's, under the prefix kinfer_runtime_.
//
// Thread safety: the members are metric handles (atomics); update them from any thread.
// UpdateFromEngine is called by the /metrics handler right before a scrape.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "common/metrics/metrics.h"
#include "runtime/engine/engine.h"

namespace kinfer {

// Values of the requests_total "status" label.
inline constexpr char kStatusOk[] = "ok";                // finished (stop or length)
inline constexpr char kStatusCancelled[] = "cancelled";  // the client went away mid-generation
inline constexpr char kStatusError[] = "error";          // the engine failed the request
inline constexpr char kStatusInvalid[] = "invalid";      // rejected with a 4xx
inline constexpr char kStatusRejected[] = "rejected";    // 503: queue full, not ready, stopping
inline constexpr char kStatusTimeout[] = "timeout";      // 504: its own x-kinfer-timeout passed

// The status label of a request that ended with `finish`, and `error` where it failed. A request
// refused before or after it reached the engine's queue counts alike: `rejected` for capacity
// (a retryable 503: the waiting queue full, the server stopping), `invalid` for the request's own
// fault (a 4xx); only a failure inside the engine (a 5xx) is `error`.
const char* RequestStatusLabel(FinishReason finish, const Status& error);

class RuntimeMetrics {
 public:
  // Registers every family in `registry`, which must outlive this object.
  explicit RuntimeMetrics(metrics::Registry* registry);

  // Copies the engine's gauges (running, waiting, KV usage).
  void UpdateFromEngine(const EngineStats& stats);
  // Copies the HTTP listener's counts: connections open now, refused for the cap since start.
  void UpdateConnections(size_t open, uint64_t rejected_total);

  // Counts one API request that ended with `status` (one of the kStatus* values).
  void CountRequest(const char* status) { requests_->WithLabels({status}).Inc(); }
  // Counts one HTTP exchange by route ("chat_completions", ..., "other") and status code.
  void CountHttp(const std::string& route, int code);

  metrics::Counter& prompt_tokens;
  metrics::Counter& generation_tokens;
  metrics::Gauge& running;
  metrics::Gauge& waiting;
  metrics::Gauge& kv_usage;
  metrics::Gauge& model_loaded;
  metrics::Histogram& ttft;
  metrics::Histogram& itl;
  metrics::Histogram& e2e;
  metrics::Histogram& queue_time;
  // The batching engine (docs/batching.md): KV blocks, prefix-cache lookups and hits in tokens,
  // preemptions. The counters follow the engine's cumulative totals (UpdateFromEngine adds the
  // difference since the previous scrape).
  metrics::Gauge& kv_blocks_used;
  metrics::Gauge& kv_blocks_total;
  metrics::Counter& prefix_queries;
  metrics::Counter& prefix_hits;
  metrics::Counter& preemptions;
  // Speculative decoding (vLLM's spec_decode_num_draft_tokens / _num_accepted_tokens): the
  // acceptance rate is accepted / draft.
  metrics::Counter& spec_draft_tokens;
  metrics::Counter& spec_accepted_tokens;
  // Engine steps, and of those the ones planned while the step before was computed
  // (EngineOptions::plan_ahead).
  metrics::Counter& engine_steps;
  metrics::Counter& engine_steps_ahead;
  metrics::Counter& engine_steps_chained;
  metrics::Counter& engine_steps_mixed;
  metrics::Gauge& connections;
  metrics::Counter& connections_rejected;

 private:
  std::mutex mu_;
  EngineStats seen_;  // the totals already added to the counters; protected by mu_
  int64_t seen_rejected_connections_ = 0;  // protected by mu_
  metrics::Family<metrics::Counter>* requests_;
  metrics::Family<metrics::Counter>* http_;
};

// Bucket bounds (seconds), chosen for LLM latencies: fine steps where SLOs sit (tens of ms to a
// few seconds) and a tail to 120 s for long prompts, long outputs and queueing under bursts.
const std::vector<double>& TtftBuckets();
const std::vector<double>& InterTokenBuckets();
const std::vector<double>& E2eBuckets();
const std::vector<double>& QueueTimeBuckets();

}  // namespace kinfer
