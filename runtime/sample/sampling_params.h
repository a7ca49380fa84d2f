// Per-request sampling settings, with OpenAI/llama.cpp semantics. Plain data.
#pragma once

#include <cstdint>
#include <optional>

namespace kinfer {

struct SamplingParams {
  float temperature = 1.0f;        // 0 = greedy (argmax)
  int top_k = 0;                   // 0 = off
  float top_p = 1.0f;              // 1 = off
  float min_p = 0.0f;              // 0 = off
  float repetition_penalty = 1.0f; // 1 = off (llama.cpp repeat_penalty over the last 64 tokens)
  float frequency_penalty = 0.0f;  // OpenAI: subtract count * value
  float presence_penalty = 0.0f;   // OpenAI: subtract value once present
  int penalty_last_n = 64;         // window for the penalties; -1 = whole history
  std::optional<uint64_t> seed;    // same seed + same request -> same output
  int logprobs = -1;               // -1 = off; 0 = chosen token only; N = also the top N
};

}  // namespace kinfer
