// Replica: one simulated inference pod, its sidecar's queue and its continuous-batching engine.
//
//   arrivals --> sidecar queue (FCFS) --admit while in_flight < max_running--> engine
//                  | waited > deadline: shed                  |
//                                                             v
//                           waiting for prefill --prefill iteration--> decoding --> done
//
// The engine runs one iteration at a time (vLLM's default scheduler, prefill first):
//   * when admitted requests wait for prefill, a prefill iteration takes them in FCFS order up to
//     max_prefill_tokens prompt tokens (at least one prompt, however long) and lasts
//     PrefillSeconds(their total tokens); it ends with each one's first token (TTFT = arrival to
//     the end of that iteration: sidecar queue + engine wait + prefill). Decoding requests wait
//     meanwhile.
//   * otherwise a decode step gives every decoding request one token and lasts
//     DecodeStepSeconds(number decoding). A request with output_tokens tokens leaves after its
//     prefill and output_tokens - 1 decode steps.
// KV-cache capacity is not modelled: max_running bounds the batch instead (for llama2-70b on 4 x
// H100 there is room for about 500k tokens of KV, far above 64 requests of this trace's lengths).
//
// Time is passed in; the replica schedules nothing itself. The simulator calls StartIteration()
// when it may start one and FinishIteration() at the time StartIteration() returned.
//
// Thread safety: not thread-safe; owned by the simulator's single thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "bench/sim/service_model.h"
#include "bench/sim/trace.h"

namespace kinfer::sim {

struct ReplicaLimits {
  int max_running = 64;               // requests admitted to the engine (vLLM max_num_seqs), >= 1
  int64_t max_prefill_tokens = 8192;  // prompt tokens in one prefill iteration, >= 1
  double queue_deadline_s = 0;        // > 0: a request waiting longer in the sidecar is shed
};

// What became of one request (indexed like the trace's requests).
struct RequestOutcome {
  double ttft_s = -1;  // arrival to first token; < 0 while none
  double done_s = -1;  // time of the last token; < 0 while running
  bool shed = false;   // dropped by the sidecar's queue deadline
  int pod = -1;        // the pod that got it
};

class Replica {
 public:
  enum class Phase { kStarting, kReady, kDraining, kGone };

  // `requests` and `outcomes` are the simulation's tables (not owned; they outlive the replica);
  // `ttft_edges` are the histogram's upper bounds in seconds, sorted, without +Inf.
  Replica(int id, double created_s, double ready_s, const ServiceModel* model, ReplicaLimits limits,
          const std::vector<TraceRequest>* requests, std::vector<RequestOutcome>* outcomes,
          const std::vector<double>* ttft_edges);

  int id() const { return id_; }
  Phase phase() const { return phase_; }
  void set_phase(Phase p) { phase_ = p; }
  double created_s() const { return created_s_; }
  double ready_s() const { return ready_s_; }
  double gone_s() const { return gone_s_; }
  void set_gone(double t) {
    phase_ = Phase::kGone;
    gone_s_ = t;
  }
  // When a scale-down removed it (< 0: never).
  double removed_s() const { return removed_s_; }
  void set_removed(double t) { removed_s_ = t; }

  // Puts request `r` into the sidecar queue and admits what fits.
  void Enqueue(int r, double now);
  // When the engine is idle and has work, plans the next iteration and returns its end time;
  // nullopt when busy or idle with nothing to do.
  std::optional<double> StartIteration(double now);
  // Completes the running iteration (REQUIRES: busy(), now == its end time), records first tokens
  // (their TTFTs are appended to `new_ttfts` when not null) and admits from the queue.
  void FinishIteration(double now, std::vector<double>* new_ttfts);
  // Sheds queued requests whose deadline passed (the sidecar does it on its own timer).
  void ShedExpired(double now);

  bool busy() const { return busy_; }
  int queue_depth() const { return static_cast<int>(queue_.size()); }
  int in_flight() const { return static_cast<int>(prefill_wait_.size() + decoding_.size()); }
  int outstanding() const { return queue_depth() + in_flight(); }
  // Prompt tokens of the requests here still without a first token: the sidecar queue, those
  // admitted and waiting for prefill, and the running prefill iteration's (what an LLM-aware
  // balancer scores, simulator.h BalancerKind::kLeastTokens).
  int64_t pending_prefill_tokens() const { return pending_prefill_tokens_; }
  uint64_t shed_count() const { return shed_; }
  double busy_seconds() const { return busy_seconds_; }
  // TTFT histogram since the previous call: one count per edge plus one for +Inf, not cumulative.
  std::vector<uint64_t> TakeTtftCounts();

 private:
  void Admit(double now);

  int id_;
  double created_s_, ready_s_, gone_s_ = -1, removed_s_ = -1;
  Phase phase_ = Phase::kStarting;
  const ServiceModel* model_;
  ReplicaLimits limits_;
  const std::vector<TraceRequest>* requests_;
  std::vector<RequestOutcome>* outcomes_;
  const std::vector<double>* ttft_edges_;

  struct Queued {
    int request;
    double enqueued_s;
  };
  std::deque<Queued> queue_;      // the sidecar's FCFS queue
  std::deque<int> prefill_wait_;  // admitted, waiting for prefill
  struct Decoding {
    int request;
    int remaining;  // tokens still to produce
  };
  std::vector<Decoding> decoding_;

  bool busy_ = false;
  bool iteration_is_prefill_ = false;
  std::vector<int> prefill_batch_;  // the running prefill iteration's requests
  double iteration_start_s_ = 0;
  double busy_seconds_ = 0;
  uint64_t shed_ = 0;
  int64_t pending_prefill_tokens_ = 0;
  std::vector<uint64_t> ttft_counts_;
};

}  // namespace kinfer::sim
