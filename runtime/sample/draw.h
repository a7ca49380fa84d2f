// The draw rule: how one row of logits becomes one token once penalties are applied. One
// statement of it, shared by the host Sampler (runtime/sample/sampler.h), the backends' default
// ModelBackend::ForwardBatchSample, and the reference the CUDA sampler is tested against.
//
//   temperature <= 0: the argmax, ties to the lowest id. Otherwise, in llama.cpp's order:
//   top-k -> top-p (over the temperature-1 probabilities) -> min-p -> then the survivor with the
//   largest (logit - max) / temperature + GumbelNoise(noise_key, id) (runtime/sample/draw_noise.h;
//   ties, which take equal doubles, to the lowest id): Gumbel-max, a draw from the softmax at the
//   temperature over the survivors, as vLLM draws (its exponential race is the same rule).
//
//   A speculative draft is verified outside this rule: its row is drawn exactly as without a
//   draft, and the draft token is kept when the draw is that token (runtime/sample/sampler.h,
//   "Speculative decoding").
//
// Which survivors there are does not depend on their order; the pick does not either (each token
// has its own noise). Scores and top-p's probabilities are in double; the logit differences to
// the maximum are taken in float, as llama.cpp does.
//
// Pure and thread-compatible: no state but the caller's scratch.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kinfer {

// One token's share of a request's logit bias and penalty window (LogitAdjustments builds the
// list, ApplyLogitAdjustments applies it; runtime/sample/penalties.h).
struct LogitAdjust {
  int32_t id = 0;
  float bias = 0.0f;  // added first (OpenAI's logit_bias; 0: none)
  int32_t count = 0;  // occurrences in the penalty window, the row's input token aside (0: none)
};

// The logprobs a backend reports with a drawn token (DrawParams::logprobs >= 0), in plain data:
// TokenLogprobOf's figures (runtime/sample/sampler.h), the log-softmax of the row after its
// logit bias and penalties, before temperature and the truncations.
inline constexpr int kMaxDrawnLogprobs = 20;  // OpenAI's top_logprobs limit (kMaxLogprobs)
struct DrawnLogprobs {
  int32_t token = -1;     // the drawn token
  float logprob = 0.0f;   // its logprob
  int32_t rank = 0;       // 1 + the tokens more likely than it (ties: lower ids first)
  int32_t n_top = 0;      // entries of top_ids / top_logprobs: min(logprobs, vocabulary)
  int32_t top_ids[kMaxDrawnLogprobs] = {};  // best first, ties to the lowest id
  float top_logprobs[kMaxDrawnLogprobs] = {};
};

struct DrawParams {
  float temperature = 0.0f;  // <= 0: greedy (the other fields are then unused)
  int top_k = 0;             // <= 0 or >= vocabulary: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  uint64_t noise_key = 0;    // the draw's key (DrawKey(seed, output index); draw_noise.h)
  // The logit bias and penalties, applied to the row before the rule (ApplyLogitAdjustments):
  // distinct ids in ascending order, pointing into the caller's storage (a backend copies them
  // while the call that takes them runs). Empty with count_input false: none.
  std::span<const LogitAdjust> adjust;
  float repetition = 1.0f;  // the penalties (SamplingParams), applied to counted tokens only
  float frequency = 0.0f;
  float presence = 0.0f;
  // Whether the row's input token (the token whose output this logits row is) is also in the
  // penalty window, once more: a backend knows it even when the host does not yet (a chained
  // step's token, drawn on the device).
  bool count_input = false;
  bool adjusted() const { return !adjust.empty() || count_input; }
  // OpenAI's logprobs: -1 off; 0 the drawn token's logprob and rank; N (<= kMaxDrawnLogprobs)
  // also the N most likely tokens. The backend writes them to *logprobs_out (non-null then) by
  // the time it returns the row's token (FinishSample for a launched step): the caller keeps
  // the pointee alive until then.
  int logprobs = -1;
  DrawnLogprobs* logprobs_out = nullptr;
  bool wants_logprobs() const { return logprobs >= 0 && logprobs_out != nullptr; }
  // A constraint's mask (JSON mode, a schema's grammar: TokenConstraint::AppendAllowed), applied
  // after the bias and penalties (ApplyTokenMask): a bit per token id, bit id % 64 of word
  // id / 64; a clear bit (or an id past the words) sets the logit to -infinity. When no token it
  // leaves has a finite logit, the ids of mask_fallback get logit 0 instead. Empty: no mask.
  // Points into the caller's storage, as adjust does.
  std::span<const uint64_t> mask;
  std::span<const int32_t> mask_fallback;
  bool masked() const { return !mask.empty(); }
};

// Applies a mask as DrawParams::mask states it (TokenConstraint::Mask's rule: end rather than
// draw from nothing). Fallback ids outside [0, logits.size()) are ignored.
void ApplyTokenMask(std::span<const uint64_t> mask, std::span<const int32_t> fallback,
                    std::span<float> logits);

// (logit, id) of the tokens still in the running.
using DrawCandidates = std::vector<std::pair<float, int32_t>>;

// The index of the largest logit, the lowest on ties. REQUIRES: non-empty.
int32_t ArgmaxLowestId(std::span<const float> logits);

// The candidates TruncateCandidates starts from, with top-k already applied: every token in id
// order, or (top_k in [1, vocabulary)) the top_k best, best first, found in one pass over the
// row. TruncateCandidates on the result leaves what it leaves on every token.
void FillCandidates(std::span<const float> logits, const DrawParams& p, DrawCandidates* c);

// Applies top-k, top-p and min-p (p's fields; temperature and noise_key unused) to *c, which holds
// every token in id order on entry; leaves the survivors best first when top-k or top-p cut, else
// in id order.
void TruncateCandidates(const DrawParams& p, DrawCandidates* c);

// The survivor the Gumbel-max rule picks at `temperature` (> 0) with `noise_key`. REQUIRES: c
// non-empty.
int32_t PickCandidate(const DrawCandidates& c, float temperature, uint64_t noise_key);

// The whole rule. REQUIRES: logits non-empty, no NaN. c is scratch.
int32_t DrawToken(std::span<const float> logits, const DrawParams& p, DrawCandidates* c);

}  // namespace kinfer
