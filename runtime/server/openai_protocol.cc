// Request parsing and validation for the OpenAI-compatible API (responses: openai_responses.cc).
#include "runtime/server/openai_protocol.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/json_limits.h"
#include "common/timeout_header.h"
#include "runtime/sample/json_schema_grammar.h"
#include "runtime/sample/sampling_validation.h"
#include "runtime/server/request_fields.h"
#include "runtime/server/tool_calls.h"
#include "runtime/tokenizer/unicode.h"

namespace kinfer {
namespace {

using request_fields::Field;
using request_fields::Invalid;

using json = nlohmann::json;

// Parses `body` into an object. Exceptions stay inside this function.
Status ParseObject(std::string_view body, json* out, ErrorDetail* d) {
  if (!IsValidUtf8(body)) return Invalid(d, "", "request body is not valid UTF-8");
  if (!JsonNestingWithin(body)) {
    return Invalid(d, "",
                   "request body nests arrays and objects deeper than " +
                       std::to_string(kMaxJsonNesting) + " levels");
  }
  try {
    *out = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    std::string what = e.what();
    size_t p = what.find("] ");  // drop nlohmann's "[json.exception.parse_error.101] " prefix
    if (p != std::string::npos) what = what.substr(p + 2);
    return Invalid(d, "", "request body is not valid JSON: " + what);
  }
  if (!out->is_object()) return Invalid(d, "", "request body must be a JSON object");
  return Status::Ok();
}

// Typed optional fields: absent or null leaves *out unchanged.

Status GetBool(const json& obj, const char* name, bool* out, ErrorDetail* d) {
  const json* v = Field(obj, name);
  if (v == nullptr) return Status::Ok();
  if (!v->is_boolean()) return Invalid(d, name, std::string("'") + name + "' must be a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}

Status GetFloat(const json& obj, const char* name, float* out, ErrorDetail* d) {
  const json* v = Field(obj, name);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number()) return Invalid(d, name, std::string("'") + name + "' must be a number");
  *out = static_cast<float>(v->get<double>());
  return Status::Ok();
}

// Integers only (5.0 is rejected, as OpenAI does), within [lo, hi].
Status GetInt(const json& obj, const char* name, int64_t lo, int64_t hi, int64_t* out,
              ErrorDetail* d) {
  const json* v = Field(obj, name);
  if (v == nullptr) return Status::Ok();
  if (!v->is_number_integer()) {
    return Invalid(d, name, std::string("'") + name + "' must be an integer");
  }
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Invalid(d, name, std::string("'") + name + "' must be <= " + std::to_string(hi));
  }
  int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    return Invalid(d, name,
                   std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got " + std::to_string(x));
  }
  *out = x;
  return Status::Ok();
}

Status GetIntField(const json& obj, const char* name, int64_t lo, int64_t hi, int* out,
                   ErrorDetail* d) {
  int64_t x = *out;
  KINFER_RETURN_IF_ERROR(GetInt(obj, name, lo, hi, &x, d));
  *out = static_cast<int>(x);
  return Status::Ok();
}

Status GetString(const json& obj, const char* name, std::string* out, ErrorDetail* d) {
  const json* v = Field(obj, name);
  if (v == nullptr) return Status::Ok();
  if (!v->is_string()) return Invalid(d, name, std::string("'") + name + "' must be a string");
  *out = v->get<std::string>();
  return Status::Ok();
}

// A token id array: non-empty integers in int32 range (vocabulary checked later).
Status GetIdArray(const json& arr, const char* param, std::vector<int32_t>* out, ErrorDetail* d) {
  out->clear();
  for (const json& x : arr) {
    if (!x.is_number_integer()) {
      return Invalid(d, param, std::string("'") + param + "' token ids must be integers");
    }
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    const bool in_range = x.is_number_unsigned()
                              ? x.get<uint64_t>() <= static_cast<uint64_t>(kMax)
                              : (x.get<int64_t>() >= 0 && x.get<int64_t>() <= kMax);
    if (!in_range) {
      return Invalid(d, param, std::string("'") + param + "' token id out of range: " + x.dump());
    }
    const int64_t v = x.get<int64_t>();
    out->push_back(static_cast<int32_t>(v));
  }
  return Status::Ok();
}

// OpenAI's logit_bias: {"<token id>": bias, ...}, ids as decimal strings, biases numbers in
// [-100, 100] (checked by ValidateSamplingParams). Out: sorted by id; ids are checked against the
// vocabulary later (CheckLogitBias). At most kMaxLogitBias entries.
Status ParseLogitBias(const json& obj, std::vector<std::pair<int32_t, float>>* out,
                      ErrorDetail* d) {
  out->clear();
  const json* lb = Field(obj, "logit_bias");
  if (lb == nullptr) return Status::Ok();
  if (!lb->is_object()) {
    return Invalid(d, "logit_bias",
                   "'logit_bias' must be an object mapping token ids to biases, like "
                   "{\"1234\": -100}");
  }
  if (lb->size() > static_cast<size_t>(kMaxLogitBias)) {
    return Invalid(d, "logit_bias",
                   "'logit_bias' may hold at most " + std::to_string(kMaxLogitBias) + " tokens");
  }
  for (const auto& [key, value] : lb->items()) {
    int64_t id = -1;
    const char* end = key.data() + key.size();
    auto [p, ec] = std::from_chars(key.data(), end, id);
    if (key.empty() || key[0] == '-' || key[0] == '+' || ec != std::errc() || p != end ||
        id > std::numeric_limits<int32_t>::max()) {
      return Invalid(d, "logit_bias",
                     "'logit_bias' keys must be token ids (non-negative integers as strings), "
                     "got \"" +
                         key + "\"");
    }
    if (!value.is_number()) {
      return Invalid(
          d, "logit_bias",
          "'logit_bias' values must be numbers, got " + value.dump() + " for token " + key);
    }
    out->emplace_back(static_cast<int32_t>(id), static_cast<float>(value.get<double>()));
  }
  std::sort(out->begin(), out->end());
  for (size_t i = 1; i < out->size(); ++i) {
    if ((*out)[i].first == (*out)[i - 1].first) {
      return Invalid(d, "logit_bias",
                     "'logit_bias' names token " + std::to_string((*out)[i].first) + " twice");
    }
  }
  return Status::Ok();
}

// Fields shared by both endpoints: sampling, stop, stream, limits, unsupported features.
// The constraint for `schema` into r->grammar; a schema it cannot compile is a 400 naming `param`.
Status GrammarFromSchema(const nlohmann::ordered_json& schema, const char* param, ParsedRequest* r,
                         ErrorDetail* d) {
  auto g = JsonSchemaGrammar(schema);
  if (!g.ok()) return Invalid(d, param, g.status().message());
  r->grammar = *std::move(g);
  return Status::Ok();
}

// The body read again keeping its keys in the client's order (a schema's properties are
// generated in that order; `json` sorts keys). It parsed once already, so this fails only if
// memory does.
Status ReadBodyInOrder(std::string_view body, const char* param, nlohmann::ordered_json* doc,
                       ErrorDetail* d) {
  try {
    *doc = nlohmann::ordered_json::parse(body.begin(), body.end());
  } catch (const nlohmann::ordered_json::exception&) {
    return Invalid(d, param, "the request body could not be read again");
  }
  return Status::Ok();
}

// The schema at `path` in the body, in the client's key order.
Status SchemaGrammar(std::string_view body, std::initializer_list<const char*> path,
                     const char* param, ParsedRequest* r, ErrorDetail* d) {
  nlohmann::ordered_json doc;
  KINFER_RETURN_IF_ERROR(ReadBodyInOrder(body, param, &doc, d));
  const nlohmann::ordered_json* at = &doc;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return Invalid(d, param, "missing schema");
    at = &(*at)[key];
  }
  return GrammarFromSchema(*at, param, r, d);
}

// vLLM's guided output of `kind` ("json": a schema, as an object or a JSON string; "choice": one
// of these strings; "regex": the whole text matches) into r->grammar; errors name `param`.
Status GuidedGrammar(std::string_view body, const json& v, std::string_view kind,
                     const std::string& param, std::initializer_list<const char*> path,
                     ParsedRequest* r, ErrorDetail* d) {
  if (r->json_object || r->grammar) {
    return Invalid(d, param,
                   "'" + param +
                       "' cannot be combined with response_format or another guided "
                       "output");
  }
  if (kind == "json") {
    if (!v.is_string()) return SchemaGrammar(body, path, param.c_str(), r, d);
    nlohmann::ordered_json schema;  // vLLM also takes the schema as a JSON string
    if (!JsonNestingWithin(v.get_ref<const std::string&>())) {
      return Invalid(d, param,
                     "'" + param + "' nests deeper than " + std::to_string(kMaxJsonNesting) +
                         " levels");
    }
    try {
      schema = nlohmann::ordered_json::parse(v.get<std::string>());
    } catch (const nlohmann::ordered_json::exception&) {
      return Invalid(d, param, "'" + param + "' must be a JSON schema (object or string)");
    }
    return GrammarFromSchema(schema, param.c_str(), r, d);
  }
  if (kind == "regex") {
    if (!v.is_string()) return Invalid(d, param, "'" + param + "' must be a regular expression");
    auto g = RegexGrammar(v.get<std::string>());
    if (!g.ok()) return Invalid(d, param, g.status().message());
    r->grammar = *std::move(g);
    return Status::Ok();
  }
  const std::string bad = "'" + param + "' must be an array of 1 to " +
                          std::to_string(kMaxGuidedChoices) + " non-empty strings";
  if (!v.is_array() || v.empty() || v.size() > kMaxGuidedChoices) return Invalid(d, param, bad);
  GrammarBuilder b;
  std::vector<GrammarBuilder::Sequence> alts;
  for (const json& c : v) {
    if (!c.is_string() || c.get_ref<const std::string&>().empty()) return Invalid(d, param, bad);
    alts.push_back(b.Literal(c.get_ref<const std::string&>()));
  }
  r->grammar = b.Build(b.Rule(alts));
  return Status::Ok();
}

Status ParseCommon(std::string_view body, const json& obj, ParsedRequest* r, ErrorDetail* d) {
  KINFER_RETURN_IF_ERROR(GetString(obj, "model", &r->model, d));

  int64_t n = 1;
  KINFER_RETURN_IF_ERROR(GetInt(obj, "n", 1, kMaxChoices, &n, d));
  r->n = static_cast<int>(n);
  // best_of (OpenAI's legacy field, vLLM's): best_of generations, the n most likely returned.
  int64_t best_of = r->n;
  KINFER_RETURN_IF_ERROR(GetInt(obj, "best_of", 1, kMaxChoices, &best_of, d));
  if (best_of < r->n) {
    return Invalid(d, "best_of",
                   "'best_of' (" + std::to_string(best_of) + ") must be at least 'n' (" +
                       std::to_string(r->n) + ")");
  }
  r->best_of = static_cast<int>(best_of);

  int max_tokens = -1;
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  // max_tokens 0 is the legacy scoring request (with echo; checked below).
  KINFER_RETURN_IF_ERROR(GetIntField(obj, "max_tokens", 0, kIntMax, &max_tokens, d));
  KINFER_RETURN_IF_ERROR(GetIntField(obj, "max_completion_tokens", 1, kIntMax, &max_tokens, d));
  if (max_tokens >= 0) r->max_tokens = max_tokens;

  KINFER_RETURN_IF_ERROR(GetBool(obj, "stream", &r->stream, d));
  if (r->stream && r->best_of > r->n) {
    return Invalid(d, "best_of",
                   "'best_of' above 'n' cannot be streamed (the best are known only at the end)");
  }
  if (const json* so = Field(obj, "stream_options")) {
    if (!so->is_object()) return Invalid(d, "stream_options", "'stream_options' must be an object");
    if (!r->stream) {
      return Invalid(d, "stream_options", "'stream_options' is only allowed when 'stream' is true");
    }
    KINFER_RETURN_IF_ERROR(GetBool(*so, "include_usage", &r->include_usage, d));
    if (d->param == "include_usage") d->param = "stream_options.include_usage";
    // vLLM's: every chunk's usage is the count so far (with include_usage, as vLLM).
    bool continuous = false;
    KINFER_RETURN_IF_ERROR(GetBool(*so, "continuous_usage_stats", &continuous, d));
    if (d->param == "continuous_usage_stats") d->param = "stream_options.continuous_usage_stats";
    r->continuous_usage = continuous && r->include_usage;
  }

  SamplingParams& s = r->sampling;
  KINFER_RETURN_IF_ERROR(GetFloat(obj, "temperature", &s.temperature, d));
  KINFER_RETURN_IF_ERROR(GetFloat(obj, "top_p", &s.top_p, d));
  KINFER_RETURN_IF_ERROR(GetIntField(obj, "top_k", -1, kIntMax, &s.top_k, d));
  KINFER_RETURN_IF_ERROR(GetFloat(obj, "min_p", &s.min_p, d));
  KINFER_RETURN_IF_ERROR(GetFloat(obj, "frequency_penalty", &s.frequency_penalty, d));
  KINFER_RETURN_IF_ERROR(GetFloat(obj, "presence_penalty", &s.presence_penalty, d));
  KINFER_RETURN_IF_ERROR(GetFloat(obj, "repeat_penalty", &s.repetition_penalty, d));  // llama.cpp
  KINFER_RETURN_IF_ERROR(GetFloat(obj, "repetition_penalty", &s.repetition_penalty, d));  // vLLM
  KINFER_RETURN_IF_ERROR(GetIntField(obj, "repeat_last_n", -1, kIntMax, &s.penalty_last_n, d));
  if (const json* seed = Field(obj, "seed")) {
    if (!seed->is_number_integer()) return Invalid(d, "seed", "'seed' must be an integer");
    // Negative seeds are accepted (OpenAI allows them) and reinterpreted as unsigned.
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  }

  if (const json* stop = Field(obj, "stop")) {
    if (stop->is_string()) {
      r->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& x : *stop) {
        if (!x.is_string())
          return Invalid(d, "stop", "'stop' must be a string or an array of strings");
        r->stop.push_back(x.get<std::string>());
      }
    } else {
      return Invalid(d, "stop", "'stop' must be a string or an array of strings");
    }
    if (r->stop.size() > static_cast<size_t>(kMaxStopSequences)) {
      return Invalid(d, "stop",
                     "'stop' may hold at most " + std::to_string(kMaxStopSequences) + " sequences");
    }
    for (const std::string& x : r->stop) {
      if (x.empty()) return Invalid(d, "stop", "'stop' sequences must not be empty");
    }
  }
  KINFER_RETURN_IF_ERROR(GetBool(obj, "ignore_eos", &r->ignore_eos, d));
  if (const json* ids = Field(obj, "stop_token_ids")) {
    if (!ids->is_array()) {
      return Invalid(d, "stop_token_ids", "'stop_token_ids' must be an array of token ids");
    }
    if (ids->size() > static_cast<size_t>(kMaxStopTokenIds)) {
      return Invalid(
          d, "stop_token_ids",
          "'stop_token_ids' may hold at most " + std::to_string(kMaxStopTokenIds) + " ids");
    }
    KINFER_RETURN_IF_ERROR(GetIdArray(*ids, "stop_token_ids", &r->stop_token_ids, d));
  }
  KINFER_RETURN_IF_ERROR(GetIntField(obj, "min_tokens", 0, kIntMax, &r->min_tokens, d));
  // vLLM's prompt_logprobs: the log-probability of every prompt token after the ones before it.
  if (Field(obj, "prompt_logprobs") != nullptr) {
    KINFER_RETURN_IF_ERROR(
        GetIntField(obj, "prompt_logprobs", 0, kMaxLogprobs, &r->prompt_logprobs, d));
    if (r->stream) {
      return Invalid(d, "prompt_logprobs",
                     "'prompt_logprobs' is not available with 'stream' (as in vLLM)");
    }
  }
  KINFER_RETURN_IF_ERROR(GetBool(obj, "cache_prompt", &r->cache_prompt, d));
  if (const json* p = Field(obj, "priority")) {
    if (!p->is_number_integer() || p->get<int64_t>() < -1000000 || p->get<int64_t>() > 1000000) {
      return Invalid(d, "priority",
                     "'priority' must be an integer in [-1000000, 1000000] (smaller is served "
                     "first)");
    }
    r->priority = p->get<int>();
  }
  constexpr int64_t kMaxSpecTokens = 64;
  if (const json* sp = Field(obj, "speculative")) {
    if (sp->is_boolean()) {
      r->speculative_tokens = sp->get<bool>() ? kSpeculativeServerMax : 0;
    } else if (sp->is_object()) {
      for (const auto& [key, value] : sp->items()) {
        if (key != "n_max") {
          return Invalid(d, "speculative." + key,
                         "'speculative." + key + "' is not a known field (only n_max)");
        }
      }
      int n = kSpeculativeServerMax;
      if (Status st = GetIntField(*sp, "n_max", 0, kMaxSpecTokens, &n, d); !st.ok()) {
        if (d != nullptr) d->param = "speculative.n_max";
        return st;
      }
      r->speculative_tokens = n;
    } else {
      return Invalid(d, "speculative",
                     "'speculative' must be a boolean or an object like {\"n_max\": 4}");
    }
  }
  KINFER_RETURN_IF_ERROR(
      GetIntField(obj, "speculative.n_max", 0, kMaxSpecTokens, &r->speculative_tokens, d));

  KINFER_RETURN_IF_ERROR(GetBool(obj, "echo", &r->echo, d));
  if (r->max_tokens == 0 && !(r->echo && r->kind == ApiKind::kCompletion)) {
    return Invalid(d, "max_tokens",
                   r->kind == ApiKind::kCompletion
                       ? "'max_tokens' must be >= 1 (0 only with 'echo': score the prompt, generate "
                         "nothing)"
                       : "'max_tokens' must be >= 1 (0 with 'echo' scores a prompt on "
                         "/v1/completions only)");
  }
  KINFER_RETURN_IF_ERROR(ParseLogitBias(obj, &s.logit_bias, d));
  if (const json* tools = Field(obj, "tools");
      tools != nullptr && r->kind == ApiKind::kCompletion) {
    if (!tools->is_array() || !tools->empty())
      return Invalid(d, "tools", "'tools' is only supported by /v1/chat/completions");
  }
  if (const json* rf = Field(obj, "response_format")) {
    const json* type = rf->is_object() ? Field(*rf, "type") : nullptr;
    const std::string t = type != nullptr && type->is_string() ? type->get<std::string>() : "";
    if (t == "json_object") {
      r->json_object = true;
    } else if (t == "json_schema") {
      const json* js = Field(*rf, "json_schema");
      if (js == nullptr || !js->is_object() || Field(*js, "schema") == nullptr) {
        return Invalid(d, "response_format.json_schema.schema",
                       "response_format json_schema needs {\"json_schema\": {\"name\": ..., "
                       "\"schema\": {...}}}");
      }
      KINFER_RETURN_IF_ERROR(SchemaGrammar(body, {"response_format", "json_schema", "schema"},
                                           "response_format.json_schema.schema", r, d));
    } else if (t != "text") {
      return Invalid(d, "response_format",
                     "response_format must be {\"type\": \"text\"}, {\"type\": "
                     "\"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {...}}");
    }
  }
  // vLLM's guided decoding: the flat guided_json / guided_choice / guided_regex fields, and the
  // newer structured_outputs {"json" | "choice" | "regex": ...} object.
  for (const char* kind : {"json", "choice", "regex"}) {
    const std::string field = std::string("guided_") + kind;
    if (const json* v = Field(obj, field.c_str())) {
      KINFER_RETURN_IF_ERROR(GuidedGrammar(body, *v, kind, field, {field.c_str()}, r, d));
    }
  }
  if (const json* so = Field(obj, "structured_outputs")) {
    const char* kBad =
        "'structured_outputs' must be an object with one of \"json\", \"choice\" or \"regex\"";
    if (!so->is_object()) return Invalid(d, "structured_outputs", kBad);
    const char* chosen = nullptr;
    for (const auto& [key, v] : so->items()) {
      if (v.is_null()) continue;
      if (key != "json" && key != "choice" && key != "regex") {
        return Invalid(d, "structured_outputs",
                       "structured_outputs." + key +
                           " is not supported (json, choice and regex "
                           "are)");
      }
      if (chosen != nullptr) return Invalid(d, "structured_outputs", kBad);
      chosen = key == "json" ? "json" : key == "choice" ? "choice" : "regex";
    }
    if (chosen == nullptr) return Invalid(d, "structured_outputs", kBad);
    KINFER_RETURN_IF_ERROR(GuidedGrammar(body, (*so)[chosen], chosen, "structured_outputs",
                                         {"structured_outputs", chosen}, r, d));
  }
  if ((r->json_object || r->grammar) && r->ignore_eos) {
    return Invalid(d, "ignore_eos",
                   "'ignore_eos' cannot be combined with a response_format or guided output (the "
                   "output ends where its format does)");
  }
  return Status::Ok();
}

// The message content: a string, or an array of {"type": "text", "text": ...} parts joined with
// "\n" (as llama.cpp's server and vLLM join them, so a template sees the same text).
Status ParseContent(const json& msg, size_t i, std::string* out, ErrorDetail* d) {
  std::string param = "messages[" + std::to_string(i) + "].content";
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) {
    return Invalid(d, param, "'" + param + "' is required");
  }
  if (it->is_string()) {
    *out = it->get<std::string>();
    return Status::Ok();
  }
  if (!it->is_array()) return Invalid(d, param, "'" + param + "' must be a string or an array");
  out->clear();
  bool first = true;
  for (const json& part : *it) {
    if (!part.is_object() || part.value("type", std::string()) != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      return Invalid(d, param,
                     "only text content parts ({\"type\": \"text\", \"text\": ...}) are "
                     "supported in '" +
                         param + "'");
    }
    if (!first) *out += '\n';
    first = false;
    *out += part["text"].get<std::string>();
  }
  return Status::Ok();
}

Status FinishSampling(ParsedRequest* r, ErrorDetail* d) {
  r->sampling.logprobs = r->logprobs ? r->top_logprobs : -1;
  StatusOr<SamplingParams> v = ValidateSamplingParams(r->sampling);
  if (!v.ok()) {
    // The validator's message starts with the field name ("temperature must be in ...").
    Status st = v.status();
    const std::string& m = st.message();
    std::string field = m.substr(0, m.find(' '));
    if (field == "logprobs") field = r->kind == ApiKind::kChat ? "top_logprobs" : "logprobs";
    if (field == "penalty_last_n") field = "repeat_last_n";
    if (field.rfind("logit_bias", 0) == 0) field = "logit_bias";
    d->param = field;
    return st;
  }
  r->sampling = std::move(v).value();
  return Status::Ok();
}

}  // namespace

StatusOr<ParsedRequest> ParseChatRequest(std::string_view body, ErrorDetail* d) {
  json obj;
  KINFER_RETURN_IF_ERROR(ParseObject(body, &obj, d));
  ParsedRequest r;
  r.kind = ApiKind::kChat;
  KINFER_RETURN_IF_ERROR(ParseCommon(body, obj, &r, d));

  const json* msgs = Field(obj, "messages");
  if (msgs == nullptr) return Invalid(d, "messages", "'messages' is required");
  if (!msgs->is_array()) return Invalid(d, "messages", "'messages' must be an array");
  if (msgs->empty()) return Invalid(d, "messages", "'messages' must not be empty");
  std::map<std::string, std::string> call_names;  // tool_call id -> the tool's name
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return Invalid(d, param, "'" + param + "' must be an object");
    ChatTurn turn;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Invalid(d, param + ".role", "'" + param + ".role' must be a string");
    }
    turn.role = role->get<std::string>();
    if (turn.role != "system" && turn.role != "developer" && turn.role != "user" &&
        turn.role != "assistant" && turn.role != "tool") {
      return Invalid(
          d, param + ".role",
          "unsupported role '" + turn.role + "' (want system, developer, user, assistant or tool)");
    }
    const json* calls = turn.role == "assistant" ? Field(m, "tool_calls") : nullptr;
    if (calls != nullptr) {
      // The content may be null beside tool_calls.
      if (Field(m, "content") != nullptr) {
        KINFER_RETURN_IF_ERROR(ParseContent(m, i, &turn.content, d));
      }
      StatusOr<std::string> text =
          AssistantToolCallsText(*calls, turn.content, param + ".tool_calls", d);
      if (!text.ok()) return text.status();
      turn.content = *std::move(text);
      for (const json& c : *calls) {
        if (c.contains("id") && c["id"].is_string()) {
          call_names[c["id"].get<std::string>()] = c["function"]["name"].get<std::string>();
        }
      }
    } else {
      KINFER_RETURN_IF_ERROR(ParseContent(m, i, &turn.content, d));
    }
    if (turn.role == "tool") {
      // Required, as OpenAI and vLLM require it: a result is matched to its call by it.
      const json* tid = Field(m, "tool_call_id");
      if (tid == nullptr || !tid->is_string()) {
        return Invalid(d, param + ".tool_call_id",
                       "'" + param + ".tool_call_id' is required: the id of the call this "
                       "message answers");
      }
      const std::string id = tid->get<std::string>();
      const auto name = call_names.find(id);
      turn.role = "user";  // the generic format (tool_calls.h)
      turn.content = ToolResultText(id, name != call_names.end() ? name->second : "", turn.content);
    }
    r.messages.push_back(std::move(turn));
  }

  if (Field(obj, "tools") != nullptr || Field(obj, "tool_choice") != nullptr) {
    nlohmann::ordered_json ordered;  // the parameters' properties in the client's order
    KINFER_RETURN_IF_ERROR(ReadBodyInOrder(body, "tools", &ordered, d));
    // (response_format was read first: it and tools cannot both hold the answer.)
    const bool formatted = r.grammar != nullptr || r.json_object;
    KINFER_RETURN_IF_ERROR(ParseTools(ordered, &r, d));
    if (r.tools.active() && r.ignore_eos) {
      return Invalid(d, "ignore_eos", "'ignore_eos' cannot be combined with tools");
    }
    if (r.tools.active() && formatted) {
      // response_format shapes the direct answer inside the tool-call format (ParseTools read
      // it); vLLM's guided outputs have no such place.
      if (!r.tools.response_schema) {
        return Invalid(d, "tools",
                       "'tools' cannot be combined with guided decoding (the tool-call format "
                       "holds the answer; response_format can shape a direct answer)");
      }
      r.json_object = false;
    }
    if (r.tools.active()) {
      // The tools and the answer format go in the system turn: after the client's own, if any.
      const std::string text = ToolSystemPrompt(r.tools);
      if (r.messages[0].role == "system" || r.messages[0].role == "developer") {
        r.messages[0].content += "\n\n" + text;
      } else {
        r.messages.insert(r.messages.begin(), ChatTurn{"system", text});
      }
    }
  }

  // vLLM's add_generation_prompt and continue_final_message (continue the last assistant turn:
  // a prefill), and echo on chat (that turn's text comes back before the generated one).
  KINFER_RETURN_IF_ERROR(GetBool(obj, "continue_final_message", &r.continue_final_message, d));
  r.add_generation_prompt = !r.continue_final_message;
  KINFER_RETURN_IF_ERROR(GetBool(obj, "add_generation_prompt", &r.add_generation_prompt, d));
  if (r.continue_final_message) {
    if (r.add_generation_prompt) {
      return Invalid(d, "add_generation_prompt",
                     "'add_generation_prompt' cannot be true with 'continue_final_message' (the "
                     "final assistant turn is continued, not followed by a new one)");
    }
    if (r.messages.back().role != "assistant" || r.messages.back().content.empty()) {
      return Invalid(d, "messages",
                     "'continue_final_message' needs the last message to be an assistant turn "
                     "with text");
    }
  }
  if (r.tools.active() && (r.continue_final_message || r.echo)) {
    const char* field = r.echo ? "echo" : "continue_final_message";
    return Invalid(d, field,
                   std::string("'") + field +
                       "' cannot be combined with tools (the tool-call format holds the answer)");
  }

  KINFER_RETURN_IF_ERROR(GetBool(obj, "logprobs", &r.logprobs, d));
  if (Field(obj, "top_logprobs") != nullptr) {
    int top = 0;
    KINFER_RETURN_IF_ERROR(GetIntField(obj, "top_logprobs", 0, kMaxLogprobs, &top, d));
    if (!r.logprobs && top > 0) {
      return Invalid(d, "top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    r.top_logprobs = top;
  }
  KINFER_RETURN_IF_ERROR(FinishSampling(&r, d));
  return r;
}

StatusOr<ParsedRequest> ParseCompletionRequest(std::string_view body, ErrorDetail* d) {
  json obj;
  KINFER_RETURN_IF_ERROR(ParseObject(body, &obj, d));
  ParsedRequest r;
  r.kind = ApiKind::kCompletion;
  KINFER_RETURN_IF_ERROR(ParseCommon(body, obj, &r, d));

  const json* p = Field(obj, "prompt");
  if (p == nullptr) return Invalid(d, "prompt", "'prompt' is required");
  const char* kShape =
      "'prompt' must be a string, token ids, or a list of strings or of token id lists";
  if (p->is_string()) {
    r.prompts.push_back(CompletionPrompt{p->get<std::string>(), {}, false});
  } else if (p->is_array()) {
    if (p->empty()) return Invalid(d, "prompt", "'prompt' must not be empty");
    const json& first = (*p)[0];
    if (first.is_number_integer()) {
      CompletionPrompt one;
      one.is_ids = true;
      KINFER_RETURN_IF_ERROR(GetIdArray(*p, "prompt", &one.ids, d));
      r.prompts.push_back(std::move(one));
    } else if (first.is_string() || first.is_array()) {
      if (p->size() > static_cast<size_t>(kMaxPrompts)) {
        return Invalid(d, "prompt",
                       "'prompt' may hold at most " + std::to_string(kMaxPrompts) + " prompts");
      }
      for (const json& x : *p) {
        if (x.type() != first.type()) {
          return Invalid(d, "prompt", "'prompt' must not mix strings and token id lists");
        }
        CompletionPrompt one;
        if (x.is_string()) {
          one.text = x.get<std::string>();
        } else {
          one.is_ids = true;
          KINFER_RETURN_IF_ERROR(GetIdArray(x, "prompt", &one.ids, d));
        }
        r.prompts.push_back(std::move(one));
      }
    } else {
      return Invalid(d, "prompt", kShape);
    }
  } else {
    return Invalid(d, "prompt", kShape);
  }
  for (const CompletionPrompt& one : r.prompts) {
    if (one.is_ids ? one.ids.empty() : one.text.empty()) {
      return Invalid(d, "prompt", "'prompt' must not be empty");
    }
  }

  std::string suffix;
  KINFER_RETURN_IF_ERROR(GetString(obj, "suffix", &suffix, d));
  if (!suffix.empty()) return Invalid(d, "suffix", "'suffix' is not supported");

  // Completions: logprobs is an integer (alternatives per token); 0 = the chosen token only.
  if (const json* lp = Field(obj, "logprobs")) {
    (void)lp;
    int n_lp = 0;
    KINFER_RETURN_IF_ERROR(GetIntField(obj, "logprobs", 0, kMaxLogprobs, &n_lp, d));
    r.logprobs = true;
    r.top_logprobs = n_lp;
  }
  KINFER_RETURN_IF_ERROR(FinishSampling(&r, d));
  return r;
}

Status CheckTokenIds(const ParsedRequest& req, int vocab_size, ErrorDetail* d) {
  auto outside = [&](const char* param, int32_t id) {
    return Invalid(d, param,
                   std::string(param) + " token id " + std::to_string(id) +
                       " is outside the vocabulary (0.." + std::to_string(vocab_size - 1) + ")");
  };
  for (const auto& [id, bias] : req.sampling.logit_bias) {
    if (id >= vocab_size) return outside("logit_bias", id);
  }
  for (int32_t id : req.stop_token_ids) {
    if (id >= vocab_size) return outside("stop_token_ids", id);
  }
  return Status::Ok();
}

Status CheckMinTokens(const ParsedRequest& req, int max_tokens, ErrorDetail* d) {
  if (req.min_tokens <= max_tokens) return Status::Ok();
  return Invalid(d, "min_tokens",
                 "'min_tokens' (" + std::to_string(req.min_tokens) +
                     ") must not exceed max_tokens (" + std::to_string(max_tokens) + ")");
}

Status CheckModel(const ParsedRequest& req, std::string_view served_model, ErrorDetail* d) {
  if (req.model.empty() || req.model == served_model) return Status::Ok();
  d->param = "model";
  d->code = "model_not_found";
  return NotFound("The model '" + req.model + "' does not exist (this server serves '" +
                  std::string(served_model) + "')");
}

StatusOr<int> ResolveMaxTokens(const ParsedRequest& req, int prompt_tokens, int context_length,
                               ErrorDetail* d) {
  const char* prompt_param = req.kind == ApiKind::kChat ? "messages" : "prompt";
  if (prompt_tokens >= context_length) {
    d->param = prompt_param;
    d->code = "context_length_exceeded";
    return OutOfRange("This model's maximum context length is " + std::to_string(context_length) +
                      " tokens. However, your prompt has " + std::to_string(prompt_tokens) +
                      " tokens, which leaves no room for a completion.");
  }
  const int room = context_length - prompt_tokens;
  if (!req.max_tokens.has_value()) return std::min(room, kDefaultMaxTokensCap);
  const int64_t total = static_cast<int64_t>(prompt_tokens) + *req.max_tokens;
  if (total > context_length) {
    d->param = "max_tokens";
    d->code = "context_length_exceeded";
    return OutOfRange("This model's maximum context length is " + std::to_string(context_length) +
                      " tokens. However, you requested " + std::to_string(total) + " tokens (" +
                      std::to_string(prompt_tokens) + " in the " + prompt_param + ", " +
                      std::to_string(*req.max_tokens) +
                      " in the completion). Please reduce the prompt or 'max_tokens'.");
  }
  return *req.max_tokens;
}

StatusOr<int> ResolvePriority(const ParsedRequest& req, std::string_view header, ErrorDetail* d) {
  if (req.priority) return *req.priority;
  if (header.empty()) return kDefaultPriority;
  if (header == "critical") return 0;
  if (header == "standard") return 1;
  if (header == "batch") return 2;
  int v = 0;
  auto [end, ec] = std::from_chars(header.data(), header.data() + header.size(), v);
  if (ec == std::errc() && end == header.data() + header.size() && v >= -1000000 && v <= 1000000) {
    return v;
  }
  d->param = "x-kinfer-priority";
  return InvalidArgument(
      "x-kinfer-priority must be critical, standard, batch or an integer, not '" +
      std::string(header.substr(0, 64)) + "'");
}

uint64_t CacheSaltFor(std::string_view tenant) {
  if (tenant.empty()) return 0;
  // Each tenant name gets a number of its own, the first time it is seen (top bits 01: out of
  // reach of the engine's private salts, 10... and 11...). A hash of the name could be forced to
  // collide (FNV-1a inverts step by step: a crafted suffix met another tenant's salt and shared
  // its prefix cache, whose hits show in TTFT). Numbers are never reused: past kMaxTenants names
  // the table starts over, and a tenant seen again gets a new number (its cache is cold, never
  // another's).
  constexpr size_t kMaxTenants = size_t{1} << 16;
  static std::mutex mu;
  static std::unordered_map<std::string, uint64_t> salts;
  static uint64_t next = 1;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = salts.find(std::string(tenant)); it != salts.end()) return it->second;
  if (salts.size() >= kMaxTenants) salts.clear();
  const uint64_t salt = (uint64_t{1} << 62) | (next++ & ((uint64_t{1} << 62) - 1));
  salts.emplace(std::string(tenant), salt);
  return salt;
}

StatusOr<std::optional<std::chrono::milliseconds>> ParseRequestTimeout(std::string_view header,
                                                                       ErrorDetail* d) {
  if (header.empty()) return std::optional<std::chrono::milliseconds>();
  std::optional<std::chrono::milliseconds> timeout = ParseTimeoutHeader(header);
  if (!timeout) {
    d->param = "x-kinfer-timeout";
    return InvalidArgument(
        "x-kinfer-timeout must be a positive duration such as 500ms, 2s or 1m "
        "(at most a day), not '" +
        std::string(header.substr(0, 64)) + "'");
  }
  return timeout;
}

GenerationRequest ToGenerationRequest(const ParsedRequest& req, std::vector<int32_t> prompt,
                                      int max_tokens) {
  GenerationRequest g;
  g.prompt_tokens = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling = req.sampling;
  // With tools the answer is kinfer's own wrapper ({"tool_calls": ...} or {"response": ...}),
  // held by a grammar: a stop string matched inside it cut a call mid-way and left the wrapper's
  // raw text as the message. They are not applied there (docs/api.md, Tools).
  if (!req.tools.active()) g.stop = req.stop;
  g.ignore_eos = req.ignore_eos;
  g.stop_tokens = req.stop_token_ids;
  g.min_tokens = req.min_tokens;
  g.speculative_tokens = req.speculative_tokens;
  g.json_object = req.json_object;
  g.grammar = req.grammar;
  // The echo's logprobs and vLLM's prompt_logprobs share one scoring of the prompt, with the
  // larger number of alternatives (each answer keeps its own).
  if (req.echo && req.logprobs && req.kind == ApiKind::kCompletion) {
    g.prompt_logprobs = req.sampling.logprobs;
  }
  g.prompt_logprobs = std::max(g.prompt_logprobs, req.prompt_logprobs);
  return g;
}

StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body, ErrorDetail* d) {
  json obj;
  KINFER_RETURN_IF_ERROR(ParseObject(body, &obj, d));
  TokenizeRequest r;
  const json* c = Field(obj, "content");
  if (c == nullptr) return Invalid(d, "content", "'content' is required");
  KINFER_RETURN_IF_ERROR(GetString(obj, "content", &r.content, d));
  KINFER_RETURN_IF_ERROR(GetBool(obj, "add_special", &r.add_special, d));
  KINFER_RETURN_IF_ERROR(GetBool(obj, "parse_special", &r.parse_special, d));
  KINFER_RETURN_IF_ERROR(GetBool(obj, "with_pieces", &r.with_pieces, d));
  return r;
}

StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(std::string_view body, ErrorDetail* d) {
  json obj;
  KINFER_RETURN_IF_ERROR(ParseObject(body, &obj, d));
  const json* t = Field(obj, "tokens");
  if (t == nullptr) return Invalid(d, "tokens", "'tokens' is required");
  if (!t->is_array()) return Invalid(d, "tokens", "'tokens' must be an array of integers");
  std::vector<int32_t> ids;
  KINFER_RETURN_IF_ERROR(GetIdArray(*t, "tokens", &ids, d));
  return ids;
}

StatusOr<std::string> ParseCancelRequest(std::string_view body, ErrorDetail* d) {
  json obj;
  KINFER_RETURN_IF_ERROR(ParseObject(body, &obj, d));
  const json* id = Field(obj, "request_id");
  if (id == nullptr) return Invalid(d, "request_id", "'request_id' is required");
  if (!id->is_string() || id->get_ref<const std::string&>().empty() ||
      id->get_ref<const std::string&>().size() > 256) {
    return Invalid(d, "request_id", "'request_id' must be a non-empty string of at most 256 bytes");
  }
  return id->get<std::string>();
}

}  // namespace kinfer
