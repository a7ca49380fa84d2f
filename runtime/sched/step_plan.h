// The values that pass between the Scheduler and the engine each step: the plan (what to compute)
// and the result (what was sampled). Plain data.
//
//   engine thread, one iteration:
//     plan = scheduler.Step(now)            // decides; KV blocks for the plan are already reserved
//     close the streams of plan.finished    // cancelled, deadline passed, failed
//     run one batched forward over plan.decodes + plan.prefills, reading and writing the paged KV
//       through scheduler.kv().BlockTable(id); sample where item.sample
//     done = scheduler.OnStepDone(result)   // commits the KV, appends tokens, ends sequences
//     push tokens to streams; close the streams of done
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace kinfer {

using SchedSeqId = uint64_t;

// Scheduler::StepAhead: the value of a token the step being computed is drawing.
inline constexpr int32_t kPendingToken = -1;

// One sequence's work in a step: positions [start, start + length) of its tokens (prompt, then
// generated) are fed to the model; their keys and values go to those positions of its block table.
//
// Speculative decoding: a decode item may carry `draft`, tokens proposed to follow the sequence's
// last one (Scheduler::SetDraft). Then length == 1 + draft.size(): positions [start, start + 1)
// hold the sequence's last token and [start + 1, start + length) the draft, and the engine needs
// the logits of all `length` positions to verify the draft (SampledToken::accepted).
struct ScheduledSeq {
  SchedSeqId id = 0;
  int start = 0;        // first position computed (== tokens before it already in the KV cache)
  int length = 0;       // tokens computed this step, >= 1
  bool sample = false;  // the last position's logits are needed: sample the next token from them
  std::vector<int32_t> draft;  // decode items only: draft tokens verified in this step
};

enum class SeqEnd {
  kStop,              // the engine reported a stop (end-of-generation token, stop string)
  kLength,            // max_tokens generated
  kCancelled,         // Cancel(): the client went away
  kDeadlineExceeded,  // the request's deadline passed
  kError,             // could not be served (status says why)
};
const char* SeqEndName(SeqEnd e);  // "stop", "length", "cancelled", "deadline_exceeded", "error"

struct FinishedSeq {
  SchedSeqId id = 0;
  SeqEnd reason = SeqEnd::kStop;
  Status status;  // non-OK for kError (and kCancelled / kDeadlineExceeded, for the message)
};

struct StepPlan {
  uint64_t step = 0;                   // 1, 2, ... (counts every Step() call)
  std::vector<ScheduledSeq> decodes;   // one token each (length 1, sample true), best class first
  std::vector<ScheduledSeq> prefills;  // prompt chunks (or a recompute after preemption)
  std::vector<SchedSeqId> preempted;   // lost their KV this step; back in the waiting queue
  std::vector<FinishedSeq> finished;   // ended before this step's compute; KV already freed
  int num_tokens = 0;                  // sum of lengths (draft tokens included); <= max_batch_tokens
  int num_draft_tokens = 0;            // of those, draft tokens to verify
  // StepAhead only: something was left for a plan made after the step in flight (a preemption);
  // make the next plan with Step.
  bool deferred = false;

  // True when there is nothing to compute (OnStepDone need not be called).
  bool idle() const { return decodes.empty() && prefills.empty(); }
};

// What the engine sampled. One entry per plan item with sample == true, in any order.
struct SampledToken {
  SchedSeqId id = 0;
  int32_t token = 0;
  bool stop = false;  // the engine's stop rules ended the sequence with this token
  // For an item with a draft: how many leading draft tokens were accepted (0..draft.size()). The
  // sequence's new tokens are draft[0, accepted) followed by `token` (the target's own token at
  // the first rejected position, or one past the draft when all were accepted). When the engine's
  // stop rules end the sequence at an accepted draft token, it reports that token as `token` and
  // the drafts before it as accepted.
  int accepted = 0;
};

struct StepResult {
  std::vector<SampledToken> sampled;
};

}  // namespace kinfer
