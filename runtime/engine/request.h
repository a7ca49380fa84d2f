// What a client submits to the Engine and what comes back on its stream. Plain data.
#pragma once

#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/sample/grammar.h"
#include "runtime/sample/sampling_params.h"

namespace kinfer {

struct GenerationRequest {
  std::vector<int32_t> prompt_tokens;  // REQUIRES: non-empty, every id < vocab size
  int max_tokens = 16;                 // generated tokens at most; > 0
  SamplingParams sampling;
  std::vector<std::string> stop;     // stop strings; matched text is not returned
  std::vector<int32_t> stop_tokens;  // extra stop ids (end-of-generation ids always stop)
  bool ignore_eos = false;           // when true, only max_tokens/stop strings end generation
  // vLLM's min_tokens: until this many tokens are generated, end-of-generation tokens and
  // stop_tokens are ruled out (their logits -inf; sampled on the host), and no stop string ends
  // the text (one must complete after the first min_tokens tokens), as vLLM.
  int min_tokens = 0;
  bool echo_special = false;  // render special tokens in the returned text
  int priority = 0;           // smaller is served first (the scheduler's class)
  uint64_t cache_salt = 0;    // prefix-cache tenant: different salts share no KV blocks
  // The request ends with DEADLINE_EXCEEDED once this passes (waiting or generating).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Speculative decoding: draft tokens verified per step at most. -1 = the server's default
  // (EngineOptions::spec), 0 = off; more than the server's maximum is clamped to it
  // (kSpeculativeServerMax: as many as the server allows).
  int speculative_tokens = -1;
  // OpenAI's response_format {"type": "json_object"}: the output is constrained to one JSON
  // object (runtime/sample/token_constraint.h); sampled on the host.
  bool json_object = false;
  // response_format json_schema, guided_json, guided_choice: the output is a sentence of this
  // grammar (token_constraint.h's GrammarConstraint; sampled on the host). Null: none.
  std::shared_ptr<const Grammar> grammar;
  // The prompt's own logprobs (completions' echo with logprobs): -1 = off; else each prompt
  // token after the first gets its logprob given the tokens before it, with this many
  // alternatives. Such a request neither reads nor feeds the prefix cache (every position is
  // computed).
  int prompt_logprobs = -1;
};
inline constexpr int kSpeculativeServerMax = 1 << 30;

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
// "stop", "length", "cancelled", "error"; "" for kNone.
const char* FinishReasonName(FinishReason r);

struct TopLogprob {
  int32_t token = 0;
  std::string text;  // the token's bytes (may be a partial UTF-8 sequence)
  float logprob = 0.0f;
};

struct TokenLogprob {
  int32_t token = 0;
  std::string text;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;  // best first; empty unless sampling.logprobs > 0
  int rank = 0;                 // 1 + the tokens more likely than it (ties: lower ids first)
};

// One delta on a request's stream. The final event has finish != kNone.
struct StreamEvent {
  std::string text;             // new text; never splits a UTF-8 sequence; stop text held back
  std::vector<int32_t> tokens;  // tokens generated since the previous event
  std::vector<TokenLogprob> logprobs;  // one per token when requested
  // With GenerationRequest::prompt_logprobs, on the event of the first generated token: one per
  // prompt token after the first, in order.
  std::vector<TokenLogprob> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  Status error;  // set when finish == kError
  // Filled on the first event: seconds from Submit() until the engine started the request.
  double queue_seconds = -1.0;
  // Filled on the final event:
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // of those, served from the prefix cache (at first admission)
  int completion_tokens = 0;
};

// Makes *into the one event a reader would see for *into followed by `next`: text, tokens and
// logprobs in order; prompt_logprobs and queue_seconds from the first that has them; the finish,
// error and counts from `next`. (EngineOptions::stream_interval sends events merged this way.)
inline void AppendStreamEvent(StreamEvent* into, StreamEvent next) {
  into->text += next.text;
  into->tokens.insert(into->tokens.end(), next.tokens.begin(), next.tokens.end());
  into->logprobs.insert(into->logprobs.end(), std::make_move_iterator(next.logprobs.begin()),
                        std::make_move_iterator(next.logprobs.end()));
  if (into->prompt_logprobs.empty()) into->prompt_logprobs = std::move(next.prompt_logprobs);
  if (into->queue_seconds < 0) into->queue_seconds = next.queue_seconds;
  into->finish = next.finish;
  into->error = std::move(next.error);
  into->prompt_tokens = next.prompt_tokens;
  into->cached_prompt_tokens = next.cached_prompt_tokens;
  into->completion_tokens = next.completion_tokens;
}

}  // namespace kinfer
