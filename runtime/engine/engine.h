// Engine: owns the model, runs generation on one engine thread, and streams tokens to callers.
//
// Threading model (llama.cpp server / vLLM engine core):
//   - One engine thread owns the model weights, the paged KV cache, the Scheduler and all sequence
//     state (samplers, stop matchers, text decoders). Nothing else touches them.
//   - Any thread (HTTP handlers) calls Submit(), which validates, puts the request in the inbox
//     and returns a RequestStream at once. The caller reads events with RequestStream::Next() and
//     may Cancel() at any time (client disconnect); the engine ends that sequence at its next step
//     and frees its KV blocks.
//   - Stats() may be called from any thread (atomics).
//
// Continuous batching (docs/batching.md): each iteration the engine thread moves the inbox into
// the Scheduler (runtime/sched), which plans one step within a token budget (decodes of running
// sequences first, then prompt chunks, priorities, preemption by recompute when KV blocks run
// out, prefix-cache hits skipping prefill); the engine runs the whole step as one
// LlamaModel::ForwardBatch over the paged cache, samples each sequence that needs a token, applies
// its stop rules, streams the text, and reports back (Scheduler::OnStepDone). The model runs
// behind a ModelBackend (runtime/backend: the CPU, or CUDA), which owns the weights and the KV
// memory; the engine owns which block holds what.
//
// Streaming: a step's tokens are chosen, detokenized and checked against every stop rule by the
// engine thread right after the step; their events go to an outbox, which at the end of each
// iteration is posted to the EventPump (runtime/engine/event_pump.h), whose own thread pushes
// them to their streams and wakes their readers while the engine thread plans and runs the next
// step (EngineOptions::overlap_streaming; off, the engine thread pushes them itself there).
//
// Planning ahead (EngineOptions::plan_ahead; docs/batching.md): on a backend whose LaunchSample
// returns early (CUDA), the engine thread plans and prepares step N+1 (Scheduler::StepAhead)
// while step N is computed, launches it as soon as step N's tokens are back
// (Scheduler::SetPendingTokens), and only then streams step N and applies its stop rules. A
// sequence that step N ends has a row in step N+1 that is thrown away. Chained
// (EngineOptions::chain_steps), step N+1 is launched before step N's tokens are back: the
// backend takes each decode's token from step N's draws itself (LaunchSampleChained).
//
// Speculative decoding (docs/batching.md): for each decoding sequence that asks for it, the engine
// thread asks its DraftProposer (n-gram prompt lookup, or a draft model) for up to k tokens before
// each step and offers them to the Scheduler (SetDraft); the step computes the sequence's last
// token and the draft together (k + 1 logits rows), and the engine draws each row as it would
// without a draft, keeping draft tokens while they are what was drawn (runtime/sample/sampler.h,
// "Speculative decoding"): the output, greedy or seeded, is token for token what it is without
// drafts, whatever the drafts' lengths.
//
// Determinism: with batch_invariant (the default) the matrix products take the same kernels for a
// row whatever else is in the step and every token takes the same (batch-path) attention
// numerics, and a sampled token's noise key is its output index's (Sampler), so a request's
// tokens do not depend on what it was batched with, on prefix-cache hits, on preemption or on
// speculation: same seed, same output.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "runtime/engine/event_pump.h"
#include "runtime/engine/request.h"
#include "runtime/engine/stream_notifier.h"
#include "runtime/model/llama_model.h"  // SequenceBatch
#include "runtime/sample/draw.h"
#include "runtime/sample/token_constraint.h"
#include "runtime/sched/step_plan.h"

namespace kinfer {

class DraftProposer;
class LlamaModel;
class ModelBackend;
class Scheduler;
class Tokenizer;

// A request's output channel. Shared by the engine (producer) and the caller (consumer).
class RequestStream {
 public:
  // Blocks until an event is available, the stream ends, or `timeout` passes. Returns true and
  // fills *out with an event; false on timeout. After the final event (finish != kNone), further
  // calls return false immediately.
  bool Next(StreamEvent* out, std::chrono::milliseconds timeout);
  // Asks the engine to stop this request; the final event then has FinishReason::kCancelled
  // (unless it already finished). Safe from any thread, idempotent.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }
  // Every later Push also notifies `n` (null: none). Events pushed before are not announced:
  // poll once after setting it (StreamNotifier's contract).
  void SetNotifier(std::shared_ptr<StreamNotifier> n);

  // Engine side.
  void Push(StreamEvent ev);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<StreamNotifier> notifier_;  // guarded by mu_
  std::deque<StreamEvent> events_;            // guarded by mu_
  bool finished_ = false;                     // final event popped; guarded by mu_
  std::atomic<bool> cancelled_{false};
};

struct SpeculativeOptions {
  int max_tokens = 3;       // draft tokens per step at most (3 + 1 fill one matrix-vector pass)
  bool default_on = false;  // for requests that do not say (GenerationRequest::speculative_tokens)
  int ngram_min = 2;        // prompt lookup suffix lengths (vLLM prompt_lookup_min / _max)
  int ngram_max = 4;
  // A draft model sharing the target's vocabulary; null = n-gram prompt lookup. Not owned; may be
  // the target itself (tests: every greedy draft is accepted).
  LlamaModel* draft_model = nullptr;
};

struct EngineOptions {
  int n_threads = 2;
  int max_queued_requests = 256;  // waiting requests; Submit() returns RESOURCE_EXHAUSTED beyond
  int context_length = 0;         // per sequence; 0 = the model's trained context
  int max_batch_tokens = 256;     // tokens computed per step (decodes + prompt chunks)
  int max_running = 16;           // sequences holding KV blocks at once
  int kv_block_size = 16;         // positions per KV block
  int64_t kv_cache_tokens = 0;    // the paged cache's size in positions; 0 = 2 x context_length
  // When > 0, the cache's size instead: this fraction of the backend's memory for KV
  // (ModelBackend::KvMemoryBudgetBytes: free device memory after the weights, or the host's
  // MemAvailable on the CPU), never less than one full context.
  double kv_cache_fraction = 0;
  bool prefix_caching = true;   // reuse the KV blocks of earlier prompts with the same prefix
  bool batch_invariant = true;  // see Determinism above; false = faster prefill (the GEMM)
  // Waiting prompt tokens; beyond: RESOURCE_EXHAUSTED. 0 = 64 x context_length.
  int64_t max_waiting_prompt_tokens = 0;
  SpeculativeOptions spec;
  // Steps whose every sampled sequence is a plain draw (Sampler::IsPlainDraw: no constraint; a
  // logit bias, penalties and min_tokens go with the draw as entries, logprobs come back with
  // the token; a prompt-lookup draft is verified by the rows' draws, DrawParams::draft; only a
  // draft model's sampled draft, with its distributions q, needs the host) that
  // ModelBackend::CanSample takes run ForwardBatchSample: on
  // CUDA the draw runs on the device and only token ids cross PCIe instead of n_vocab floats per
  // sequence. Same rule, same noise keys, same tokens either way.
  bool backend_sampling = true;
  // A thread of the engine's own (EventPump) pushes each step's events to their streams, waking
  // their readers, while the engine thread goes on to the next step; off, the engine thread
  // pushes them at the end of each iteration. The same events either way.
  bool overlap_streaming = true;
  // Lookahead (docs/batching.md): while the backend computes step N, the engine thread plans
  // step N+1 and prepares its batch (Scheduler::StepAhead); once step N's tokens are back it
  // writes them into step N+1's inputs, launches step N+1, and only then decodes step N's text
  // and applies its stop rules, while step N+1 is computed. A sequence that stopped at step N
  // has a row in step N+1 that is thrown away. Only for steps the backend draws (every sampled
  // sequence a plain draw), with no speculation running; the same tokens either way.
  //   kAuto: when the backend's LaunchSample returns before the step is computed (CUDA);
  //   kAlways: also on a backend that computes in LaunchSample (the CPU: each step's events
  //     then go out one step later; for tests);
  //   kOff: each step is planned once the previous one's tokens are applied.
  enum class PlanAhead { kOff, kAuto, kAlways };
  PlanAhead plan_ahead = PlanAhead::kAuto;
  // Two steps on the device at once (docs/batching.md, "Chained steps"): a step planned ahead
  // is launched before the step in flight has returned its tokens
  // (ModelBackend::LaunchSampleChained: the backend takes each decode's input token from the
  // earlier step's draws itself), so the device goes from step N to step N+1 without waiting
  // for the host. Only for steps that plan ahead and that the backend draws; the same tokens
  // either way.
  //   kAuto: when the backend's LaunchSample returns before the step is computed (CUDA);
  //   kAlways: on any backend that plans ahead (the CPU computes the chained step at once; for
  //     tests);
  //   kOff: each step is launched once the tokens of the step before it are on the host.
  enum class ChainSteps { kOff, kAuto, kAlways };
  ChainSteps chain_steps = ChainSteps::kAuto;
  // Tokens a stream event carries at least (vLLM's --stream-interval; docs/batching.md,
  // "Streaming interval"). A request's first token goes out at once and its final event
  // carries whatever is held; between them the engine holds a request's events until they
  // carry this many tokens, then hands them to the stream as one. Fewer events mean fewer
  // reader wake-ups and SSE chunks per token, the host's main cost per token at large batches.
  // The same text, tokens and logprobs either way; 1 (the default) = an event a step.
  int stream_interval = 1;
  // Tests only: sees each step's result before the scheduler does, so a test can make the two
  // disagree (the check that fails a step's sequences on a mismatch, a bug's symptom).
  std::function<void(StepResult*)> before_step_done_for_tests;
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_tokens_used = 0;
  int64_t kv_tokens_capacity = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  int64_t prefix_cache_queries_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_cache_hits_tokens = 0;     // of those, served from it
  int64_t preemptions = 0;
  int64_t spec_draft_tokens = 0;     // draft tokens verified
  int64_t spec_accepted_tokens = 0;  // of those, accepted
  int64_t steps = 0;                 // steps computed (or being computed)
  int64_t steps_planned_ahead = 0;   // of those, planned while the one before was computed
  int64_t steps_chained = 0;         // of those, launched before the one before had returned
  int64_t steps_mixed = 0;  // steps some of whose rows the backend drew, the others the engine
};

class Engine {
 public:
  // Takes ownership of nothing: backend and tokenizer must outlive the Engine. The engine
  // thread sizes and allocates the backend's KV cache (InitKvCache) and computes every step
  // through it.
  Engine(ModelBackend* backend, const Tokenizer* tokenizer, EngineOptions options);
  // The CPU backend over `model` (which must outlive the Engine).
  Engine(LlamaModel* model, const Tokenizer* tokenizer, EngineOptions options);
  ~Engine();  // stops the engine thread; pending requests finish with kCancelled

  // Validates (non-empty prompt, ids in range, prompt + max_tokens <= context) and enqueues.
  // INVALID_ARGUMENT / OUT_OF_RANGE for bad requests, RESOURCE_EXHAUSTED when the queue is full.
  StatusOr<std::shared_ptr<RequestStream>> Submit(GenerationRequest request);

  EngineStats Stats() const;
  // OK while the engine can serve; once the engine thread found it cannot (the KV cache could not
  // be allocated: --kv-cache-fraction or --kv-cache-tokens past the device's free memory), the
  // reason as INTERNAL, which Submit returns from then on (a 500, not a retryable 503: retrying
  // cannot help) and /ready reports (the pod leaves its Service).
  Status health() const;
  // Blocks until the engine thread has set up its KV cache and scheduler (or found it cannot);
  // returns health() then. kinfer-runtime calls it at start and exits 1 on an error, as vLLM and
  // llama-server do when the KV cache does not fit, instead of serving a pod that never gets ready.
  Status WaitStarted() const;
  // The device failed for good (ModelBackend::DeviceHealth): only a restart helps (/health fails).
  bool needs_restart() const;
  int context_length() const { return context_length_; }
  int max_queued_requests() const { return options_.max_queued_requests; }
  // Prompt tokens that may wait at once (EngineOptions::max_waiting_prompt_tokens, else 64
  // contexts).
  int64_t max_waiting_prompt_tokens() const {
    return options_.max_waiting_prompt_tokens > 0 ? options_.max_waiting_prompt_tokens
                                                  : 64 * int64_t{context_length_};
  }

 private:
  struct Pending {
    uint64_t id = 0;
    GenerationRequest request;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point enqueued;
  };
  struct Active;  // a submitted request's engine-thread state (sampler, stops, decoder, stream)

  // The vocabulary as constrained decoding sees it; built on first use (engine thread).
  std::shared_ptr<const ConstraintVocab> ConstraintVocabulary();
  // prompt_logprobs: records the logprobs of the prompt positions a chunk's rows predict.
  void ScorePrompt(Active& a, const ScheduledSeq& item, const float* rows);
  // min_tokens: rules out the end-of-generation ids and the request's stop_tokens in `row`.
  void SuppressEnd(const Active& a, std::span<float> row);
  // The tokenizer's end-of-generation ids (eog_ids_, filled on first use).
  const std::vector<int32_t>& EndIds();

  // Items with logits, in batch order.
  struct SampledItem {
    const ScheduledSeq* item;  // in its step's plan
    Active* active;            // null: not a request of this engine (cannot happen)
    size_t row = 0;            // its first logits row (the last of its entry's, unless drafted)
    // A mixed step: its row's place among the rows sampled on the host (-1: drawn by the backend).
    int host = -1;
  };
  // Prompt chunks whose every position has a logits row (GenerationRequest::prompt_logprobs).
  struct ScoredItem {
    const ScheduledSeq* item;
    Active* active;
    size_t row = 0;  // the row of the chunk's first position
  };
  // A constrained row of a step planned ahead whose mask waits for its input token.
  struct LateMask {
    size_t row;      // its draw
    Active* active;
    uint64_t seq;    // its sequence: its input token is the step before's draw for it
  };
  // A step from its plan to its results, kept across steps (steady state allocates none of
  // these; a fresh logits buffer would cost a page fault per 4 KB every step).
  struct StepWork {
    StepPlan plan;
    std::vector<SequenceBatch> batch;
    std::vector<uint64_t> batch_ids;  // the sequence of each batch entry
    std::vector<int32_t> chain;       // a chained launch: ModelBackend::LaunchSampleChained's
    std::vector<SampledItem> sampled;
    std::vector<ScoredItem> scored;
    // Decode items with a draft feed their last token and the draft: tokens not yet in the
    // sequence, kept here until the step is launched (the batch points into them).
    std::vector<std::vector<int32_t>> drafted;
    std::vector<DrawParams> draws;
    // The draws' logit bias and penalty entries (DrawParams::adjust points into them).
    std::vector<LogitAdjust> adjust;
    std::vector<size_t> adjust_end;  // draws[i]'s entries end at adjust_end[i]
    // The constraints' masks (DrawParams::mask points into them): (draw, first word) each.
    std::vector<uint64_t> masks;
    std::vector<std::pair<size_t, size_t>> mask_at;
    // Planned ahead: constrained rows whose input token the step before draws; their masks are
    // added once it is back (FinishLateMasks).
    std::vector<LateMask> late_masks;
    // The logprobs the backend reports for draws[i] that ask (DrawParams::logprobs_out points
    // here; sized only when some draw asks).
    std::vector<DrawnLogprobs> lps;
    bool ahead = false;           // planned while the step before it was computed
    bool backend = false;         // drawn by the backend: LaunchSample, then FinishSample
    // Some rows drawn by the backend, the others' logits (host_rows) sampled here:
    // ForwardBatchSampleMixed, computed in Launch; their logits in step_logits_.
    bool mixed = false;
    std::vector<int32_t> host_rows;
    std::vector<int32_t> chosen;  // backend and mixed: the drawn tokens, one per sampled item
  };

  void Start();  // the constructors' common part: context length, then the engine thread
  void Loop();
  // Moves the inbox into the scheduler; ends streams whose request it refuses.
  void Admit(std::deque<Pending>* inbox);
  // Ends the streams of the sequences a plan ended before computing anything.
  void EndPlanned(const std::vector<FinishedSeq>& finished);
  // Builds `w`'s batch from its plan and chooses how it is sampled. inputs_pending: planned
  // ahead, while the step before it (which draws some of its input tokens) is computed.
  void Prepare(StepWork& w, std::chrono::steady_clock::time_point now, bool inputs_pending = false);
  // Points the draws' masks into w.masks (once it has stopped growing).
  void PointMasks(StepWork& w);
  // The masks of next's constrained rows planned ahead of their input token (next.late_masks),
  // once cur (the step before) has its tokens: each constraint takes its token (ahead of
  // Emit(cur), which then does not pass it again) and appends its mask.
  void FinishLateMasks(const StepWork& cur, StepWork& next);
  // Backend steps: LaunchSample; others compute at once (ForwardBatch into step_logits_).
  Status Launch(StepWork& w);
  // Backend steps: FinishSample into w.chosen.
  Status Collect(StepWork& w);
  // Samples (or takes the drawn tokens of) every item of a computed step whose sequence has not
  // ended meanwhile, streams them, and answers the scheduler (OnStepDone). False when the
  // scheduler refused the result: the step's sequences (and those of a plan ahead) have failed.
  bool Emit(StepWork& w);
  // Ends every sequence of the outstanding plan (and the plan ahead) with `error`.
  void FailStep(const Status& error);
  // Whether the step after `w` may be planned while `w` is computed.
  bool CanPlanAhead(const StepWork& w) const;
  // Launches `next` (planned ahead, prepared) behind `cur` (launched, not collected), each of its
  // decodes reading its token from cur's draws on the backend. False, with nothing launched, when
  // it cannot be (a token pending that cur does not draw, or the backend refuses): `next` is then
  // launched the ordinary way once cur's tokens are back.
  bool LaunchChained(StepWork& cur, StepWork& next);
  // Offers a draft to the scheduler for every decoding sequence that wants speculation.
  void ProposeDrafts();
  // Appends `tok` to sequence `a`, applies its stop rules and streams the text; returns true when
  // the sequence ended (its final event is pushed).
  bool EmitToken(Active& a, int32_t tok, TokenLogprob* lp);
  // Samples (or, for a planned item with a draft, verifies) sequence `a`'s new tokens from its
  // logits rows (one per position of the item that has logits; used as scratch) and streams
  // them; fills *out.
  void SampleItem(Active& a, const ScheduledSeq& item, float* rows, SampledToken* out);
  // The same for tokens the backend already drew (ForwardBatchSample): the item's rows' tokens
  // and draws (one row, or a draft's one per position), with the logprobs it reported.
  void EmitChosen(Active& a, const ScheduledSeq& item, std::span<const int32_t> toks,
                  std::span<const DrawParams> draws, SampledToken* out);
  // Removes a finished request (and what the proposer keeps for it). Its state lives on in
  // retired_ until no prepared step can point at it (the end of the next Emit).
  void Retire(std::map<uint64_t, std::unique_ptr<Active>>::iterator it);
  void Finish(Active& a, FinishReason reason, Status error);
  // Every event for a stream goes through the outbox, in order; FlushOutbox, at the end of each
  // iteration, hands them to the pump (or pushes them).
  void Send(Active& a, StreamEvent ev);
  void FlushOutbox();
  void PublishStats();

  std::unique_ptr<ModelBackend> owned_backend_;  // the LlamaModel constructor's CpuBackend
  ModelBackend* backend_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  std::shared_ptr<const ConstraintVocab> constraint_vocab_;  // engine thread
  uint64_t private_salts_ = 0;    // prompt_logprobs requests' cache salts; engine thread
  std::vector<int32_t> eog_ids_;  // end-of-generation ids, filled on first use; engine thread
  std::vector<int32_t> banned_;   // Prepare's scratch: a row's banned ids (min_tokens)
  std::vector<int32_t> drafted_history_;  // Prepare's scratch: a history with its draft after it
  int context_length_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> inbox_;  // guarded by mu_
  int64_t inbox_prompt_tokens_ = 0;  // guarded by mu_: the prompts in inbox_
  bool stopping_ = false;      // guarded by mu_
  Status broken_;              // guarded by mu_: health()
  bool started_ = false;       // guarded by mu_: the KV cache and scheduler are set up (or broken_)
  mutable std::condition_variable started_cv_;
  bool device_lost_ = false;   // guarded by mu_: needs_restart()
  uint64_t next_id_ = 1;       // guarded by mu_
  std::atomic<int64_t> running_{0};
  std::atomic<int64_t> waiting_{0};
  std::atomic<int64_t> waiting_prompt_tokens_{0};  // the scheduler's, as of the last step
  std::atomic<int64_t> kv_used_{0};
  std::atomic<int64_t> kv_blocks_used_{0};
  std::atomic<int64_t> kv_blocks_total_{0};
  std::atomic<int64_t> prefix_queries_{0};
  std::atomic<int64_t> prefix_hits_{0};
  std::atomic<int64_t> preemptions_{0};
  std::atomic<int64_t> spec_draft_{0};
  std::atomic<int64_t> spec_accepted_{0};
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> steps_ahead_{0};
  std::atomic<int64_t> steps_chained_{0};
  std::atomic<int64_t> steps_mixed_{0};
  // Engine-thread state.
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<DraftProposer> proposer_;
  std::map<uint64_t, std::unique_ptr<Active>> active_;
  std::vector<EventPump::Event> outbox_;  // this iteration's events, in order
  std::unique_ptr<EventPump> pump_;       // overlap_streaming: pushes them beside this thread
  int num_spec_ = 0;  // active requests that want speculation (no lookahead while any do)
  std::vector<std::unique_ptr<Active>> retired_;
  // The step being computed (or just prepared), and the one planned ahead of it.
  StepWork work_[2];
  bool defer_ahead_ = false;  // the last plan ahead left something for a Step
  std::vector<float> step_logits_;
  StepResult step_result_;
  StepResult pending_result_;  // lookahead: the computed step's tokens for the plan ahead
  std::unordered_map<uint64_t, int32_t> drawn_rows_;  // LaunchChained: sequence -> cur's row
  std::thread thread_;
};

}  // namespace kinfer
