// The logit adjustments before a draw: the request's logit_bias, then the repetition, frequency
// and presence penalties over a window of recent tokens.
//
// Thread safety: a pure function; safe to call from any thread on distinct buffers.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/sample/sampling_params.h"

namespace kinfer {

// Applies the penalties of `params` to `logits` in place, using the last params.penalty_last_n
// tokens of `history` (-1: the whole history; 0: no window, so nothing changes). For every distinct
// token t in the window that occurs c times (ids outside [0, logits.size()) are skipped):
//
//   repetition (llama.cpp repeat_penalty, p = params.repetition_penalty):
//       logit[t] = logit[t] > 0 ? logit[t] / p : logit[t] * p
//   then frequency and presence (OpenAI):
//       logit[t] -= c * params.frequency_penalty + params.presence_penalty
//
// Each token is penalised once however often it occurs (only the frequency term scales with c).
// Does nothing when all three penalties are off (1, 0, 0).
void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> history,
                    std::span<float> logits);

// Adds params.logit_bias to `logits` in place: logit[id] += bias for every pair (ids outside
// [0, logits.size()) are skipped). Does nothing when the bias is empty.
void ApplyLogitBias(const SamplingParams& params, std::span<float> logits);

// What a Sampler does to the raw logits before truncation and the draw: ApplyLogitBias, then
// ApplyPenalties.
inline void AdjustLogits(const SamplingParams& params, std::span<const int32_t> history,
                         std::span<float> logits) {
  ApplyLogitBias(params, logits);
  ApplyPenalties(params, history, logits);
}

}  // namespace kinfer
