// The OpenAI-compatible wire protocol of kinfer-runtime, as pure functions: request JSON ->
// validated ParsedRequest (-> GenerationRequest once the prompt is tokenized), and engine results
// -> response JSON (whole responses and SSE chunks). No HTTP, no model, no tokenizer: everything
// here is tested in tests/runtime/server/openai_protocol_test.cc with plain strings.
//
// Error convention: Parse* return a non-OK Status (INVALID_ARGUMENT / NOT_FOUND / OUT_OF_RANGE)
// and fill *detail with the OpenAI "param" (the offending field) and "code" (e.g.
// "context_length_exceeded"); the HTTP edge turns that into a JSON error body with
// HttpStatusFor() (common/http_errors.h), the only Status -> HTTP mapping.
//
// Thread safety: pure functions over values; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>

#include "common/status.h"
#include "runtime/engine/request.h"
#include "runtime/sample/sampling_params.h"

namespace kinfer {

// The "param" and "code" of an OpenAI error body; empty = null.
struct ErrorDetail {
  std::string param;
  std::string code;
};

// One chat turn for the chat template (content parts already joined). A client's "tool" turn
// and an assistant turn's tool_calls arrive here rewritten in the generic tool format
// (tool_calls.h): a "user" turn and the assistant's JSON.
struct ChatTurn {
  std::string role;  // "system", "developer", "user" or "assistant"
  std::string content;
};

// Function calling (docs/api.md, "Tools"): the request's tools and what it lets the model do.
struct ToolSpec {
  std::string name;  // 1..64 of [A-Za-z0-9_-], unique in the request
  std::string description;
  nlohmann::ordered_json parameters;  // a JSON Schema in the client's key order
};
enum class ToolChoice {
  kNone,      // no tools given, or tool_choice "none": the model answers in text
  kAuto,      // "auto" (the default with tools): a call or an answer, the model's choice
  kRequired,  // "required": one or more calls
  kFunction,  // {"type": "function", "function": {"name": ...}}: a call of that tool
};
struct ToolRequest {
  std::vector<ToolSpec> tools;
  ToolChoice choice = ToolChoice::kNone;
  std::string function;  // kFunction: the tool's name
  bool parallel = true;  // parallel_tool_calls: more than one call in an answer
  // response_format json_schema (its schema) or json_object ({"type": "object"}) beside tools:
  // a direct answer ("auto") is a JSON value under it instead of text.
  std::optional<nlohmann::ordered_json> response_schema;
  bool active() const { return choice != ToolChoice::kNone; }
};

enum class ApiKind { kChat, kCompletion };

// One prompt of a completions request: text, or token ids (unchecked against the vocabulary).
struct CompletionPrompt {
  std::string text;          // !is_ids: non-empty
  std::vector<int32_t> ids;  // is_ids: non-empty
  bool is_ids = false;
};

// A validated /v1/chat/completions or /v1/completions request, before tokenization.
struct ParsedRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;               // "" when the client sent none (the served model is used)
  std::vector<ChatTurn> messages;  // kChat: non-empty
  // kCompletion: 1..kMaxPrompts prompts (OpenAI's batch form: a list of strings or of id
  // lists); choice k * n + j of the answer is prompt k's choice j.
  std::vector<CompletionPrompt> prompts;
  int n = 1;                      // choices, 1..kMaxChoices: n generations of each prompt
  // n..kMaxChoices generations of each prompt, of which the n with the highest mean token
  // logprob are returned (OpenAI's legacy best_of; not streamed when above n).
  int best_of = 1;
  int generations() const { return best_of > n ? best_of : n; }
  std::optional<int> max_tokens;  // max_completion_tokens, else max_tokens; >= 1 (per choice);
                                  // 0 only with echo (score the prompt)
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // and vLLM's continuous_usage_stats: usage on every chunk
  SamplingParams sampling;        // validated (ValidateSamplingParams); logprobs set below
  std::vector<std::string> stop;  // <= 4, each non-empty
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // vLLM's: ids that end generation (checked later)
  int min_tokens = 0;                   // vLLM's: no end before this many tokens (<= max_tokens)
  bool logprobs = false;                // report logprobs of the chosen tokens
  int top_logprobs = 0;                 // and this many alternatives per token
  // vLLM's `priority`: smaller is served first (the batching scheduler's class; docs/api.md).
  std::optional<int> priority;
  // llama.cpp's `cache_prompt`: false = this request neither reads nor feeds the prefix cache.
  bool cache_prompt = true;
  // Speculative decoding: `speculative` true / false, or {"n_max": N} (also llama.cpp's flat
  // "speculative.n_max": N); as GenerationRequest::speculative_tokens (true = the server's max).
  int speculative_tokens = -1;
  // response_format {"type": "json_object"}: the output is one JSON object.
  bool json_object = false;
  ToolRequest tools;  // chat only; when active, `grammar` holds the tool-call answer
  // response_format json_schema (or vLLM's guided_json / guided_choice): the output is a sentence
  // of this grammar (runtime/sample/json_schema_grammar.h). Null when there is none.
  std::shared_ptr<const Grammar> grammar;
  // Completions' echo: the prompt is returned before the completion (with logprobs: the prompt
  // tokens' too, the first one's null). Chat's (vLLM's): when the last message is the
  // assistant's, its text comes back before the generated text.
  bool echo = false;
  // Chat (vLLM's): end the prompt with the assistant's generation prompt (default), or continue
  // the last assistant turn as it is (a prefill; then add_generation_prompt is false).
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  // vLLM's prompt_logprobs (0..kMaxLogprobs alternatives; -1: not asked): each prompt token's
  // logprob and rank after the ones before it (PromptLogprobsJson). Not with stream.
  int prompt_logprobs = -1;
};

// The scheduling class of a request: the body's `priority` when given, else the
// `x-kinfer-priority` header (the sidecar's class names critical = 0, standard = 1, batch = 2, or
// an integer), else kDefaultPriority. INVALID_ARGUMENT (param "x-kinfer-priority") for a header
// that is neither.
inline constexpr int kDefaultPriority = 1;  // "standard"
StatusOr<int> ResolvePriority(const ParsedRequest& req, std::string_view header,
                              ErrorDetail* detail);

// Limits.
inline constexpr int kMaxStopSequences = 4;       // as OpenAI
inline constexpr int kMaxLogitBias = 1024;        // logit_bias entries per request
inline constexpr int kMaxChoices = 128;           // n, as OpenAI
inline constexpr int kMaxPrompts = 64;            // prompts of one completions request
inline constexpr int kMaxStopTokenIds = 64;       // stop_token_ids per request
inline constexpr size_t kMaxGuidedChoices = 256;  // guided_choice strings per request
// When a request gives no max_tokens it may generate up to the context window (like vLLM), but
// no more than this many tokens, so that a forgotten limit cannot hold a sequence for minutes.
inline constexpr int kDefaultMaxTokensCap = 2048;

// Parse and validate a request body (UTF-8 JSON). INVALID_ARGUMENT with *detail->param naming
// the field for malformed JSON, wrong types, missing or empty messages/prompt, values out of
// range and unsupported features (best_of > 1, echo on chat, tools,
// response_format other than text, json_object and json_schema, a json_schema that uses what
// json_schema_grammar.h refuses, suffix, stream_options without stream).
StatusOr<ParsedRequest> ParseChatRequest(std::string_view body, ErrorDetail* detail);
StatusOr<ParsedRequest> ParseCompletionRequest(std::string_view body, ErrorDetail* detail);

// INVALID_ARGUMENT (param "logit_bias" or "stop_token_ids") when a token id the request names is
// not below `vocab_size`.
Status CheckTokenIds(const ParsedRequest& req, int vocab_size, ErrorDetail* detail);
// INVALID_ARGUMENT (param "min_tokens") when min_tokens exceeds the resolved max_tokens.
Status CheckMinTokens(const ParsedRequest& req, int max_tokens, ErrorDetail* detail);

// NOT_FOUND (param "model", code "model_not_found") when the request names a model other than
// `served_model`; OK when it names none.
Status CheckModel(const ParsedRequest& req, std::string_view served_model, ErrorDetail* detail);

// The generation budget for a prompt of `prompt_tokens` in a window of `context_length`:
// the requested max_tokens, or (absent) min(context_length - prompt_tokens, kDefaultMaxTokensCap).
// OUT_OF_RANGE (code "context_length_exceeded", param "messages"/"prompt" or "max_tokens") with a
// message naming both numbers when the prompt leaves no room or prompt + max_tokens > context.
StatusOr<int> ResolveMaxTokens(const ParsedRequest& req, int prompt_tokens, int context_length,
                               ErrorDetail* detail);

// x-kinfer-tenant -> the prefix-cache salt: 0 (the shared cache) when empty, else a number of the
// name's own, given the first time it is seen, with the top bits 01 (never 0, never one of the
// engine's private salts, whose top bit is 1). No two names share one, however they are chosen.
// Thread-safe (a process-wide table of at most 65536 names; past that it starts over, and a name
// seen again gets a new number: a cold cache, never another's).
uint64_t CacheSaltFor(std::string_view tenant);
// x-kinfer-timeout ("500ms", "2s", "1m", or a number of seconds) -> how long the client waits;
// nullopt when empty. INVALID_ARGUMENT (param "x-kinfer-timeout") for anything else, zero or
// negative.
StatusOr<std::optional<std::chrono::milliseconds>> ParseRequestTimeout(std::string_view header,
                                                                       ErrorDetail* detail);

// The engine request for a tokenized prompt. REQUIRES: max_tokens from ResolveMaxTokens.
GenerationRequest ToGenerationRequest(const ParsedRequest& req, std::vector<int32_t> prompt,
                                      int max_tokens);

// /tokenize {content, add_special=false, parse_special=true, with_pieces=false} (llama.cpp).
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool parse_special = true;
  bool with_pieces = false;
};
StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body, ErrorDetail* detail);
// /detokenize {tokens: [int...]}; ids are range-checked by the caller (it knows the vocabulary).
StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(std::string_view body, ErrorDetail* detail);
// POST /cancel {"request_id": "..."} -> the id (a non-empty string of at most 256 bytes).
StatusOr<std::string> ParseCancelRequest(std::string_view body, ErrorDetail* detail);

// ---- responses ----------------------------------------------------------------------------

struct ResponseMeta {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;  // of prompt_tokens, served from the prefix cache
};

// A fresh response id: prefix + 24 random hex digits.
std::string NewResponseId(std::string_view prefix);

// "stop", "length"; "abort" for cancelled, "error" for errors; null JSON for kNone.
nlohmann::json FinishReasonJson(FinishReason r);

// One choice of a whole response: its text, why it ended, and its logprobs (null = not
// requested: JSON null; otherwise one entry per token). Choice i of the list has "index": i.
struct ChoiceOutput {
  std::string text;
  FinishReason finish = FinishReason::kNone;
  const std::vector<TokenLogprob>* logprobs = nullptr;
  // Chat with tools: the answer's calls in OpenAI's form ([{"id", "type": "function",
  // "function": {"name", "arguments": "<JSON text>"}}]); the message's content is then null and
  // finish_reason "tool_calls". Null JSON: none.
  nlohmann::json tool_calls;
};

// Whole responses; `usage` counts the prompt once and every choice's tokens.
nlohmann::json ChatCompletionJson(const ResponseMeta& meta,
                                  const std::vector<ChoiceOutput>& choices, const Usage& usage);
nlohmann::json CompletionJson(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                              const Usage& usage);
// The same with the one choice of an n = 1 request.
nlohmann::json ChatCompletionJson(const ResponseMeta& meta, const std::string& text,
                                  FinishReason finish, const Usage& usage,
                                  const std::vector<TokenLogprob>* logprobs);
nlohmann::json CompletionJson(const ResponseMeta& meta, const std::string& text,
                              FinishReason finish, const Usage& usage,
                              const std::vector<TokenLogprob>* logprobs);

// Streaming chunks. `with_usage_null` adds "usage": null (OpenAI does so on every chunk when
// stream_options.include_usage is set).
//   Chat: the first chunk has with_role (delta {"role":"assistant","content":""}; the stream
//   makes the content null when the answer can only be tool calls); a text chunk
//   has delta {"content": text}; the last has an empty delta and a finish_reason.
//   `index` is the choice's (n > 1: each choice streams its own chunks, interleaved).
nlohmann::json ChatChunkJson(const ResponseMeta& meta, bool with_role, const std::string* content,
                             const std::vector<TokenLogprob>* logprobs, FinishReason finish,
                             bool with_usage_null, int index = 0);
//   Tools: a chunk with delta {"tool_calls": tool_calls}, each entry with its call's "index": a
//   call's start {"index", "id", "type", "function": {"name", "arguments": ""}} or a piece of its
//   arguments {"index", "function": {"arguments": ...}}; and the finish chunk with
//   finish_reason "tool_calls".
nlohmann::json ChatToolCallsChunkJson(const ResponseMeta& meta, const nlohmann::json& tool_calls,
                                      const std::vector<TokenLogprob>* logprobs,
                                      bool with_usage_null, int index = 0);
nlohmann::json ChatToolCallsFinishChunkJson(const ResponseMeta& meta, bool with_usage_null,
                                            int index = 0);
//   Completions: `text_offset` is where this chunk's text starts in the whole completion.
nlohmann::json CompletionChunkJson(const ResponseMeta& meta, const std::string& text,
                                   const std::vector<TokenLogprob>* logprobs, size_t text_offset,
                                   FinishReason finish, bool with_usage_null, int index = 0);
// The closing usage chunk: "choices": [] and "usage" filled. `object` is the chunk object name.
nlohmann::json UsageChunkJson(const ResponseMeta& meta, std::string_view object,
                              const Usage& usage);

// OpenAI logprobs objects. A TokenLogprob whose logprob is NaN is written with a null logprob and
// null alternatives (the first prompt token of an echo, which nothing predicts).
//   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}
//   completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}
nlohmann::json ChatLogprobsJson(const std::vector<TokenLogprob>& lps);
// Completions: `text_offset` is in characters (code points), as OpenAI and vLLM give it, so that
// text[offset:] starts where the token's text does: `text_offset` is the characters before the
// first of `lps`; a token that ends inside a character gets that character's start. A token
// whose bytes are not UTF-8 on their own (part of a character) is written "bytes:\xNN..." in
// `tokens` and as a `top_logprobs` key, as OpenAI writes it, so that distinct tokens stay distinct.
std::string CompletionTokenText(const std::string& piece);
nlohmann::json CompletionLogprobsJson(const std::vector<TokenLogprob>& lps, size_t text_offset);
// vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...]: null
// for the first prompt token (nothing predicts it), then for each later one (`scored`, in
// order) an object keyed by token id: the token itself and up to `top` of the most likely tokens
// (rank 1, 2, ...) besides it (so `top` or `top` + 1 entries). Logprobs below -9999 (-inf) are
// written as -9999, as vLLM does.
nlohmann::json PromptLogprobsJson(const std::vector<TokenLogprob>& scored, int top);

// GET /v1/models.
nlohmann::json ModelsJson(const std::string& model, int64_t created, int context_length);

// Serializes without throwing: invalid UTF-8 in strings (partial tokens) becomes U+FFFD.
std::string DumpJson(const nlohmann::json& j);
// One server-sent event: "data: <payload>\n\n".
std::string SseEvent(std::string_view payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace kinfer
