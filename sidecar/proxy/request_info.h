// RequestInfo: what the sidecar needs to know about one inbound OpenAI request, read from its
// headers and JSON body, and the body rewrite a degraded request gets.
//
// Contract:
//  * ParseRequestInfo accepts a body that is a JSON object (anything else is INVALID_ARGUMENT with
//    a message fit for a 400 body). It reads `model`, `stream`, the token limit as the runtime
//    does (`max_completion_tokens` where set, else `max_tokens`; the Responses API's
//    `max_output_tokens` only), `temperature`, `seed` (any 64-bit integer, signed or not);
//    a request to /v1/responses (the routed path) is a Responses API request, as the runtime routes
//    it whatever its body holds (`responses`: the degrade cap is written as `max_output_tokens`);
//    a field of the wrong type is
//    INVALID_ARGUMENT naming it (the upstream would reject it too; the sidecar does so before
//    queueing it).
//  * Headers are passed as a lookup function over lowercased names, so this file knows nothing
//    of the HTTP library.
//  * Priority: `x-kinfer-priority` names a class ("critical") or gives its index ("0"); an unknown
//    value is INVALID_ARGUMENT. Without the header, the API key's class, else the default class.
//  * API key: `Authorization: Bearer <key>`, else `x-api-key`. Rate limits are keyed by the key's
//    tenant when the key is mapped ("tenant:<name>"; a mapped key without a tenant is its own
//    tenant), by the SHA-256 of the key otherwise ("key:<hex>"), and "anonymous" without a key:
//    no key a client sends can share a tenant's bucket, limits or cache partition, a bucket costs
//    the same however long the key, and no message names a key (rate_label).
//  * Timeout: `x-kinfer-timeout` as a duration ("500ms", "2s", "1.5"); must be > 0. Without it,
//    the class default. The deadline is arrival + timeout: the latest time the request may start.
//  * Token estimate for the tokens/s limit: the whole body's bytes / 4 (rounded up; more than
//    the prompt: its JSON, tools and wrappers count) + max_tokens (or
//    kDefaultMaxTokensEstimate when the client set none) for each generation: `n` (or `best_of`
//    when larger) of each prompt (completions' batch form lists several).
//  * Cache key text: the caller's partition (rate key, then the x-kinfer-tenant header), the
//    request path, and the body re-serialised with sorted keys (nlohmann's object order), so key
//    order and whitespace do not split the cache, and one tenant or key never gets, or learns
//    from a hit, what another asked.
//  * A body nested deeper than kMaxJsonNesting (common/json_limits.h) is INVALID_ARGUMENT.
//
// Pure; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "sidecar/config/sidecar_config.h"

namespace kinfer {

// Returns the header's value, or nullopt when absent. Names are lowercase.
using HeaderLookup = std::function<std::optional<std::string_view>(std::string_view name)>;

inline constexpr int64_t kDefaultMaxTokensEstimate = 256;

struct RequestInfo {
  nlohmann::json body;  // the parsed body (a JSON object)
  std::string model;
  bool stream = false;
  int64_t max_tokens = 0;  // 0 = the client set none; 1 for a scoring request (0 with echo)
  std::optional<double> temperature;
  std::optional<uint64_t> seed;

  int priority = 0;                    // class index, 0 = most important
  std::string api_key;                 // "" when none
  bool key_mapped = false;             // api_key is one of config.api_keys
  std::string rate_key;                // "tenant:<name>", "key:<sha-256 hex>" or "anonymous"
  std::string rate_label;              // how messages name it, never the key itself
  std::string tenant_header;           // x-kinfer-tenant as sent ("" when absent)
  std::chrono::nanoseconds timeout{};  // from the header or the class default
  double token_estimate = 0;
  std::string cache_control;   // raw Cache-Control header, "" when absent
  bool body_priority = false;  // the body has vLLM's `priority` field (RewriteBody drops it)
  bool responses = false;      // a /v1/responses body (its limit is `max_output_tokens`)
};

// On an error in a body field, `param` (when given) gets the field's name, for the JSON error's
// "param"; it is left alone otherwise.
// `path`: the request's routed path (request_path.h), which decides how the body reads.
StatusOr<RequestInfo> ParseRequestInfo(std::string_view path, std::string_view body,
                                       const HeaderLookup& header, const SidecarConfig& config,
                                       std::string* param = nullptr);

// The API key a request carries: `Authorization: Bearer <key>` (the scheme in any case), else
// `x-api-key`; "" when neither.
std::string ApiKeyFrom(const HeaderLookup& header);

// The rate key of tenant `tenant` (what rate_limits.overrides names are looked up as).
std::string TenantRateKey(std::string_view tenant);

// The body to send upstream when it must change: `model` replaced when fallback_model is not
// empty, `max_tokens` set when max_tokens > 0 and not the request's own (info.max_tokens), and
// then `max_completion_tokens` dropped so the two cannot disagree (a Responses body: its
// `max_output_tokens` set instead), and vLLM's `priority` field
// dropped: the runtime orders its queue by the x-kinfer-priority header the sidecar sets to the
// request's class, and a body field (which the runtime would prefer) let a client of any class jump
// ahead there.
std::string RewriteBody(const RequestInfo& info, std::string_view fallback_model,
                        int64_t max_tokens);

// The x-kinfer-tenant sent to the runtime, which partitions its prefix cache by it: the caller
// (rate_key: a mapped key's tenant, an unmapped key's SHA-256, or "anonymous"), then "/" and the
// client's own x-kinfer-tenant when it sent one. As the response cache, so a client can split its
// own traffic but never reach another caller's prefix cache (whose hits would show in its TTFT).
std::string RuntimeTenant(const RequestInfo& info);

// "<rate key>\n<tenant header>\n<path>\n<body with sorted keys>" (see the contract).
std::string NormalizedRequestText(std::string_view path, const RequestInfo& info);

// A cached completion body as a new response: its `id` gets `unique` in place of what followed
// its prefix (the text up to the first '-': "chatcmpl-", "cmpl-"), and a numeric `created`
// becomes `created_unix`, so that no two answers share an id (clients log and deduplicate by
// it); each tool call's id becomes "call_<unique>-<choice>-<call>". A body that is not a JSON
// object with a string `id` is returned as it is.
std::string FreshResponseIdentity(std::string body, std::string_view unique, int64_t created_unix);

}  // namespace kinfer
