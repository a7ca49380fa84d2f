// Validation of client-supplied sampling settings (OpenAI's ranges, with llama.cpp's extensions).
//
// Thread safety: a pure function.
#pragma once

#include "common/status.h"
#include "runtime/sample/sampling_params.h"

namespace kinfer {

// Largest `logprobs` (top alternatives per token) a request may ask for, as OpenAI's top_logprobs.
inline constexpr int kMaxLogprobs = 20;

// Returns `params` normalised, or INVALID_ARGUMENT naming the first field out of range:
//   temperature         in [0, 2]            (0 = greedy)
//   top_k               >= 0, or -1 (vLLM's "off", normalised to 0)
//   top_p               in [0, 1]            (0 keeps only the most likely token, as llama.cpp)
//   min_p               in [0, 1]
//   repetition_penalty  > 0 and finite       (1 = off)
//   frequency_penalty   in [-2, 2]
//   presence_penalty    in [-2, 2]
//   penalty_last_n      >= -1                (-1 = the whole history)
//   logprobs            in [-1, kMaxLogprobs] (-1 = off)
//   logit_bias          every bias in [-100, 100] (as OpenAI); the message starts "logit_bias["
// NaN is out of every range.
StatusOr<SamplingParams> ValidateSamplingParams(SamplingParams params);

}  // namespace kinfer
