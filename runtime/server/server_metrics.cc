#include "runtime/server/server_metrics.h"

#include <algorithm>

#include "common/http_errors.h"

namespace kinfer {
namespace {

// A counter that follows a cumulative total kept elsewhere: adds what the total gained since
// `*seen` (nothing when it went back) and remembers it.
void FollowTotal(metrics::Counter& c, int64_t now, int64_t* seen) {
  if (now > *seen) c.Inc(static_cast<double>(now - *seen));
  *seen = std::max(*seen, now);
}

}  // namespace

const char* RequestStatusLabel(FinishReason finish, const Status& error) {
  switch (finish) {
    case FinishReason::kCancelled:
      return kStatusCancelled;
    case FinishReason::kError: {
      // The client's own deadline: neither the engine's failure nor the server's capacity.
      if (error.code() == StatusCode::kDeadlineExceeded) return kStatusTimeout;
      if (IsRetryable(error.code())) return kStatusRejected;
      const int http = HttpStatusFor(error.code());
      return http >= 400 && http < 500 ? kStatusInvalid : kStatusError;
    }
    default:
      return kStatusOk;
  }
}

const std::vector<double>& TtftBuckets() {
  static const std::vector<double> b = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                                        0.5,   0.75, 1,     1.5,  2,     3,   5,    7.5, 10,
                                        15,    20,   30,    45,   60,    90,  120};
  return b;
}

const std::vector<double>& InterTokenBuckets() {
  static const std::vector<double> b = {
      0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1,
      0.15,  0.2,    0.3,   0.5,    0.75, 1,     2.5,  5,     10,   20,   40,   80,    120};
  return b;
}

const std::vector<double>& E2eBuckets() {
  static const std::vector<double> b = {0.05, 0.1, 0.25, 0.5, 0.75, 1,  1.5, 2,  3,  5,
                                        7.5,  10,  15,   20,  30,   45, 60,  90, 120};
  return b;
}

const std::vector<double>& QueueTimeBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                        2.5,   5,     7.5,  10,    15,   20,  30,   60,  120};
  return b;
}

RuntimeMetrics::RuntimeMetrics(metrics::Registry* r)
    : prompt_tokens(r->AddCounter("kinfer_runtime_prompt_tokens_total",
                                  "Prompt tokens processed (requests that reached the engine).")
                        .Get()),
      generation_tokens(
          r->AddCounter("kinfer_runtime_generation_tokens_total", "Tokens generated.").Get()),
      running(r->AddGauge("kinfer_runtime_num_requests_running",
                          "Requests the engine is generating for now.")
                  .Get()),
      waiting(r->AddGauge("kinfer_runtime_num_requests_waiting",
                          "Requests queued in the engine, not yet started.")
                  .Get()),
      kv_usage(r->AddGauge("kinfer_runtime_kv_cache_usage_ratio",
                           "Fraction of the KV cache's token slots in use (0..1).")
                   .Get()),
      model_loaded(r->AddGauge("kinfer_runtime_model_loaded",
                               "1 once the model is loaded and requests are served, else 0.")
                       .Get()),
      ttft(r->AddHistogram("kinfer_runtime_time_to_first_token_seconds",
                           "Seconds from receiving a request to its first generated token.",
                           TtftBuckets())
               .Get()),
      itl(r->AddHistogram("kinfer_runtime_inter_token_latency_seconds",
                          "Seconds between consecutive generated tokens of a request.",
                          InterTokenBuckets())
              .Get()),
      e2e(r->AddHistogram("kinfer_runtime_e2e_request_latency_seconds",
                          "Seconds from receiving a generation request to its last token.",
                          E2eBuckets())
              .Get()),
      queue_time(r->AddHistogram("kinfer_runtime_request_queue_time_seconds",
                                 "Seconds a request waited in the engine queue before it started.",
                                 QueueTimeBuckets())
                     .Get()),
      kv_blocks_used(
          r->AddGauge("kinfer_runtime_kv_blocks_used", "KV cache blocks held by running sequences.")
              .Get()),
      kv_blocks_total(
          r->AddGauge("kinfer_runtime_kv_blocks", "KV cache blocks in the paged pool.").Get()),
      prefix_queries(r->AddCounter("kinfer_runtime_prefix_cache_queries_total",
                                   "Prompt tokens looked up in the prefix cache at admission.")
                         .Get()),
      prefix_hits(r->AddCounter("kinfer_runtime_prefix_cache_hits_total",
                                "Prompt tokens served from the prefix cache (not recomputed).")
                      .Get()),
      preemptions(r->AddCounter("kinfer_runtime_num_preemptions_total",
                                "Sequences preempted (KV freed, recomputed later) when the KV "
                                "cache ran out of blocks.")
                      .Get()),
      spec_draft_tokens(r->AddCounter("kinfer_runtime_spec_decode_num_draft_tokens_total",
                                      "Speculative draft tokens verified by the target model.")
                            .Get()),
      spec_accepted_tokens(
          r->AddCounter("kinfer_runtime_spec_decode_num_accepted_tokens_total",
                        "Speculative draft tokens accepted (emitted without their own step).")
              .Get()),
      engine_steps(r->AddCounter("kinfer_runtime_engine_steps_total",
                                 "Batched model steps the engine computed.")
                       .Get()),
      engine_steps_ahead(
          r->AddCounter("kinfer_runtime_engine_steps_planned_ahead_total",
                        "Engine steps planned while the step before them was computed.")
              .Get()),
      engine_steps_chained(
          r->AddCounter("kinfer_runtime_engine_steps_chained_total",
                        "Engine steps launched before the step before them had returned its "
                        "tokens (two on the device).")
              .Get()),
      engine_steps_mixed(
          r->AddCounter("kinfer_runtime_engine_steps_mixed_total",
                        "Engine steps whose plain draws the backend drew while the other rows' "
                        "logits came back to be sampled on the host.")
              .Get()),
      connections(r->AddGauge("kinfer_runtime_http_connections",
                              "Client connections open now (kept-alive idle ones included).")
                      .Get()),
      connections_rejected(
          r->AddCounter("kinfer_runtime_http_connections_rejected_total",
                        "Connections answered 503 and closed because --max-connections were "
                        "open.")
              .Get()),
      requests_(&r->AddCounter("kinfer_runtime_requests_total",
                               "Generation requests (chat, completions and responses) by outcome.",
                               {"status"})),
      http_(&r->AddCounter("kinfer_runtime_http_requests_total",
                           "HTTP requests by route and response code.", {"route", "code"})) {
  // Expose every outcome at 0 from the start, so rate() works from the first scrape.
  for (const char* s :
       {kStatusOk, kStatusCancelled, kStatusError, kStatusInvalid, kStatusRejected,
        kStatusTimeout}) {
    requests_->WithLabels({s});
  }
}

void RuntimeMetrics::UpdateFromEngine(const EngineStats& s) {
  running.Set(static_cast<double>(s.running));
  waiting.Set(static_cast<double>(s.waiting));
  kv_usage.Set(s.kv_tokens_capacity > 0 ? static_cast<double>(s.kv_tokens_used) /
                                              static_cast<double>(s.kv_tokens_capacity)
                                        : 0.0);
  kv_blocks_used.Set(static_cast<double>(s.kv_blocks_used));
  kv_blocks_total.Set(static_cast<double>(s.kv_blocks_total));
  std::lock_guard<std::mutex> l(mu_);
  const auto add = FollowTotal;
  add(prefix_queries, s.prefix_cache_queries_tokens, &seen_.prefix_cache_queries_tokens);
  add(prefix_hits, s.prefix_cache_hits_tokens, &seen_.prefix_cache_hits_tokens);
  add(preemptions, s.preemptions, &seen_.preemptions);
  add(spec_draft_tokens, s.spec_draft_tokens, &seen_.spec_draft_tokens);
  add(spec_accepted_tokens, s.spec_accepted_tokens, &seen_.spec_accepted_tokens);
  add(engine_steps, s.steps, &seen_.steps);
  add(engine_steps_ahead, s.steps_planned_ahead, &seen_.steps_planned_ahead);
  add(engine_steps_chained, s.steps_chained, &seen_.steps_chained);
  add(engine_steps_mixed, s.steps_mixed, &seen_.steps_mixed);
}

void RuntimeMetrics::CountHttp(const std::string& route, int code) {
  http_->WithLabels({route, std::to_string(code)}).Inc();
}

void RuntimeMetrics::UpdateConnections(size_t open, uint64_t rejected_total) {
  connections.Set(static_cast<double>(open));
  std::lock_guard<std::mutex> l(mu_);
  FollowTotal(connections_rejected, static_cast<int64_t>(rejected_total),
              &seen_rejected_connections_);
}

}  // namespace kinfer
