#include "sidecar/proxy/request_info.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include <openssl/evp.h>

#include "common/json_limits.h"
#include "common/timeout_header.h"

namespace kinfer {
namespace {

using nlohmann::json;

bool IsAllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}


StatusOr<int> PriorityFrom(std::string_view value, const SidecarConfig& config) {
  value = Trim(value);
  if (IsAllDigits(value) && value.size() < 4) {
    int index = std::stoi(std::string(value));
    if (index < static_cast<int>(config.classes.size())) return index;
  } else if (int index = config.ClassIndex(value); index >= 0) {
    return index;
  }
  std::string names;
  for (size_t i = 0; i < config.classes.size(); ++i) {
    names += (i ? ", " : "") + config.classes[i].name;
  }
  return InvalidArgument("x-kinfer-priority: unknown class '" + std::string(value) +
                         "' (classes: " + names + ", or their index)");
}

// Reads an optional number field; wrong types are errors naming the field.
template <typename T>
Status ReadNumber(const json& body, const char* field, std::optional<T>* out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return Status();
  if (!it->is_number()) return InvalidArgument(std::string(field) + ": must be a number");
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) {
      return InvalidArgument(std::string(field) + ": must be an integer");
    }
    // An unsigned value past T's range would wrap (2^63 read as a negative int64).
    if (it->is_number_unsigned() &&
        it->template get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return InvalidArgument(std::string(field) + ": must be at most " +
                             std::to_string(std::numeric_limits<T>::max()));
    }
  }
  *out = it->get<T>();
  return Status();
}

// Lowercase hex of the key's SHA-256: an unmapped key's bucket and cache partition, so that
// neither memory nor a message holds the key itself and every key, however long, costs the same.
std::string KeyDigest(std::string_view key) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(key.data(), key.size(), md, &n, EVP_sha256(), nullptr) != 1) n = 0;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

}  // namespace

std::string ApiKeyFrom(const HeaderLookup& header) {
  if (auto auth = header("authorization")) {
    std::string_view v = Trim(*auth);
    constexpr std::string_view kBearer = "bearer ";
    if (v.size() > kBearer.size()) {
      std::string prefix(v.substr(0, kBearer.size()));
      for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (prefix == kBearer) return std::string(Trim(v.substr(kBearer.size())));
    }
  }
  if (auto key = header("x-api-key")) return std::string(Trim(*key));
  return {};
}

std::string TenantRateKey(std::string_view tenant) { return "tenant:" + std::string(tenant); }

StatusOr<RequestInfo> ParseRequestInfo(std::string_view path, std::string_view body,
                                       const HeaderLookup& header,
                                       const SidecarConfig& config, std::string* param) {
  RequestInfo info;
  // An error in a body field names it, as the runtime's do (the JSON error's "param").
  auto field_error = [param](std::string_view field, Status s) {
    if (param != nullptr) *param = std::string(field);
    return s;
  };
  // Deeper bodies would overflow the stack in dump() (the cache key, the degrade rewrite).
  if (!JsonNestingWithin(body)) {
    return InvalidArgument("request body nests arrays and objects deeper than " +
                           std::to_string(kMaxJsonNesting) + " levels");
  }
  info.body = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (info.body.is_discarded()) return InvalidArgument("request body is not valid JSON");
  if (!info.body.is_object()) return InvalidArgument("request body must be a JSON object");

  if (auto it = info.body.find("model"); it != info.body.end() && !it->is_null()) {
    if (!it->is_string()) return field_error("model", InvalidArgument("model: must be a string"));
    info.model = it->get<std::string>();
  }
  if (auto it = info.body.find("stream"); it != info.body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return field_error("stream", InvalidArgument("stream: must be a boolean"));
    }
    info.stream = it->get<bool>();
  }
  // As the runtime routes it: by path, whatever the body holds (a body there with `messages` or
  // `prompt` too is still read as a Response, its `max_output_tokens` the limit).
  info.responses = path == "/v1/responses";
  // The limit the runtime generates to: a Responses body's `max_output_tokens` (its `max_tokens`
  // is no field of that API); otherwise `max_completion_tokens` where it is set, else
  // `max_tokens`. Another precedence would let a client show the policies a small limit and
  // have the runtime generate a large one.
  std::optional<int64_t> max_tokens;
  const char* max_tokens_field = info.responses ? "max_output_tokens" : "max_tokens";
  if (Status s = ReadNumber(info.body, max_tokens_field, &max_tokens); !s.ok()) {
    return field_error(max_tokens_field, s);
  }
  bool completion_limit = false;  // max_completion_tokens is the limit
  if (!info.responses) {
    std::optional<int64_t> completion;
    if (Status s = ReadNumber(info.body, "max_completion_tokens", &completion); !s.ok()) {
      return field_error("max_completion_tokens", s);
    }
    if (completion) {
      max_tokens = completion;
      max_tokens_field = "max_completion_tokens";
      completion_limit = true;
    }
  }
  // 0 only scores a prompt (completions' echo: the runtime generates nothing), as the runtime.
  const auto echo = info.body.find("echo");
  const bool scoring = max_tokens && *max_tokens == 0 && !info.responses && !completion_limit &&
                       echo != info.body.end() && echo->is_boolean() && echo->get<bool>();
  if (max_tokens && *max_tokens < 1 && !scoring) {
    return field_error(max_tokens_field,
                       InvalidArgument(std::string(max_tokens_field) + ": must be >= 1"));
  }
  // A scoring request is one step of the runtime's: 1 for the policies (never capped).
  info.max_tokens = scoring ? 1 : max_tokens.value_or(0);
  if (Status s = ReadNumber(info.body, "temperature", &info.temperature); !s.ok()) {
    return field_error("temperature", s);
  }
  // Any 64-bit integer, signed or not, as the runtime takes it (a negative one reinterpreted as
  // unsigned); only its presence matters here (the cache).
  if (auto it = info.body.find("seed"); it != info.body.end() && !it->is_null()) {
    if (!it->is_number_integer()) return field_error("seed", InvalidArgument("seed: must be an integer"));
    info.seed = it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  }

  info.api_key = ApiKeyFrom(header);
  const SidecarConfig::ApiKey* mapped = nullptr;
  if (!info.api_key.empty()) {
    if (auto it = config.api_keys.find(info.api_key); it != config.api_keys.end()) {
      mapped = &it->second;
    }
  }
  info.key_mapped = mapped != nullptr;
  const int key_class = mapped && !mapped->class_name.empty()
                            ? config.ClassIndex(mapped->class_name)
                            : config.ClassIndex(config.default_class);
  if (auto value = header("x-kinfer-priority")) {
    KINFER_ASSIGN_OR_RETURN(info.priority, PriorityFrom(*value, config));
    // With authenticated keys a client may lower its class, never raise it.
    if (config.require_api_key) info.priority = std::max(info.priority, key_class);
  } else {
    info.priority = key_class;
  }
  if (info.priority < 0) info.priority = 0;  // Validate() makes this unreachable

  // Three namespaces that cannot meet: a client sending the key "team-a" (or "anonymous") is
  // neither tenant team-a nor the anonymous clients.
  if (mapped && !mapped->tenant.empty()) {
    info.rate_key = TenantRateKey(mapped->tenant);
    info.rate_label = "tenant '" + mapped->tenant + "'";
  } else if (!info.api_key.empty()) {
    // A key of no tenant (mapped or not) is its own caller, under its digest: a mapped key
    // written like a tenant's name ("team-a") shared that tenant's bucket and partitions as
    // "tenant:<key>", and the key itself went upstream in x-kinfer-tenant.
    info.rate_key = "key:" + KeyDigest(info.api_key);
    info.rate_label = "this API key";
  } else {
    info.rate_key = "anonymous";
    info.rate_label = "requests without an API key";
  }

  info.timeout = config.classes[info.priority].timeout;
  if (auto value = header("x-kinfer-timeout")) {
    // The runtime's syntax (common/timeout_header.h): the header travels on to it.
    std::optional<std::chrono::milliseconds> timeout = ParseTimeoutHeader(Trim(*value));
    if (!timeout) {
      return InvalidArgument(
          "x-kinfer-timeout: expected a positive duration such as '2s', '500ms' or '1m' (at "
          "most a day), got '" +
          std::string(value->substr(0, 64)) + "'");
    }
    info.timeout = *timeout;
  }
  if (auto value = header("cache-control")) info.cache_control = std::string(*value);
  if (auto value = header("x-kinfer-tenant")) info.tenant_header = std::string(*value);
  if (auto it = info.body.find("priority"); it != info.body.end()) info.body_priority = true;

  // Generations: n choices of each prompt (completions' batch form lists several prompts).
  double generations = 1;
  if (auto it = info.body.find("n"); it != info.body.end() && it->is_number_integer()) {
    generations = std::max(1.0, it->get<double>());
  }
  // best_of generations are made (and billed) when it is above n.
  if (auto it = info.body.find("best_of"); it != info.body.end() && it->is_number_integer()) {
    generations = std::max(generations, it->get<double>());
  }
  if (auto it = info.body.find("prompt"); it != info.body.end() && it->is_array() && !it->empty() &&
                                          ((*it)[0].is_string() || (*it)[0].is_array())) {
    generations *= static_cast<double>(it->size());
  }
  double prompt_tokens = std::ceil(static_cast<double>(body.size()) / 4.0);
  info.token_estimate =
      prompt_tokens +
      generations *
          static_cast<double>(info.max_tokens > 0 ? info.max_tokens : kDefaultMaxTokensEstimate);
  return info;
}

std::string RewriteBody(const RequestInfo& info, std::string_view fallback_model,
                        int64_t max_tokens) {
  json body = info.body;
  body.erase("priority");
  if (!fallback_model.empty()) body["model"] = std::string(fallback_model);
  if (max_tokens > 0 && max_tokens != info.max_tokens) {  // the client's own stays as it is
    if (info.responses) {
      body["max_output_tokens"] = max_tokens;
    } else {
      body.erase("max_completion_tokens");
      body["max_tokens"] = max_tokens;
    }
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RuntimeTenant(const RequestInfo& info) {
  if (info.tenant_header.empty()) return info.rate_key;
  return info.rate_key + "/" + info.tenant_header;
}

std::string NormalizedRequestText(std::string_view path, const RequestInfo& info) {
  std::string text = info.rate_key;
  text += '\n';
  text += info.tenant_header;
  text += '\n';
  text += path;
  text += '\n';
  text += info.body.dump(-1, ' ', false, json::error_handler_t::replace);
  return text;
}

namespace {

// `key`'s string in object `j`, or "" (missing or another type: json::value() would throw, and
// a cached upstream body is not ours to trust).
std::string StringField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string FreshResponseIdentity(std::string body, std::string_view unique, int64_t created_unix) {
  if (!JsonNestingWithin(body)) return body;  // dump() would recurse once per level
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return body;
  auto id = j.find("id");
  if (id == j.end() || !id->is_string()) return body;
  if (StringField(j, "object") == "response") {
    // A Response: its id, creation time, output items' ids and calls' ids.
    *id = "resp_" + std::string(unique);
    if (auto created = j.find("created_at"); created != j.end() && created->is_number()) {
      *created = created_unix;
    }
    if (auto output = j.find("output"); output != j.end() && output->is_array()) {
      for (size_t k = 0; k < output->size(); ++k) {
        nlohmann::json& item = (*output)[k];
        if (!item.is_object()) continue;
        const std::string suffix = std::string(unique) + "-" + std::to_string(k);
        const std::string type = StringField(item, "type");
        if (item.contains("id") && item["id"].is_string()) {
          item["id"] = (type == "function_call" ? "fc_" : "msg_") + suffix;
        }
        if (item.contains("call_id") && item["call_id"].is_string()) {
          item["call_id"] = "call_" + suffix;
        }
      }
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  const std::string& old = id->get_ref<const std::string&>();
  const size_t dash = old.find('-');
  *id = (dash == std::string::npos ? std::string() : old.substr(0, dash + 1)) + std::string(unique);
  if (auto created = j.find("created"); created != j.end() && created->is_number()) {
    *created = created_unix;
  }
  // Tool calls' ids too: a client matches its tool results to calls by them.
  if (auto choices = j.find("choices"); choices != j.end() && choices->is_array()) {
    for (size_t c = 0; c < choices->size(); ++c) {
      nlohmann::json& choice = (*choices)[c];
      if (!choice.is_object() || !choice.contains("message") || !choice["message"].is_object())
        continue;
      nlohmann::json& message = choice["message"];
      auto calls = message.find("tool_calls");
      if (calls == message.end() || !calls->is_array()) continue;
      for (size_t k = 0; k < calls->size(); ++k) {
        nlohmann::json& call = (*calls)[k];
        if (call.is_object() && call.contains("id") && call["id"].is_string()) {
          call["id"] =
              "call_" + std::string(unique) + "-" + std::to_string(c) + "-" + std::to_string(k);
        }
      }
    }
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kinfer
