#include "runtime/sample/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "runtime/sample/penalties.h"

namespace kinfer {
namespace {

// Best first: larger logit, then lower id. A strict weak order for non-NaN logits.
bool Better(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

int32_t Argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lowest id
  }
  return static_cast<int32_t>(best);
}

uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

}  // namespace

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed.has_value() ? *params.seed : RandomSeed()) {}

bool Sampler::IsPlainArgmax() const {
  return params_.temperature <= 0.0f && params_.repetition_penalty == 1.0f &&
         params_.frequency_penalty == 0.0f && params_.presence_penalty == 0.0f &&
         params_.logprobs < 0;
}

double Sampler::Uniform01() {
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

int32_t Sampler::Sample(std::span<float> logits, std::span<const int32_t> history,
                        TokenLogprob* lp) {
  assert(!logits.empty());
  ApplyPenalties(params_, history, logits);

  int32_t chosen;
  if (params_.temperature <= 0.0f) {
    chosen = Argmax(logits);
  } else {
    candidates_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      candidates_[i] = {logits[i], static_cast<int32_t>(i)};
    }
    Truncate();
    chosen = Draw();
  }

  if (params_.logprobs >= 0 && lp != nullptr) FillLogprobs(logits, chosen, lp);
  return chosen;
}

void Sampler::Truncate() {
  auto& c = candidates_;
  bool sorted = false;  // true when c is in Better order

  // top-k. Ties at the cut go to the lowest ids, so top_k == 1 is exactly the greedy choice.
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < c.size()) {
    const auto k = static_cast<size_t>(params_.top_k);
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end(), Better);
    c.resize(k);
    sorted = true;
  }

  // top-p over the temperature-1 probabilities of what is left.
  if (params_.top_p < 1.0f && c.size() > 1) {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const auto& e : c) max_logit = std::max(max_logit, e.first);
    double total = 0.0;
    for (const auto& e : c) total += std::exp(static_cast<double>(e.first - max_logit));
    const double target = static_cast<double>(params_.top_p) * total;

    // The nucleus is usually far smaller than the vocabulary: sort a growing prefix instead of all.
    size_t sorted_prefix = sorted ? c.size() : 0;
    size_t keep = 0;
    double cum = 0.0;
    while (true) {
      if (keep == sorted_prefix) {
        const size_t want = std::min(c.size(), std::max<size_t>(64, sorted_prefix * 4));
        std::partial_sort(c.begin() + static_cast<std::ptrdiff_t>(sorted_prefix),
                          c.begin() + static_cast<std::ptrdiff_t>(want), c.end(), Better);
        sorted_prefix = want;
      }
      cum += std::exp(static_cast<double>(c[keep].first - max_logit));
      ++keep;  // the token that crosses the threshold is kept, and at least one always is
      if (cum >= target || keep == c.size()) break;
    }
    c.resize(keep);
  }

  // min-p: p_i >= min_p * p_max  <=>  logit_i >= max_logit + log(min_p).
  if (params_.min_p > 0.0f && c.size() > 1) {
    float max_logit = -std::numeric_limits<float>::infinity();
    for (const auto& e : c) max_logit = std::max(max_logit, e.first);
    const float threshold = max_logit + std::log(params_.min_p);
    std::erase_if(c, [threshold](const auto& e) { return e.first < threshold; });
  }
}

int32_t Sampler::Draw() {
  const auto& c = candidates_;
  assert(!c.empty());
  if (c.size() == 1) return c[0].second;
  float max_logit = -std::numeric_limits<float>::infinity();
  for (const auto& e : c) max_logit = std::max(max_logit, e.first);
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  probs_.resize(c.size());
  double total = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double p = std::exp(static_cast<double>(c[i].first - max_logit) * inv_t);
    probs_[i] = p;
    total += p;
  }
  const double u = Uniform01() * total;
  double cum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += probs_[i];
    if (u < cum) return c[i].second;
  }
  // Rounding left u at or past the end: the last token with non-zero probability.
  for (size_t i = c.size(); i-- > 0;) {
    if (probs_[i] > 0.0) return c[i].second;
  }
  return c[0].second;
}

double ProbabilityOf(const TokenDistribution& d, int32_t id) {
  auto it = std::lower_bound(d.begin(), d.end(), id,
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
  ApplyPenalties(params_, history, logits);
  if (params_.temperature <= 0.0f) {
    out->assign(1, {Argmax(logits), 1.0});
    return;
  }
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  Truncate();
  SurvivorDistribution(out);
}

int32_t Sampler::DrawFrom(const TokenDistribution& d) {
  assert(!d.empty());
  double total = 0.0;
  for (const auto& e : d) total += e.second;
  const double u = Uniform01() * total;
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
    ApplyPenalties(params_, history, logits);
    chosen = Argmax(logits);
    *accepted = chosen == draft;
  } else {
    thread_local TokenDistribution p;
    Distribution(logits, history, &p);
    const double px = ProbabilityOf(p, draft);
    const double qx = draft_dist != nullptr ? ProbabilityOf(*draft_dist, draft) : 1.0;
    // Accept with probability min(1, p/q): u < p/q  <=>  u * q < p (q > 0 for a drawn draft).
    *accepted = px > 0.0 && (qx <= 0.0 || Uniform01() * qx < px);
    if (*accepted) {
      chosen = draft;
    } else {
      thread_local TokenDistribution residual;
      residual.clear();
      for (const auto& [id, pi] : p) {
        const double qi = draft_dist != nullptr ? ProbabilityOf(*draft_dist, id)
                                                : (id == draft ? 1.0 : 0.0);
        if (pi > qi) residual.emplace_back(id, pi - qi);
      }
      // p == q leaves nothing (and then rejection cannot happen); fall back to p itself.
      chosen = DrawFrom(residual.empty() ? p : residual);
    }
  }
  if (params_.logprobs >= 0 && lp != nullptr) FillLogprobs(logits, chosen, lp);
  return chosen;
}

void Sampler::FillLogprobs(std::span<const float> logits, int32_t chosen, TokenLogprob* lp) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float l : logits) max_logit = std::max(max_logit, l);
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l - max_logit));
  const double log_z = static_cast<double>(max_logit) + std::log(total);

  lp->token = chosen;
  lp->text.clear();
  lp->logprob = static_cast<float>(static_cast<double>(logits[static_cast<size_t>(chosen)]) - log_z);
  lp->top.clear();
  if (params_.logprobs <= 0) return;

  const size_t n = std::min(logits.size(), static_cast<size_t>(params_.logprobs));
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
    lp->top.push_back(TopLogprob{id, std::string(),
                                 static_cast<float>(static_cast<double>(logit) - log_z)});
  }
}

}  // namespace kinfer
