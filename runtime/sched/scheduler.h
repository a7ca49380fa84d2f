// Scheduler: continuous (iteration-level) batching over a paged KV cache, as a pure class.
//
// No I/O, no threads, no clock: time comes in as arguments (`now`). The engine thread owns the
// Scheduler and calls Submit / Cancel / Step / OnStepDone (see step_plan.h for one iteration);
// tests drive it with fabricated step results (vLLM v1's Scheduler.schedule / update_from_output).
//
// Sequences. A request becomes a sequence with tokens = prompt, then prompt + generated. Each has
// num_computed (positions whose KV is written) and is either WAITING (no KV blocks) or RUNNING
// (holds blocks). A running sequence is prefilling while its prompt (after a preemption: all its
// known tokens) is not yet computed, and decoding once it feeds its last sampled token (one token a
// step, in plan.decodes). There is no prefill phase: each step hands every running sequence the
// tokens it still needs, within a budget.
//
// One step, Step(now):
//   1. Cancelled sequences and those whose deadline passed end (plan.finished) and free their KV.
//   2. Running sequences, most important first (priority, then arrival): a decoding sequence gets
//   one
//      token; a prefilling one gets a chunk of min(remaining, max_prefill_chunk, budget left).
//      Decode tokens are reserved up front, so prefill chunks never starve decodes. KV blocks for
//      the step are reserved here (KvBlockManager::Grow). When the pool is out of blocks, the least
//      important running sequence (highest priority value, then latest arrival) is PREEMPTED: its
//      KV is freed (full blocks stay in the prefix cache) and it goes back to waiting, to be
//      recomputed (vLLM's recompute preemption). A sequence that is itself the least important
//      preempts itself.
//   3. Waiting sequences, by effective priority then arrival (FCFS within a class), are admitted
//      while there is budget, fewer than max_running are running, and KV blocks allow. The cached
//      prefix is looked up first (KvBlockManager) and skips prefill. Admission stops at the first
//      waiting sequence that does not fit (no skipping ahead, so a long prompt is never passed over
//      forever by shorter ones). A newcomer of a strictly more important class (base priority) may
//      preempt running sequences of less important classes to fit.
//   4. Speculative decoding: a decoding sequence that was given a draft (SetDraft) verifies up to
//      its whole draft in this step (length 1 + k), most important first, with the budget left
//      after every decode and first-pass prompt chunk, within max_tokens, and only in free KV
//      blocks (drafts never preempt and never delay a prompt's first chunk). A draft that does
//      not fit is shortened or dropped; drafts last one step (the engine proposes anew each step).
//      OnStepDone keeps the accepted draft tokens' KV and gives back the rejected ones' slots.
//   5. Budget left over extends this step's prefill chunks (work-conserving).
//
// Priority: `priority` is the sidecar's class index: SMALLER IS MORE IMPORTANT (0 = "critical",
// 1 = "standard", 2 = "batch" by default; the same way as vLLM's `priority`). The runtime takes it
// from the request field `priority` or the `x-kinfer-priority` header (wired by the server later).
//
// Anti-starvation (see docs/batching.md for the reasoning against vLLM/SGLang user complaints):
//   * Aging: a waiting sequence's effective priority is priority - floor(waited / priority_aging),
//     so after k * priority_aging it competes as k classes more important. Under a sustained stream
//     of critical traffic a batch request still reaches the head in a bounded time. Aging orders
//     the queue only; preemption compares base priorities, so an aged request never preempts and
//     preemption never ping-pongs (a preempted sequence can never preempt its preemptor).
//   * Per-prompt chunk cap: no prompt takes more than max_prefill_chunk tokens in the first pass of
//   a
//     step, so short prompts behind a long one start at once (no head-of-line blocking), while the
//     most important / oldest prompt in prefill is served first every step and progresses by at
//     least min(remaining, max_prefill_chunk, max_batch_tokens - max_running) tokens per step.
//   * No skip-ahead at admission (above) and preemption victims chosen latest-arrival-first, so the
//     oldest request of a class is never the one that keeps losing.
//
// Never deadlocks: running sequences always progress or are preempted; when nothing runs, the head
// of the queue is admitted needing only its first chunk's blocks. A request that cannot fit in the
// whole pool even alone is refused by Submit (OUT_OF_RANGE), and the scheduler fails (kError) a
// sequence that still cannot grow while it is the only one running instead of looping.
//
// Bounded admission: Submit refuses with RESOURCE_EXHAUSTED beyond max_waiting requests or
// max_waiting_prompt_tokens waiting prompt tokens (the server answers 503 + Retry-After). Preempted
// sequences always go back to waiting, bound or not.
//
// Thread safety: none. One thread (the engine thread) calls everything; HTTP threads must not.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "runtime/kv/kv_block_manager.h"
#include "runtime/sched/step_plan.h"

namespace kinfer {

using SchedClock = std::chrono::steady_clock;
using SchedTime = SchedClock::time_point;

struct SchedulerConfig {
  int max_batch_tokens = 512;   // tokens computed per step, decodes + prefill; > max_running
  int max_running = 32;         // sequences holding KV at once
  int max_prefill_chunk = 256;  // a prompt's share of a step before others get theirs; > 0
  int max_waiting = 256;        // Submit beyond: RESOURCE_EXHAUSTED
  int64_t max_waiting_prompt_tokens = 262144;  // sum over waiting sequences; beyond: ditto
  // Waiting time that makes a sequence one class more important; zero disables aging.
  std::chrono::nanoseconds priority_aging = std::chrono::seconds(10);
  // Blocks to keep free when admitting while others run (fewer preemptions near a full pool);
  // -1 = num_blocks / 100.
  int watermark_blocks = -1;
  KvBlockManagerOptions kv;  // the block pool (num_blocks must be set)
  // Publish blocks that hold generated tokens to the prefix cache too. The engine turns it off:
  // a generated token's keys come from the decode path, and a later prompt holding the same
  // tokens computes them on the prompt path, so a hit would change that prompt's numerics.
  bool cache_generated_blocks = true;
};

// The per-prompt share for a step budget: max_prefill_chunk, but at most half the budget, so
// that a long prompt never takes a whole step and prompts behind it start at once (the default
// 256 of 512; at a budget of 256, 128). A lone prompt still fills the step (leftover budget goes
// back to the prompts).
inline int PrefillChunkFor(int max_batch_tokens, int max_prefill_chunk) {
  const int half = max_batch_tokens / 2 > 0 ? max_batch_tokens / 2 : 1;
  return max_prefill_chunk < half ? max_prefill_chunk : half;
}

// INVALID_ARGUMENT naming the bad field.
Status ValidateSchedulerConfig(const SchedulerConfig& config);

struct SchedRequest {
  SchedSeqId id = 0;                  // chosen by the caller; unique among live sequences
  std::vector<int32_t> prompt;        // non-empty
  int max_tokens = 16;                // > 0
  int priority = 0;                   // smaller = more important (class index)
  uint64_t cache_salt = 0;            // tenant; 0 = shared cache
  std::optional<SchedTime> deadline;  // the whole request ends kDeadlineExceeded after it
};

enum class SeqState { kWaiting, kRunning };

// A read-only view of a live sequence; valid until the next non-const call.
struct SeqView {
  SchedSeqId id = 0;
  SeqState state = SeqState::kWaiting;
  std::span<const int32_t> tokens;  // prompt, then generated
  int prompt_len = 0;
  int generated = 0;
  int num_computed = 0;
  int priority = 0;
  int preemptions = 0;
  int cached_tokens = 0;  // served from the prefix cache at the last admission
  bool decoding = false;  // running and feeding its last sampled token (SetDraft applies)
};

struct SchedulerStats {
  int running = 0;
  int waiting = 0;
  int64_t waiting_prompt_tokens = 0;
  uint64_t steps = 0;
  int64_t admitted = 0;  // admissions, re-admissions after preemption included
  int64_t preemptions = 0;
  int64_t rejected = 0;  // Submit refusals (any reason)
  int64_t finished = 0;  // sequences ended, any reason
  // Draft tokens verified (scheduled and computed; when a stop ends a sequence inside its draft,
  // only those up to the stop), and of those, accepted (a stop token that was drafted counts).
  int64_t draft_tokens = 0;
  int64_t accepted_tokens = 0;
  KvStats kv;
};

class Scheduler {
 public:
  // REQUIRES: ValidateSchedulerConfig(config).ok().
  explicit Scheduler(SchedulerConfig config);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Enqueues a request (it waits until a Step admits it).
  //   INVALID_ARGUMENT: empty prompt, max_tokens <= 0, an id already live.
  //   OUT_OF_RANGE: it could never be served here (prompt + max_tokens needs more KV blocks than
  //   the
  //     pool has, or the prompt alone exceeds max_waiting_prompt_tokens).
  //   RESOURCE_EXHAUSTED: the waiting queue is at max_waiting or max_waiting_prompt_tokens.
  Status Submit(SchedRequest request, SchedTime now);

  // Marks a live sequence to end with kCancelled at the next Step (which frees its KV), even when
  // it is in the step now being computed. False for an unknown id. Idempotent.
  bool Cancel(SchedSeqId id);

  // Offers `draft` as the tokens that follow decoding sequence `id`'s last token, for the next
  // Step to verify (rule 4). Replaces an earlier draft; an empty draft clears it. False, with
  // nothing stored, for an unknown id or a sequence that is not decoding.
  bool SetDraft(SchedSeqId id, std::vector<int32_t> draft);

  // Plans one step (see the header comment). REQUIRES: the previous non-idle plan was answered
  // with OnStepDone or OnStepFailed.
  StepPlan Step(SchedTime now);

  // Lookahead (vLLM's async scheduling; docs/batching.md): plans the step after the outstanding
  // one while that one is being computed, as if each of its sampled sequences drew one token
  // that does not stop. Such a sequence's decode item in the new plan feeds that token, whose
  // value is not known yet: its place in the sequence holds kPendingToken until
  // SetPendingTokens. Ahead, the plan
  //   - never preempts: a sequence that cannot grow without it is left out, and so is an
  //     admission that would need it; plan.deferred then asks for the next plan to be a Step;
  //   - leaves out the outstanding step's sequences that were cancelled, whose deadline passed
  //     or whose pending token is their max_tokens-th (the plan after ends them);
  //   - verifies no draft.
  // Then: SetPendingTokens(result) once the outstanding step's tokens are known, and
  // OnStepDone(result) with the stop flags as always. A sequence that stops there (a late stop)
  // ends at once; its item in the plan ahead is computed all the same and thrown away (the
  // plan's result must not hold a token for it). The plan ahead is then the outstanding one,
  // answered by OnStepDone even when nothing of it is left. An idle plan ahead is not kept.
  // REQUIRES: a plan outstanding without drafts, not yet planned ahead of.
  StepPlan StepAhead(SchedTime now);

  // With a plan ahead: the outstanding step's drawn tokens (their stop flags are not read),
  // written where the plan ahead reads them. INVALID_ARGUMENT unless it gives exactly one token
  // for each pending one (the plan ahead must then not be computed); FAILED_PRECONDITION when no
  // plan is made ahead.
  Status SetPendingTokens(const StepResult& result);

  // Applies the outstanding plan's outcome: commits the computed KV (full blocks become cacheable),
  // appends each sampled token, and ends sequences that stopped or reached max_tokens (their KV is
  // freed). Returns those sequences. INVALID_ARGUMENT, with nothing applied, when `result` does not
  // match the plan (a token for an id that was not to be sampled, or a sampled item with none).
  StatusOr<std::vector<FinishedSeq>> OnStepDone(const StepResult& result);

  // The outstanding plan could not be computed (a backend error): every sequence in it (and in
  // the plan ahead, if any) ends with kError and `error`; returns them. No-op (empty) when no
  // plan is outstanding.
  std::vector<FinishedSeq> OnStepFailed(const Status& error);

  std::optional<SeqView> Find(SchedSeqId id) const;
  // The block table the engine reads and writes for `id`. REQUIRES: `id` is running.
  std::span<const int32_t> BlockTable(SchedSeqId id) const { return kv_->BlockTable(id); }
  const KvBlockManager& kv() const { return *kv_; }
  const SchedulerConfig& config() const { return config_; }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  bool has_plan_ahead() const { return has_ahead_; }
  SchedulerStats stats() const;

 private:
  struct Seq;
  struct StepState;

  Seq* Get(SchedSeqId id);
  // Step and StepAhead: steps 1-5 of the header comment.
  StepPlan Plan(StepState& st, SchedTime now);
  int EffectivePriority(const Seq& s, SchedTime now) const;
  void SortRunning();
  void ScheduleRunning(StepState& st);
  void AdmitWaiting(StepState& st, SchedTime now);
  void ScheduleDrafts(StepState& st);
  void ExtendPrefills(StepState& st);
  // Slots `id` can add without taking blocks from anyone: room in its last block plus free blocks.
  int FreeRoom(SchedSeqId id) const;
  bool GrowOrPreempt(Seq& s, int n, StepState& st);
  // dry_run: only whether it would make room.
  bool MakeRoomByPreemptingLowerClasses(const Seq& s, int blocks_needed, StepState& st,
                                        bool dry_run = false);
  void Preempt(SchedSeqId id, StepState& st);
  void Unschedule(SchedSeqId id, StepState& st);
  void EndSequence(SchedSeqId id, SeqEnd reason, Status status, std::vector<FinishedSeq>* out);
  void RemoveFromQueues(SchedSeqId id);

  SchedulerConfig config_;
  int watermark_blocks_ = 0;
  std::unique_ptr<KvBlockManager> kv_;
  std::unordered_map<SchedSeqId, std::unique_ptr<Seq>> seqs_;
  std::vector<SchedSeqId> running_;  // kept sorted by (priority, arrival order) at each step
  std::vector<SchedSeqId> waiting_;  // sorted by (effective priority, arrival order) at each step
  int64_t waiting_prompt_tokens_ = 0;
  uint64_t next_order_ = 0;
  // The plan being computed, between Step and OnStepDone (kept, not destroyed, after: the next
  // plan is copied into its vectors).
  StepPlan outstanding_;
  bool has_outstanding_ = false;
  // StepAhead: the plan after the outstanding one; whether the outstanding one is applied (all
  // but its tokens' values, pending_ of them).
  StepPlan ahead_;
  bool has_ahead_ = false;
  bool outstanding_applied_ = false;
  int pending_ = 0;
  // Scratch kept across steps (no allocations a step in steady state).
  struct RunKey {
    int priority;
    uint64_t order;
    SchedSeqId id;
  };
  std::vector<RunKey> sort_keys_;                                            // SortRunning
  std::vector<SchedSeqId> live_scratch_;                                     // Step
  std::vector<std::pair<SchedSeqId, const SampledToken*>> sampled_scratch_;  // OnStepDone
  uint64_t steps_ = 0;
  int64_t admitted_ = 0;
  int64_t preemptions_ = 0;
  int64_t rejected_ = 0;
  int64_t finished_ = 0;
  int64_t draft_tokens_ = 0;
  int64_t accepted_tokens_ = 0;
};

}  // namespace kinfer
