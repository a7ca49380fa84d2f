#include "runtime/sample/sampling_validation.h"

#include <cmath>
#include <string>

namespace kinfer {
namespace {

// NaN fails both comparisons, so it is out of range.
bool InRange(float v, float lo, float hi) { return v >= lo && v <= hi; }

Status OutOfBounds(const char* name, float v, const char* range) {
  return InvalidArgument(std::string(name) + " must be in " + range + ", got " + std::to_string(v));
}

}  // namespace

StatusOr<SamplingParams> ValidateSamplingParams(SamplingParams p) {
  if (!InRange(p.temperature, 0.0f, 2.0f))
    return OutOfBounds("temperature", p.temperature, "[0, 2]");
  if (p.top_k == -1) p.top_k = 0;
  if (p.top_k < 0) {
    return InvalidArgument("top_k must be >= 0 (or -1 for off), got " + std::to_string(p.top_k));
  }
  if (!InRange(p.top_p, 0.0f, 1.0f)) return OutOfBounds("top_p", p.top_p, "[0, 1]");
  if (!InRange(p.min_p, 0.0f, 1.0f)) return OutOfBounds("min_p", p.min_p, "[0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return InvalidArgument("repetition_penalty must be > 0 and finite, got " +
                           std::to_string(p.repetition_penalty));
  }
  if (!InRange(p.frequency_penalty, -2.0f, 2.0f)) {
    return OutOfBounds("frequency_penalty", p.frequency_penalty, "[-2, 2]");
  }
  if (!InRange(p.presence_penalty, -2.0f, 2.0f)) {
    return OutOfBounds("presence_penalty", p.presence_penalty, "[-2, 2]");
  }
  if (p.penalty_last_n < -1) {
    return InvalidArgument("penalty_last_n must be >= -1, got " + std::to_string(p.penalty_last_n));
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return InvalidArgument("logprobs must be in [0, " + std::to_string(kMaxLogprobs) +
                           "] (or -1 for off), got " + std::to_string(p.logprobs));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (!InRange(bias, -100.0f, 100.0f)) {
      return InvalidArgument("logit_bias[" + std::to_string(id) + "] must be in [-100, 100], got " +
                             std::to_string(bias));
    }
  }
  return p;
}

}  // namespace kinfer
