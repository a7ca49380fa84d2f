#include "runtime/sample/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <random>

#include "runtime/sample/penalties.h"

namespace kinfer {
namespace {

// Best first: larger logit, then lower id (the order of the logprobs' top list).
bool Better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, std::unique_ptr<TokenConstraint> constraint)
    : params_(params),
      constraint_(std::move(constraint)),
      seed_(params.seed.has_value() ? *params.seed : RandomSeed()) {}

void Sampler::Adjust(std::span<float> logits, std::span<const int32_t> history) {
  AdjustLogits(params_, history, logits);
  if (constraint_) constraint_->Mask(logits);
}

int32_t Sampler::Chose(int32_t token) {
  if (constraint_) constraint_->Accept(token);
  return token;
}

bool Sampler::IsPlainDraw() const { return constraint_ == nullptr; }

bool Sampler::MaskGoesWithTheDraw() const {
  return constraint_ != nullptr && constraint_->MasksAsBits();
}

std::span<const int32_t> Sampler::AppendMask(size_t n, std::vector<uint64_t>* bits) const {
  assert(MaskGoesWithTheDraw());
  constraint_->AppendAllowed(n, bits);
  return constraint_->fallback();
}

DrawParams Sampler::draw_params() const {
  DrawParams d;
  d.temperature = params_.temperature;
  d.top_k = params_.top_k;
  d.top_p = params_.top_p;
  d.min_p = params_.min_p;
  d.logprobs = params_.logprobs;
  return d;
}

DrawParams Sampler::NextDraw() {
  DrawParams d = draw_params();
  if (d.temperature > 0.0f) d.noise_key = DrawKey(seed_, index_);
  ++index_;
  return d;
}

DrawParams Sampler::NextDraw(std::span<const int32_t> before_input, int32_t n_vocab,
                             std::vector<LogitAdjust>* adjust, std::span<const int32_t> banned) {
  DrawParams d = NextDraw();
  LogitAdjustments(params_, before_input, n_vocab, adjust, &d, banned);
  return d;
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history,
                        TokenLogprob* lp) {
  assert(!logits.empty());
  Adjust(logits, history);

  const int32_t chosen = DrawToken(logits, NextDraw(), &candidates_);
  if (params_.logprobs >= 0 && lp != nullptr) FillLogprobs(logits, chosen, lp);
  return Chose(chosen);
}

void Sampler::FillLogprobs(std::span<const float> logits, int32_t chosen, TokenLogprob* lp) {
  TokenLogprobOf(logits, chosen, params_.logprobs, lp);
}

void DrawnLogprobsOf(std::span<const float> logits, int32_t token, int top, DrawnLogprobs* out) {
  thread_local TokenLogprob lp;
  TokenLogprobOf(logits, token, std::min(top, kMaxDrawnLogprobs), &lp);
  out->token = lp.token;
  out->logprob = lp.logprob;
  out->rank = lp.rank;
  out->n_top = static_cast<int32_t>(lp.top.size());
  for (size_t i = 0; i < lp.top.size(); ++i) {
    out->top_ids[i] = lp.top[i].token;
    out->top_logprobs[i] = lp.top[i].logprob;
  }
}

void FromDrawnLogprobs(const DrawnLogprobs& d, TokenLogprob* lp) {
  lp->token = d.token;
  lp->text.clear();
  lp->logprob = d.logprob;
  lp->rank = d.rank;
  lp->top.clear();
  const int n = std::clamp(d.n_top, 0, kMaxDrawnLogprobs);
  for (int i = 0; i < n; ++i) lp->top.push_back(TopLogprob{d.top_ids[i], std::string(), d.top_logprobs[i]});
}

void TokenLogprobOf(std::span<const float> logits, int32_t token, int top, TokenLogprob* lp) {
  float max_logit = -std::numeric_limits<float>::infinity();
  const std::pair<float, int32_t> mine{logits[static_cast<size_t>(token)], token};
  int rank = 1;
  for (size_t i = 0; i < logits.size(); ++i) {
    max_logit = std::max(max_logit, logits[i]);
    rank += Better({logits[i], static_cast<int32_t>(i)}, mine) ? 1 : 0;
  }
  lp->rank = rank;
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l - max_logit));
  const double log_z = static_cast<double>(max_logit) + std::log(total);

  lp->token = token;
  lp->text.clear();
  lp->logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(token)]) - log_z);
  lp->top.clear();
  if (top <= 0) return;

  const size_t n = std::min(logits.size(), static_cast<size_t>(top));
  // Keep the n best in a small sorted buffer: one pass over the vocabulary, no full copy.
  std::vector<std::pair<float, int32_t>> best;
  best.reserve(n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    std::pair<float, int32_t> e{logits[i], static_cast<int32_t>(i)};
    if (best.size() == n && !Better(e, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), e, Better), e);
    if (best.size() > n) best.pop_back();
  }
  lp->top.reserve(n);
  for (const auto& [logit, id] : best) {
    lp->top.push_back(
        TopLogprob{id, std::string(), static_cast<float>(static_cast<double>(logit) - log_z)});
  }
}

}  // namespace kinfer
