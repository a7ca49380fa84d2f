// Sampler: turns one step's logits into one token id, llama.cpp-style.
//
// Thread safety: none. A Sampler belongs to one request and is used from the one thread that runs
// that request's decode steps. It holds the request's seed, its output index and some scratch
// buffers; nothing is shared.
//
// The chain, in llama.cpp's order (common_sampler's default order, with temperature last):
//
//   logit_bias -> penalties -> constraint -> [temperature == 0: argmax, ties to the lowest id;
//   done]
//             -> top-k -> top-p -> min-p -> temperature -> softmax -> draw
//
//   * logit_bias (OpenAI): each listed token's bias is added to its logit.
//   * constraint (token_constraint.h; none by default): tokens that may not come next get -inf;
//     the token drawn is then passed to it (Sample), so it follows the text.
//   * penalties (see penalties.h): over the last penalty_last_n tokens of the history, repetition
//   as
//     llama.cpp's repeat_penalty (logit > 0 ? logit / p : logit * p), then frequency and presence
//     as OpenAI (logit -= count * frequency + (count > 0) * presence).
//   * top-k: keep the k largest logits (ties to the lowest id); k <= 0 or k >= vocab is off.
//   * top-p: over the probabilities of the remaining tokens at temperature 1 (as llama.cpp), keep
//   the
//     smallest set of most likely tokens whose mass reaches top_p (always at least one token).
//     top_p >= 1 is off.
//   * min-p: keep the tokens whose probability is at least min_p times the most likely one's.
//   Because
//     it is relative to the maximum, it does not matter whether it sees top-p's renormalised mass.
//     min_p <= 0 is off.
//   * temperature: divide the surviving logits by temperature, softmax, draw.
//
// After the penalties, the chain is DrawToken's rule (runtime/sample/draw.h), stated once for the
// host and the devices.
//
// Randomness: counter-based (runtime/sample/draw_noise.h). The draw of a request's i-th generated
// token takes the key DrawKey(seed, i), and each token id its own Gumbel noise under that key; the
// seed is params.seed, or one from std::random_device when unset. So a token's draw depends on
// nothing but its logits, its history, the seed and its index: not on how the engine got there
// (batching, chunking, preemption and recomputation, speculative drafts of any length and how many
// of them were kept, host or device draws). Greedy draws (temperature == 0) use no noise.
//
// Speculative decoding: a draft token is verified by drawing its row exactly as if there were no
// draft, and kept when the draw is that token; the first draw that differs is emitted in its
// place. Every emitted token is then the token plain decoding draws, so the output is the same
// text with or without drafts (lossless by construction, for any proposer). For a deterministic
// draft (prompt lookup, a greedy draft model: q = 1 at the draft) this is exactly the rejection
// rule of Leviathan et al. 2023: kept with probability p(draft), and on rejection a token from p
// without the draft, renormalised. A draft model that samples draws its token for index i with
// the same key, so with the same noise per token id (a Gumbel coupling): where its distribution
// q is close to the target's p, the two draws nearly always coincide.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "runtime/engine/request.h"
#include "runtime/sample/draw.h"
#include "runtime/sample/draw_noise.h"
#include "runtime/sample/sampling_params.h"
#include "runtime/sample/token_constraint.h"

namespace kinfer {

// The log-softmax of `logits` at `token` into *lp (token, logprob, rank; text left empty), and,
// when top > 0, the `top` most likely tokens, best first, ties to the lowest id. REQUIRES: logits
// non-empty, no NaN; 0 <= token < logits.size().
void TokenLogprobOf(std::span<const float> logits, int32_t token, int top, TokenLogprob* lp);

// TokenLogprobOf into a backend's plain-data report (top clamped to kMaxDrawnLogprobs), and back
// (texts left empty).
void DrawnLogprobsOf(std::span<const float> logits, int32_t token, int top, DrawnLogprobs* out);
void FromDrawnLogprobs(const DrawnLogprobs& d, TokenLogprob* lp);

class Sampler {
 public:
  // REQUIRES: params passed ValidateSamplingParams (sampling_validation.h). Values outside the
  // ranges are not checked here; they give well-defined but meaningless results.
  explicit Sampler(const SamplingParams& params,
                   std::unique_ptr<TokenConstraint> constraint = nullptr);

  // Picks the next token.
  //
  // logits: the model's raw logits for the whole vocabulary. Used as scratch: on return they hold
  // the
  //   logits after the logit bias and the penalties (nothing else is written to them). REQUIRES:
  //   non-empty, no NaN.
  // history: every token so far (prompt + generated), oldest first, for the penalties. Ids outside
  //   [0, logits.size()) are ignored.
  // lp: may be null. When params.logprobs >= 0 and lp is non-null, *lp is overwritten with the
  // chosen
  //   token's id and logprob, and (when params.logprobs > 0) the top params.logprobs tokens, best
  //   first, ties to the lowest id. These are "raw" logprobs as OpenAI and vLLM report them: the
  //   log-softmax of the logits AFTER logit_bias and penalties but BEFORE temperature, top-k, top-p
  //   and min-p, so a token that the filters made impossible still has its finite logprob. The
  //   `text` fields are left empty (the engine fills them from the tokenizer). When params.logprobs
  //   < 0, *lp is not touched.
  //
  // Returns the token id, in [0, logits.size()).
  int32_t Sample(std::span<float> logits, std::span<const int32_t> history, TokenLogprob* lp);

  // True when Sample() reads nothing but the raw logits, the history and, unless greedy, its
  // noise key: no constraint (a logit bias and penalties are fine: the draw lists them,
  // NextDraw below; so are logprobs: the draw asks for them, DrawParams::logprobs). Such a
  // token can be drawn where the logits are (ModelBackend::ForwardBatchSample: on the device)
  // without the logits reaching the host.
  bool IsPlainDraw() const;
  // True when the request's constraint can go with the draw as a mask (JSON mode and grammars:
  // TokenConstraint::AppendAllowed): a backend then draws the token with DrawParams::mask, and
  // the caller passes the token back (Accepted). The mask is the constraint's state's, so the
  // row's input token must have been accepted first.
  bool MaskGoesWithTheDraw() const;
  // The constraint's mask for the next token over n ids, appended to *bits; returns the
  // fallback ids (DrawParams::mask_fallback; valid while this sampler lives). REQUIRES:
  // MaskGoesWithTheDraw().
  std::span<const int32_t> AppendMask(size_t n, std::vector<uint64_t>* bits) const;
  // A token drawn elsewhere (a backend's draw, with this sampler's mask if any): the constraint
  // follows it, as Sample's own draw does.
  void Accepted(int32_t token) { Chose(token); }
  // This request's draw settings (noise_key 0; logprobs as asked, logprobs_out null).
  DrawParams draw_params() const;
  // draw_params() with the noise key of the next output token (DrawKey(seed(), index()); greedy:
  // none), and index() moves past it. DrawToken(logits, NextDraw()) is what Sample(logits)
  // would have returned for a plain draw.
  DrawParams NextDraw();
  // NextDraw() with the logit bias and penalties as entries a backend applies
  // (LogitAdjustments, runtime/sample/penalties.h): `before_input` is the history before the
  // row's input token (the backend counts that one), the entries are appended to *adjust, and
  // the returned params' adjust span is left empty for the caller to point at them. For a plain
  // draw, DrawToken on the row after ApplyLogitAdjustments is what Sample(row, history) would
  // have returned (with `banned`'s logits set to -infinity first: LogitAdjustments').
  DrawParams NextDraw(std::span<const int32_t> before_input, int32_t n_vocab,
                      std::vector<LogitAdjust>* adjust, std::span<const int32_t> banned = {});

  // The output index (0: the first generated token) whose noise key the next Sample() or
  // NextDraw() takes. It starts at 0 and each of them moves it on by one; Seek sets it, so a
  // caller that drew rows it did not keep (a rejected draft's) goes back to the first unkept.
  uint64_t index() const { return index_; }
  void Seek(uint64_t index) { index_ = index; }
  // The seed in use (params.seed, or the random one chosen when it was unset).
  uint64_t seed() const { return seed_; }

  const SamplingParams& params() const { return params_; }

 private:
  // Fills lp from the post-penalty logits.
  void FillLogprobs(std::span<const float> logits, int32_t chosen, TokenLogprob* lp);

  // The logits before truncation: AdjustLogits, then the constraint's mask.
  void Adjust(std::span<float> logits, std::span<const int32_t> history);
  // Passes the chosen token to the constraint.
  int32_t Chose(int32_t token);

  SamplingParams params_;
  std::unique_ptr<TokenConstraint> constraint_;
  uint64_t seed_;
  uint64_t index_ = 0;
  // Scratch reused across steps: (logit, id) pairs of the tokens still in the running.
  DrawCandidates candidates_;
};

}  // namespace kinfer
