// The logit adjustments before a draw: the request's logit_bias, then the repetition, frequency
// and presence penalties over a window of recent tokens.
//
// Thread safety: a pure function; safe to call from any thread on distinct buffers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sample/draw.h"
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

// The same adjustments as a list that a backend applies where the logits are (on the device),
// so that a request with a logit bias or penalties is still drawn there. For a row whose input
// token (the newest token, whose output the row is) is history.back():
//
//   AdjustLogits(params, history, l)  and
//   ApplyLogitAdjustments(p, history.back(), l), p filled by LogitAdjustments(params,
//       history.first(history.size() - 1), l.size(), &list, &p) and p.adjust = list,
//
// leave the same values in l (a zero's sign aside). The input token is left out of the list
// (p.count_input says it counts) because a chained step's input token is drawn on the device
// after the host built the list. Appends the entries (distinct ids in ascending order, ids
// outside [0, n_vocab) left out) to *out and returns how many; sets p's repetition, frequency,
// presence and count_input, and leaves p->adjust for the caller to point at the entries once
// *out stops growing.
// banned: ids the row must not draw (the end-of-generation and stop tokens while min_tokens holds
// them off; repeats allowed), listed with bias -infinity: what setting their logits to
// -infinity before AdjustLogits leaves, since no bias or penalty brings them back.
size_t LogitAdjustments(const SamplingParams& params, std::span<const int32_t> before_input,
                        int32_t n_vocab, std::vector<LogitAdjust>* out, DrawParams* p,
                        std::span<const int32_t> banned = {});

// Applies p.adjust (and, with p.count_input, one more occurrence of input_token) to `logits`:
// for each listed id, logit += bias; then for each id counted c > 0 times, the repetition,
// frequency and presence penalties as ApplyPenalties. Ids outside [0, logits.size()) are
// skipped.
void ApplyLogitAdjustments(const DrawParams& p, int32_t input_token, std::span<float> logits);

}  // namespace kinfer
