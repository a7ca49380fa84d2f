// Per-request sampling settings, with OpenAI/llama.cpp semantics. Plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace kinfer {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax)
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off (llama.cpp repeat_penalty over the last 64 tokens)
  float frequency_penalty = 0.0f;   // OpenAI: subtract count * value
  float presence_penalty = 0.0f;    // OpenAI: subtract value once present
  int penalty_last_n = 64;          // window for the penalties; -1 = whole history
  std::optional<uint64_t> seed;     // same seed + same request -> same output
  int logprobs = -1;                // -1 = off; 0 = chosen token only; N = also the top N
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) pairs, sorted by id, ids unique; each
  // bias is added to its token's logit before the penalties (llama.cpp's and vLLM's order).
  // Empty = off.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

}  // namespace kinfer
