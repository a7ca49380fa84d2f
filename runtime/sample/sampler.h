// Sampler: turns one step's logits into one token id, llama.cpp-style.
//
// Thread safety: none. A Sampler belongs to one request and is used from the one thread that runs
// that request's decode steps. It holds the request's PRNG and some scratch buffers; nothing is
// shared.
//
// The chain, in llama.cpp's order (common_sampler's default order, with temperature last):
//
//   logit_bias -> penalties -> constraint -> [temperature == 0: argmax, ties to the lowest id;
//   done]
//             -> top-k -> top-p -> min-p -> temperature -> softmax -> draw
//
//   * logit_bias (OpenAI): each listed token's bias is added to its logit.
//   * constraint (token_constraint.h; none by default): tokens that may not come next get -inf;
//     the token drawn is then passed to it (Sample and Verify), so it follows the text.
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
// Randomness: std::mt19937_64 (its output sequence is fixed by the C++ standard) seeded from
// params.seed, or from std::random_device when unset. Every sampled token (temperature > 0) takes
// exactly one 64-bit output, mapped to [0, 1) with 53 bits, even when truncation leaves one
// candidate, so the stream does not depend on the logits; the same seed, logits and history give
// the same tokens on every platform with IEEE floats. Greedy steps (temperature == 0) consume no
// randomness.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "runtime/engine/request.h"
#include "runtime/sample/draw.h"
#include "runtime/sample/sampling_params.h"
#include "runtime/sample/token_constraint.h"

namespace kinfer {

// A probability distribution over token ids as a sparse list of (id, p), sorted by id, p > 0,
// summing to 1: what a Sampler draws from after penalties, truncation and temperature (greedy:
// one entry).
using TokenDistribution = std::vector<std::pair<int32_t, double>>;

// p(id) in `d` (binary search); 0 when absent.
double ProbabilityOf(const TokenDistribution& d, int32_t id);

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

  // The distribution Sample() would draw the next token from, without drawing (no randomness is
  // consumed). `logits` and `history` as for Sample(); logits are left holding the post-penalty
  // logits. Greedy (temperature <= 0): {argmax, 1}.
  void Distribution(std::span<float> logits, std::span<const int32_t> history,
                    TokenDistribution* out);

  // Draws a token from `d` (one PRNG output). REQUIRES: d non-empty.
  int32_t DrawFrom(const TokenDistribution& d);

  // Speculative verification of a draft token at this position (the rejection rule of Leviathan
  // et al. 2023 and Chen et al. 2023), so that accepted drafts plus the returned tokens follow
  // exactly the distribution Sample() gives:
  //   * greedy (temperature <= 0): the target's argmax; accepted iff it equals `draft`. Consumes no
  //     randomness, so greedy output is the same token for token with and without drafts.
  //   * a deterministic draft (`draft_dist` null: q = 1 at `draft`, as n-gram lookup): DrawToken's
  //     verification (runtime/sample/draw.h) with the params NextDraw(..., draft) gives, so that a
  //     backend that draws the row gets the same token from the same two PRNG outputs;
  //   * otherwise, with p this sampler's distribution (as Distribution()) and q the draft's
  //     (`draft_dist`): accept `draft` with probability min(1, p(draft) / q(draft)); else return
  //     a token drawn from the residual max(0, p - q), renormalised.
  //   Unless greedy, two PRNG outputs, the test's then the residual draw's, whether or not the
  //   draft is accepted (SkipDraws below keeps a stream whose later rows went unused in step).
  // *accepted says which happened; the returned token is `draft` when accepted. lp as Sample().
  int32_t Verify(std::span<float> logits, std::span<const int32_t> history, int32_t draft,
                 const TokenDistribution* draft_dist, bool* accepted, TokenLogprob* lp);

  // True when Sample() reads nothing but the raw logits, the history and, unless greedy, one
  // PRNG output: no constraint (a logit bias and penalties are fine: the draw lists them,
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
  // This request's draw settings (uniform 0; logprobs as asked, logprobs_out null).
  DrawParams draw_params() const;
  // draw_params() with the uniform the next Sample() would take, consumed (one PRNG output;
  // none when greedy). For a plain draw, DrawToken(logits, NextDraw()) is what Sample(logits)
  // would have returned, and the stream goes on as if it had been called. With draft >= 0, the
  // row verifies that deterministic draft token (DrawParams::draft): unless greedy, two PRNG
  // outputs, accept_uniform's then uniform's, as Verify takes them.
  DrawParams NextDraw(int32_t draft = -1);
  // NextDraw() with the logit bias and penalties as entries a backend applies
  // (LogitAdjustments, runtime/sample/penalties.h): `before_input` is the history before the
  // row's input token (the backend counts that one), the entries are appended to *adjust, and
  // the returned params' adjust span is left empty for the caller to point at them. For a plain
  // draw, DrawToken on the row after ApplyLogitAdjustments is what Sample(row, history) would
  // have returned (with `banned`'s logits set to -infinity first: LogitAdjustments').
  // draft as NextDraw(draft).
  DrawParams NextDraw(std::span<const int32_t> before_input, int32_t n_vocab,
                      std::vector<LogitAdjust>* adjust, std::span<const int32_t> banned = {},
                      int32_t draft = -1);

  // Moves the PRNG past n draws that were planned but not taken (none when greedy): Verify's
  // two outputs per draft row not reached and Sample's one for the row after the draft, so that
  // a verification walk that stops early leaves the stream where drawing every row (a backend's
  // NextDraw per row) leaves it.
  void SkipDraws(int n);

  const SamplingParams& params() const { return params_; }

 private:
  // Fills lp from the post-penalty logits.
  void FillLogprobs(std::span<const float> logits, int32_t chosen, TokenLogprob* lp);
  // The survivors' probabilities at params_.temperature, into out (sorted by id).
  void SurvivorDistribution(TokenDistribution* out);
  // A uniform double in [0, 1) from one PRNG output.
  double Uniform01();
  // DrawFrom's pick with a given uniform in [0, 1).
  static int32_t DrawWith(const TokenDistribution& d, double uniform);

  // The logits before truncation: AdjustLogits, then the constraint's mask.
  void Adjust(std::span<float> logits, std::span<const int32_t> history);
  // Passes the chosen token to the constraint.
  int32_t Chose(int32_t token);

  SamplingParams params_;
  std::unique_ptr<TokenConstraint> constraint_;
  std::mt19937_64 rng_;
  // Scratch reused across steps: (logit, id) pairs of the tokens still in the running.
  DrawCandidates candidates_;
  std::vector<double> probs_;
};

}  // namespace kinfer
