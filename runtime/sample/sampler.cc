#include "runtime/sample/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

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
      rng_(params.seed.has_value() ? *params.seed : RandomSeed()) {}

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

DrawParams Sampler::NextDraw(int32_t draft) {
  DrawParams d = draw_params();
  d.draft = draft;
  if (d.temperature > 0.0f) {
    if (draft >= 0) d.accept_uniform = Uniform01();  // the test's, then the draw's
    d.uniform = Uniform01();
  }
  return d;
}

DrawParams Sampler::NextDraw(std::span<const int32_t> before_input, int32_t n_vocab,
                             std::vector<LogitAdjust>* adjust, std::span<const int32_t> banned,
                             int32_t draft) {
  DrawParams d = NextDraw(draft);
  LogitAdjustments(params_, before_input, n_vocab, adjust, &d, banned);
  return d;
}

void Sampler::SkipDraws(int n) {
  if (params_.temperature > 0.0f && n > 0) rng_.discard(static_cast<unsigned long long>(n));
}

double Sampler::Uniform01() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history,
                        TokenLogprob* lp) {
  assert(!logits.empty());
  Adjust(logits, history);

  const int32_t chosen = DrawToken(logits, NextDraw(), &candidates_, &probs_);
  if (params_.logprobs >= 0 && lp != nullptr) FillLogprobs(logits, chosen, lp);
  return Chose(chosen);
}

double ProbabilityOf(const TokenDistribution& d, int32_t id) {
  auto it =
      std::lower_bound(d.begin(), d.end(), id,
                       [](const std::pair<int32_t, double>& e, int32_t v) { return e.first < v; });
  return it != d.end() && it->first == id ? it->second : 0.0;
}

void Sampler::SurvivorDistribution(TokenDistribution* out) {
  const auto& c = candidates_;
  out->clear();
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const auto& e : c) max_logit = std::max(max_logit, e.first);
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  double total = 0.0;
  for (const auto& [logit, id] : c) {
    const double p = std::exp(static_cast<double>(logit - max_logit) * inv_t);
    if (p > 0.0) {
      out->emplace_back(id, p);
      total += p;
    }
  }
  for (auto& e : *out) e.second /= total;
  std::sort(out->begin(), out->end());
}

void Sampler::Distribution(std::span<float> logits, std::span<const int32_t> history,
                           TokenDistribution* out) {
  assert(!logits.empty());
  Adjust(logits, history);
  if (params_.temperature <= 0.0f) {
    out->assign(1, {ArgmaxLowestId(logits), 1.0});
    return;
  }
  FillCandidates(logits, draw_params(), &candidates_);
  TruncateCandidates(draw_params(), &candidates_);
  SurvivorDistribution(out);
}

int32_t Sampler::DrawFrom(const TokenDistribution& d) { return DrawWith(d, Uniform01()); }

int32_t Sampler::DrawWith(const TokenDistribution& d, double uniform) {
  assert(!d.empty());
  double total = 0.0;
  for (const auto& e : d) total += e.second;
  const double u = uniform * total;
  double cum = 0.0;
  for (const auto& [id, p] : d) {
    cum += p;
    if (u < cum) return id;
  }
  for (size_t i = d.size(); i-- > 0;) {
    if (d[i].second > 0.0) return d[i].first;
  }
  return d[0].first;
}

int32_t Sampler::Verify(std::span<float> logits, std::span<const int32_t> history, int32_t draft,
                        const TokenDistribution* draft_dist, bool* accepted, TokenLogprob* lp) {
  assert(!logits.empty());
  int32_t chosen;
  if (params_.temperature <= 0.0f) {
    Adjust(logits, history);
    chosen = ArgmaxLowestId(logits);
    *accepted = chosen == draft;
  } else if (draft_dist == nullptr) {
    Adjust(logits, history);
    chosen = DrawToken(logits, NextDraw(draft), &candidates_, &probs_);
    *accepted = chosen == draft;
  } else {
    thread_local TokenDistribution p;
    Distribution(logits, history, &p);
    const double test = Uniform01(), draw = Uniform01();
    const double px = ProbabilityOf(p, draft);
    const double qx = ProbabilityOf(*draft_dist, draft);
    // Accept with probability min(1, p/q): u < p/q  <=>  u * q < p (q > 0 for a drawn draft).
    *accepted = px > 0.0 && (qx <= 0.0 || test * qx < px);
    if (*accepted) {
      chosen = draft;
    } else {
      thread_local TokenDistribution residual;
      residual.clear();
      for (const auto& [id, pi] : p) {
        const double qi = ProbabilityOf(*draft_dist, id);
        if (pi > qi) residual.emplace_back(id, pi - qi);
      }
      // p == q leaves nothing (and then rejection cannot happen); fall back to p itself.
      chosen = DrawWith(residual.empty() ? p : residual, draw);
    }
  }
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
