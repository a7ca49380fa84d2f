// Response and SSE chunk building for the OpenAI-compatible API (parsing: openai_protocol.cc).
#include <cmath>
#include <random>

#include "runtime/server/openai_protocol.h"

#include "common/utf8.h"
#include "runtime/tokenizer/unicode.h"

namespace kinfer {
namespace {

using json = nlohmann::json;

json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// JSON has no -Infinity: a token with probability 0 (masked out) reports OpenAI's floor value.
double SafeLogprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json ChunkBase(const ResponseMeta& meta, std::string_view object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

std::string NewResponseId(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id.push_back(kHex[rng() & 15]);
  return id;
}

json FinishReasonJson(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return nullptr;
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return nullptr;
}

json ChatLogprobsJson(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const TopLogprob& alt : t.top) {
      top.push_back(
          {{"token", alt.text}, {"logprob", SafeLogprob(alt.logprob)}, {"bytes", Bytes(alt.text)}});
    }
    content.push_back({{"token", t.text},
                       {"logprob", SafeLogprob(t.logprob)},
                       {"bytes", Bytes(t.text)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

std::string CompletionTokenText(const std::string& piece) {
  if (IsValidUtf8(piece)) return piece;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "bytes:";
  for (unsigned char c : piece) {  // printable ASCII as it is, as Python writes bytes
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
      continue;
    }
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

json CompletionLogprobsJson(const std::vector<TokenLogprob>& lps, size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  utf8::CharCounter chars;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(CompletionTokenText(t.text));
    const bool unscored = std::isnan(t.logprob);  // an echo's first prompt token
    token_lps.push_back(unscored ? json(nullptr) : json(SafeLogprob(t.logprob)));
    // The sampled token and the `logprobs` most likely ones, as OpenAI ("the API will always
    // return the logprob of the sampled token, so there may be up to logprobs+1 elements") and
    // vLLM answer: with logprobs 0 the sampled token alone. Only an unscored position (an echo's
    // first prompt token) is null.
    json top = json::object();
    for (const TopLogprob& alt : t.top) top[CompletionTokenText(alt.text)] = SafeLogprob(alt.logprob);
    if (!unscored) top[CompletionTokenText(t.text)] = SafeLogprob(t.logprob);
    tops.push_back(unscored ? json(nullptr) : std::move(top));
    offsets.push_back(text_offset + chars.count());
    chars.Feed(t.text);
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json ChatCompletionJson(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                        const Usage& usage) {
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    const bool calls = !c.tool_calls.is_null();
    json message = {{"role", "assistant"}, {"content", calls ? json(nullptr) : json(c.text)}};
    if (calls) message["tool_calls"] = c.tool_calls;
    list.push_back({{"index", i},
                    {"message", std::move(message)},
                    {"logprobs", c.logprobs ? ChatLogprobsJson(*c.logprobs) : json(nullptr)},
                    {"finish_reason", calls && c.finish == FinishReason::kStop
                                          ? json("tool_calls")
                                          : FinishReasonJson(c.finish)}});
  }
  json j = ChunkBase(meta, "chat.completion");
  j["choices"] = std::move(list);
  j["usage"] = UsageJson(usage);
  return j;
}

json CompletionJson(const ResponseMeta& meta, const std::vector<ChoiceOutput>& choices,
                    const Usage& usage) {
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    list.push_back(
        {{"index", i},
         {"text", c.text},
         {"logprobs", c.logprobs ? CompletionLogprobsJson(*c.logprobs, 0) : json(nullptr)},
         {"finish_reason", FinishReasonJson(c.finish)}});
  }
  json j = ChunkBase(meta, "text_completion");
  j["choices"] = std::move(list);
  j["usage"] = UsageJson(usage);
  return j;
}

json ChatCompletionJson(const ResponseMeta& meta, const std::string& text, FinishReason finish,
                        const Usage& usage, const std::vector<TokenLogprob>* logprobs) {
  return ChatCompletionJson(meta, {ChoiceOutput{text, finish, logprobs, nullptr}}, usage);
}

json CompletionJson(const ResponseMeta& meta, const std::string& text, FinishReason finish,
                    const Usage& usage, const std::vector<TokenLogprob>* logprobs) {
  return CompletionJson(meta, {ChoiceOutput{text, finish, logprobs, nullptr}}, usage);
}

json ChatChunkJson(const ResponseMeta& meta, bool with_role, const std::string* content,
                   const std::vector<TokenLogprob>* logprobs, FinishReason finish,
                   bool with_usage_null, int index) {
  json delta = json::object();
  if (with_role) {
    delta["role"] = "assistant";
    delta["content"] = "";
  }
  if (content != nullptr) delta["content"] = *content;
  json choice = {{"index", index},
                 {"delta", std::move(delta)},
                 {"logprobs", logprobs ? ChatLogprobsJson(*logprobs) : json(nullptr)},
                 {"finish_reason", FinishReasonJson(finish)}};
  json j = ChunkBase(meta, "chat.completion.chunk");
  j["choices"] = json::array({std::move(choice)});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

json ChatToolCallsChunkJson(const ResponseMeta& meta, const json& tool_calls,
                            const std::vector<TokenLogprob>* logprobs, bool with_usage_null,
                            int index) {
  json choice = {{"index", index},
                 {"delta", {{"tool_calls", tool_calls}}},
                 {"logprobs", logprobs ? ChatLogprobsJson(*logprobs) : json(nullptr)},
                 {"finish_reason", nullptr}};
  json j = ChunkBase(meta, "chat.completion.chunk");
  j["choices"] = json::array({std::move(choice)});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

json ChatToolCallsFinishChunkJson(const ResponseMeta& meta, bool with_usage_null, int index) {
  json choice = {{"index", index},
                 {"delta", json::object()},
                 {"logprobs", nullptr},
                 {"finish_reason", "tool_calls"}};
  json j = ChunkBase(meta, "chat.completion.chunk");
  j["choices"] = json::array({std::move(choice)});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

json PromptLogprobsJson(const std::vector<TokenLogprob>& scored, int top) {
  auto entry = [](float logprob, int rank, const std::string& text) {
    return json{{"logprob", std::max(logprob, -9999.0f)}, {"rank", rank}, {"decoded_token", text}};
  };
  json out = json::array({nullptr});
  for (const TokenLogprob& t : scored) {
    json pos = json::object();
    pos[std::to_string(t.token)] = entry(t.logprob, t.rank, t.text);
    int rank = 0;
    for (const TopLogprob& alt : t.top) {
      if (++rank > top) break;
      if (alt.token != t.token) pos[std::to_string(alt.token)] = entry(alt.logprob, rank, alt.text);
    }
    out.push_back(std::move(pos));
  }
  return out;
}

json CompletionChunkJson(const ResponseMeta& meta, const std::string& text,
                         const std::vector<TokenLogprob>* logprobs, size_t text_offset,
                         FinishReason finish, bool with_usage_null, int index) {
  json choice = {
      {"index", index},
      {"text", text},
      {"logprobs", logprobs ? CompletionLogprobsJson(*logprobs, text_offset) : json(nullptr)},
      {"finish_reason", FinishReasonJson(finish)}};
  json j = ChunkBase(meta, "text_completion");
  j["choices"] = json::array({std::move(choice)});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

json UsageChunkJson(const ResponseMeta& meta, std::string_view object, const Usage& usage) {
  json j = ChunkBase(meta, object);
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return j;
}

json ModelsJson(const std::string& model, int64_t created, int context_length) {
  json m = {{"id", model},
            {"object", "model"},
            {"created", created},
            {"owned_by", "kinfer"},
            {"max_model_len", context_length}};
  return {{"object", "list"}, {"data", json::array({std::move(m)})}};
}

std::string DumpJson(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string SseEvent(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out += "data: ";
  out += payload;
  out += "\n\n";
  return out;
}

}  // namespace kinfer
