#include "runtime/sample/penalties.h"

#include <algorithm>
#include <limits>
#include <vector>

namespace kinfer {

void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> history,
                    std::span<float> logits) {
  const bool repeat = params.repetition_penalty != 1.0f;
  const bool freq = params.frequency_penalty != 0.0f;
  const bool presence = params.presence_penalty != 0.0f;
  if (!repeat && !freq && !presence) return;
  if (params.penalty_last_n == 0 || history.empty()) return;

  size_t n = history.size();
  if (params.penalty_last_n > 0) n = std::min(n, static_cast<size_t>(params.penalty_last_n));
  // The window is small (64 by default): sorting a copy is cheaper than a hash map.
  std::vector<int32_t> window(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
  std::sort(window.begin(), window.end());

  const auto vocab = static_cast<int64_t>(logits.size());
  for (size_t i = 0; i < window.size();) {
    const int32_t tok = window[i];
    size_t j = i;
    while (j < window.size() && window[j] == tok) ++j;
    const auto count = static_cast<float>(j - i);
    i = j;
    if (tok < 0 || tok >= vocab) continue;
    float& l = logits[static_cast<size_t>(tok)];
    if (repeat) l = l > 0.0f ? l / params.repetition_penalty : l * params.repetition_penalty;
    l -= count * params.frequency_penalty + params.presence_penalty;
  }
}

namespace {

bool PenaltiesOn(const SamplingParams& params) {
  return params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f ||
         params.presence_penalty != 0.0f;
}

// One token's logit after its bias and its count's penalties, in ApplyLogitBias's and
// ApplyPenalties's arithmetic.
void AdjustOne(const DrawParams& p, float bias, int32_t count, float& l) {
  if (bias != 0.0f) l += bias;
  if (count <= 0) return;
  if (p.repetition != 1.0f) l = l > 0.0f ? l / p.repetition : l * p.repetition;
  l -= static_cast<float>(count) * p.frequency + p.presence;
}

}  // namespace

size_t LogitAdjustments(const SamplingParams& params, std::span<const int32_t> before_input,
                        int32_t n_vocab, std::vector<LogitAdjust>* out, DrawParams* p,
                        std::span<const int32_t> banned) {
  p->repetition = params.repetition_penalty;
  p->frequency = params.frequency_penalty;
  p->presence = params.presence_penalty;
  const bool penalties = PenaltiesOn(params) && params.penalty_last_n != 0;
  p->count_input = penalties;
  // The window less the input token: the last penalty_last_n - 1 tokens before it.
  size_t n = 0;
  if (penalties) {
    n = before_input.size();
    if (params.penalty_last_n > 0) {
      n = std::min(n, static_cast<size_t>(params.penalty_last_n - 1));
    }
  }
  const size_t first = out->size();
  for (size_t i = before_input.size() - n; i < before_input.size(); ++i) {
    const int32_t t = before_input[i];
    if (t >= 0 && t < n_vocab) out->push_back(LogitAdjust{t, 0.0f, 1});
  }
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= 0 && id < n_vocab) out->push_back(LogitAdjust{id, bias, 0});
  }
  constexpr float kBanned = -std::numeric_limits<float>::infinity();
  for (const int32_t id : banned) {
    if (id >= 0 && id < n_vocab) out->push_back(LogitAdjust{id, kBanned, 0});
  }
  // Sort by id and merge each id's entries into one (logit_bias's ids are unique).
  const auto begin = out->begin() + static_cast<std::ptrdiff_t>(first);
  std::sort(begin, out->end(),
            [](const LogitAdjust& a, const LogitAdjust& b) { return a.id < b.id; });
  auto w = begin;
  for (auto r = begin; r != out->end(); ++r) {
    if (w != begin && (w - 1)->id == r->id) {
      (w - 1)->count += r->count;
      if (r->bias != 0.0f && (w - 1)->bias != kBanned) (w - 1)->bias = r->bias;
    } else {
      *w++ = *r;
    }
  }
  out->erase(w, out->end());
  return out->size() - first;
}

void ApplyLogitAdjustments(const DrawParams& p, int32_t input_token, std::span<float> logits) {
  const auto vocab = static_cast<int64_t>(logits.size());
  const bool input = p.count_input && input_token >= 0 && input_token < vocab;
  bool input_listed = false;
  for (const LogitAdjust& e : p.adjust) {
    if (e.id < 0 || e.id >= vocab) continue;
    const bool is_input = input && e.id == input_token;
    input_listed = input_listed || is_input;
    AdjustOne(p, e.bias, e.count + (is_input ? 1 : 0), logits[static_cast<size_t>(e.id)]);
  }
  if (input && !input_listed) AdjustOne(p, 0.0f, 1, logits[static_cast<size_t>(input_token)]);
}

void ApplyLogitBias(const SamplingParams& params, std::span<float> logits) {
  const auto vocab = static_cast<int64_t>(logits.size());
  for (const auto& [id, bias] : params.logit_bias) {
    if (id >= 0 && id < vocab) logits[static_cast<size_t>(id)] += bias;
  }
}

}  // namespace kinfer
