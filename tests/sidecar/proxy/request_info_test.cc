// Tests for ParseRequestInfo / RewriteBody / NormalizedRequestText: what the sidecar reads from an
// OpenAI request's headers and body, against the default classes (critical, standard, batch).
#include "sidecar/proxy/request_info.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/json_limits.h"

namespace kinfer {
namespace {

constexpr char kSkUnmappedSha256[] = "962428a14e89037c20d7eff5aeaca20577695313939aafe04ef1c868066fecba";

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

using Headers = std::map<std::string, std::string>;

class RequestInfoTest : public ::testing::Test {
 protected:
  RequestInfoTest() {
    config_.api_keys["sk-gold"] = {.class_name = "critical", .tenant = "team-a"};
    config_.api_keys["sk-plain"] = {};  // default class, keyed by itself
    config_.api_keys["sk-batch"] = {.class_name = "batch", .tenant = ""};
  }

  StatusOr<RequestInfo> Parse(std::string_view body, const Headers& headers = {}) {
    HeaderLookup lookup = [&headers](std::string_view name) -> std::optional<std::string_view> {
      auto it = headers.find(std::string(name));
      if (it == headers.end()) return std::nullopt;
      return std::string_view(it->second);
    };
    return ParseRequestInfo(path_, body, lookup, config_);
  }

  // Parses a body that must be accepted.
  RequestInfo MustParse(std::string_view body, const Headers& headers = {}) {
    StatusOr<RequestInfo> info = Parse(body, headers);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? std::move(*info) : RequestInfo{};
  }

  // The error message of a body that must be refused as INVALID_ARGUMENT.
  std::string ErrorOf(std::string_view body, const Headers& headers = {}) {
    StatusOr<RequestInfo> info = Parse(body, headers);
    EXPECT_FALSE(info.ok()) << "accepted: " << body;
    if (info.ok()) return "";
    EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
    return info.status().message();
  }

  SidecarConfig config_;
  std::string path_ = "/v1/chat/completions";  // the routed path requests are sent to
};

constexpr std::string_view kChat = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";

// ---- body ----

TEST_F(RequestInfoTest, NonJsonBodyIsInvalidArgument) {
  EXPECT_NE(ErrorOf("not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"model": "m")").find("not valid JSON"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("not valid JSON"), std::string::npos);
}

TEST_F(RequestInfoTest, NonObjectBodyIsInvalidArgument) {
  for (std::string_view body : {"[1,2]", "\"text\"", "42", "null", "true"}) {
    EXPECT_NE(ErrorOf(body).find("JSON object"), std::string::npos) << body;
  }
}

TEST_F(RequestInfoTest, ReadsTheFields) {
  RequestInfo info = MustParse(
      R"({"model":"llama","stream":true,"max_tokens":77,"temperature":0.5,"seed":9,"messages":[]})");
  EXPECT_EQ(info.model, "llama");
  EXPECT_TRUE(info.stream);
  EXPECT_EQ(info.max_tokens, 77);
  ASSERT_TRUE(info.temperature.has_value());
  EXPECT_DOUBLE_EQ(*info.temperature, 0.5);
  ASSERT_TRUE(info.seed.has_value());
  EXPECT_EQ(*info.seed, 9);
  EXPECT_TRUE(info.body.is_object());
  EXPECT_EQ(info.body["messages"], json::array());
}

TEST_F(RequestInfoTest, AbsentAndNullFieldsKeepDefaults) {
  RequestInfo info =
      MustParse(R"({"model":null,"stream":null,"max_tokens":null,"temperature":null,"seed":null})");
  EXPECT_EQ(info.model, "");
  EXPECT_FALSE(info.stream);
  EXPECT_EQ(info.max_tokens, 0);
  EXPECT_FALSE(info.temperature.has_value());
  EXPECT_FALSE(info.seed.has_value());
  EXPECT_TRUE(MustParse("{}").cache_control.empty());
}

TEST_F(RequestInfoTest, IntegerTemperatureIsAccepted) {
  RequestInfo info = MustParse(R"({"temperature":0})");
  ASSERT_TRUE(info.temperature.has_value());
  EXPECT_EQ(*info.temperature, 0.0);
}

TEST_F(RequestInfoTest, WrongFieldTypesNameTheField) {
  struct Case {
    std::string_view body;
    std::string_view field;
  };
  for (const Case& c :
       {Case{R"({"model":5})", "model"}, Case{R"({"model":["a"]})", "model"},
        Case{R"({"stream":"yes"})", "stream"}, Case{R"({"stream":1})", "stream"},
        Case{R"({"max_tokens":"10"})", "max_tokens"}, Case{R"({"max_tokens":10.5})", "max_tokens"},
        Case{R"({"max_completion_tokens":"10"})", "max_completion_tokens"},
        Case{R"({"max_completion_tokens":1.5})", "max_completion_tokens"},
        Case{R"({"temperature":"hot"})", "temperature"},
        Case{R"({"temperature":{}})", "temperature"}, Case{R"({"seed":1.5})", "seed"},
        Case{R"({"seed":"1"})", "seed"}}) {
    std::string message = ErrorOf(c.body);
    EXPECT_EQ(message.rfind(std::string(c.field) + ":", 0), 0u) << c.body << " -> " << message;
  }
}

TEST_F(RequestInfoTest, NegativeMaxTokensIsRefusedNamingTheField) {
  EXPECT_EQ(ErrorOf(R"({"max_tokens":-1})").rfind("max_tokens:", 0), 0u);
  EXPECT_EQ(ErrorOf(R"({"max_tokens":0})"), "max_tokens: must be >= 1");
  EXPECT_EQ(ErrorOf(R"({"max_tokens":0,"echo":false})"), "max_tokens: must be >= 1");
  // With echo, 0 scores the prompt: one step for the policies, and the body keeps its 0 when a
  // fallback model is chosen.
  RequestInfo scoring = MustParse(R"({"prompt":"x","max_tokens":0,"echo":true})");
  EXPECT_EQ(scoring.max_tokens, 1);
  EXPECT_EQ(json::parse(RewriteBody(scoring, "small", scoring.max_tokens))["max_tokens"], 0);
  // 2^63 does not wrap to a negative int64.
  EXPECT_EQ(ErrorOf(R"({"max_tokens":9223372036854775808})"),
            "max_tokens: must be at most 9223372036854775807");
  // A seed is any 64-bit integer, signed or not, as the runtime reads it.
  EXPECT_EQ(MustParse(R"({"seed":18446744073709551615})").seed, uint64_t{18446744073709551615u});
  EXPECT_EQ(MustParse(R"({"seed":-1})").seed, uint64_t{18446744073709551615u});
  EXPECT_EQ(ErrorOf(R"({"max_completion_tokens":-1})").rfind("max_completion_tokens:", 0), 0u);
}

TEST_F(RequestInfoTest, MaxCompletionTokensIsReadWhenMaxTokensIsAbsent) {
  EXPECT_EQ(MustParse(R"({"max_completion_tokens":40})").max_tokens, 40);
  EXPECT_EQ(MustParse(R"({"max_tokens":null,"max_completion_tokens":41})").max_tokens, 41);
}

// The runtime generates to max_completion_tokens where both are set; the policies must count
// that, not a smaller max_tokens beside it.
TEST_F(RequestInfoTest, MaxCompletionTokensWinsOverMaxTokensAsInTheRuntime) {
  EXPECT_EQ(MustParse(R"({"max_tokens":1,"max_completion_tokens":40})").max_tokens, 40);
  EXPECT_EQ(MustParse(R"({"max_completion_tokens":40,"max_tokens":1})").max_tokens, 40);
  EXPECT_EQ(MustParse(R"({"max_tokens":30,"max_completion_tokens":null})").max_tokens, 30);
  EXPECT_EQ(ErrorOf(R"({"max_tokens":30,"max_completion_tokens":0})"), "max_completion_tokens: must be >= 1");
  // Scoring is max_tokens 0 with echo only.
  EXPECT_EQ(ErrorOf(R"({"prompt":"x","max_completion_tokens":0,"echo":true})"),
            "max_completion_tokens: must be >= 1");
  // The degrade cap replaces both with the one the runtime then reads.
  RequestInfo info = MustParse(R"({"messages":[],"max_tokens":1,"max_completion_tokens":40})");
  json out = json::parse(RewriteBody(info, "", 4));
  EXPECT_EQ(out["max_tokens"], 4);
  EXPECT_FALSE(out.contains("max_completion_tokens"));
}

TEST_F(RequestInfoTest, AResponsesBodyIsReadByItsOwnFieldNames) {
  path_ = "/v1/responses";
  RequestInfo r = MustParse(R"({"model":"big","input":"hi","max_output_tokens":50})");
  EXPECT_TRUE(r.responses);
  EXPECT_EQ(r.max_tokens, 50);
  EXPECT_EQ(ErrorOf(R"({"input":"hi","max_output_tokens":0})").rfind("max_output_tokens:", 0), 0u);
  // The degrade cap goes where the runtime reads it.
  json out = json::parse(RewriteBody(r, "small", 16));
  EXPECT_EQ(out["max_output_tokens"], 16);
  EXPECT_FALSE(out.contains("max_tokens"));
  EXPECT_EQ(out["model"], "small");
  RequestInfo none = MustParse(R"({"input":[{"role":"user","content":"hi"}]})");
  EXPECT_TRUE(none.responses);
  EXPECT_EQ(json::parse(RewriteBody(none, "", 16))["max_output_tokens"], 16);
  // max_tokens is not a Responses field: the runtime ignores it, and so do the policies.
  EXPECT_EQ(MustParse(R"({"input":"hi","max_tokens":1,"max_output_tokens":32})").max_tokens, 32);
  EXPECT_EQ(MustParse(R"({"input":"hi","max_tokens":1})").max_tokens, 0);
  // The path decides, as the runtime routes: a /v1/responses body that also carries `messages`
  // or `prompt` is still a Response, its limit max_output_tokens (before, such a body was read
  // as chat: no limit seen, 256 estimated, while the runtime generated 5000).
  for (const char* body : {R"({"input":"x","messages":[],"max_output_tokens":5000})",
                           R"({"input":"x","prompt":[],"max_output_tokens":5000})",
                           R"({"input":"x","prompt":null,"max_tokens":1,"max_output_tokens":5000})"}) {
    RequestInfo odd = MustParse(body);
    EXPECT_TRUE(odd.responses) << body;
    EXPECT_EQ(odd.max_tokens, 5000) << body;
    EXPECT_EQ(json::parse(RewriteBody(odd, "", 16))["max_output_tokens"], 16) << body;
  }
  // Chat and completions bodies are not Responses ones, whatever else they carry.
  path_ = "/v1/chat/completions";
  EXPECT_FALSE(MustParse(R"({"messages":[],"input":"x","max_output_tokens":5})").responses);
  EXPECT_EQ(MustParse(R"({"messages":[],"input":"x","max_output_tokens":5})").max_tokens, 0);
  EXPECT_FALSE(MustParse(R"({"input":"x","max_tokens":7})").responses);
  EXPECT_EQ(MustParse(R"({"input":"x","max_tokens":7})").max_tokens, 7);
  path_ = "/v1/completions";
  EXPECT_FALSE(MustParse(R"({"prompt":"x"})").responses);
}

// ---- priority ----

TEST_F(RequestInfoTest, PriorityByClassName) {
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", "critical"}}).priority, 0);
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", "standard"}}).priority, 1);
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", " batch "}}).priority, 2);
}

TEST_F(RequestInfoTest, PriorityByIndex) {
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", "0"}}).priority, 0);
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", "1"}}).priority, 1);
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", "2"}}).priority, 2);
}

TEST_F(RequestInfoTest, UnknownPriorityListsTheClasses) {
  for (std::string_view value : {"gold", "3", "99999", "-1", "", "Critical"}) {
    std::string message = ErrorOf(kChat, {{"x-kinfer-priority", std::string(value)}});
    EXPECT_NE(message.find("x-kinfer-priority"), std::string::npos) << value;
    EXPECT_NE(message.find("critical, standard, batch"), std::string::npos) << message;
  }
}

TEST_F(RequestInfoTest, PriorityHeaderWinsOverTheApiKeyClass) {
  RequestInfo info =
      MustParse(kChat, {{"authorization", "Bearer sk-gold"}, {"x-kinfer-priority", "batch"}});
  EXPECT_EQ(info.priority, 2);
  EXPECT_EQ(info.rate_key, "tenant:team-a");
}

// Keys not authenticated (the default): the header names any class, as before. Authenticated
// (require_api_key): a key may lower its class, never raise it.
TEST_F(RequestInfoTest, WithRequiredKeysThePriorityHeaderCannotRaiseTheKeysClass) {
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-batch"}, {"x-kinfer-priority", "critical"}})
                .priority, 0);
  config_.require_api_key = true;
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-batch"}, {"x-kinfer-priority", "critical"}})
                .priority, 2);
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-plain"}, {"x-kinfer-priority", "0"}}).priority, 1);
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-gold"}, {"x-kinfer-priority", "batch"}}).priority,
            2);
  EXPECT_TRUE(MustParse(kChat, {{"x-api-key", "sk-gold"}}).key_mapped);
  EXPECT_FALSE(MustParse(kChat, {{"x-api-key", "sk-other"}}).key_mapped);
  EXPECT_FALSE(MustParse(kChat).key_mapped);
}

TEST_F(RequestInfoTest, PriorityFromTheApiKeyMap) {
  EXPECT_EQ(MustParse(kChat, {{"authorization", "Bearer sk-gold"}}).priority, 0);
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-gold"}}).priority, 0);
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-batch"}}).priority, 2);
  // A mapped key without a class gets the default class.
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-plain"}}).priority, 1);
}

TEST_F(RequestInfoTest, DefaultClassWithoutHeaderOrMappedKey) {
  EXPECT_EQ(MustParse(kChat).priority, 1);
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-unknown"}}).priority, 1);
  config_.default_class = "batch";
  EXPECT_EQ(MustParse(kChat).priority, 2);
}

// ---- API key and rate key ----

TEST_F(RequestInfoTest, BearerTokenIsTheApiKey) {
  EXPECT_EQ(MustParse(kChat, {{"authorization", "Bearer sk-123"}}).api_key, "sk-123");
  EXPECT_EQ(MustParse(kChat, {{"authorization", "bearer   sk-123 "}}).api_key, "sk-123");
  // Authorization wins over x-api-key.
  EXPECT_EQ(MustParse(kChat, {{"authorization", "Bearer a"}, {"x-api-key", "b"}}).api_key, "a");
  // A non-bearer Authorization falls back to x-api-key.
  EXPECT_EQ(MustParse(kChat, {{"authorization", "Basic dXNlcg=="}, {"x-api-key", "b"}}).api_key,
            "b");
  EXPECT_EQ(MustParse(kChat, {{"authorization", "Basic dXNlcg=="}}).api_key, "");
}

TEST_F(RequestInfoTest, RateKeyIsTenantThenKeyThenAnonymous) {
  EXPECT_EQ(MustParse(kChat, {{"authorization", "Bearer sk-gold"}}).rate_key, "tenant:team-a");
  // A mapped key of no tenant is its own caller under its digest, as an unmapped one: never
  // "tenant:<key>" (a key written like a tenant's name shared that tenant's bucket and cache).
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-plain"}}).rate_key.rfind("key:", 0), 0u);
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-plain"}}).rate_key.find("sk-plain"),
            std::string::npos);
  config_.api_keys["team-a"] = {};  // a tenantless key spelt as tenant team-a's name
  EXPECT_NE(MustParse(kChat, {{"x-api-key", "team-a"}}).rate_key, "tenant:team-a");
  // An unmapped key by its SHA-256 (echo -n sk-unmapped | sha256sum).
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-unmapped"}}).rate_key,
            "key:" + std::string(kSkUnmappedSha256));
  EXPECT_EQ(MustParse(kChat).rate_key, "anonymous");
  EXPECT_EQ(MustParse(kChat).api_key, "");
}

// A client that sends a tenant's name, or "anonymous", as its key is neither that tenant nor the
// anonymous clients: not their bucket, not their overrides, not their cache partition.
TEST_F(RequestInfoTest, NoKeyAClientSendsMeetsATenantsOrTheAnonymousBucket) {
  const RequestInfo tenant = MustParse(kChat, {{"authorization", "Bearer sk-gold"}});
  const RequestInfo posing = MustParse(kChat, {{"authorization", "Bearer team-a"}});
  EXPECT_NE(posing.rate_key, tenant.rate_key);
  EXPECT_NE(NormalizedRequestText("/v1/chat/completions", posing),
            NormalizedRequestText("/v1/chat/completions", tenant));
  EXPECT_NE(MustParse(kChat, {{"x-api-key", "anonymous"}}).rate_key, MustParse(kChat).rate_key);
  EXPECT_NE(MustParse(kChat, {{"x-api-key", "tenant:team-a"}}).rate_key, tenant.rate_key);
  // Every unmapped key, however long, is a fixed-size bucket key that does not hold the key.
  const std::string long_key(60 * 1024, 'k');
  const RequestInfo big = MustParse(kChat, {{"x-api-key", long_key}});
  EXPECT_EQ(big.rate_key.size(), 4u + 64u);
  EXPECT_EQ(big.rate_key.find("kkkk"), std::string::npos);
  // Messages name a tenant, never a key.
  EXPECT_EQ(tenant.rate_label, "tenant 'team-a'");
  EXPECT_EQ(posing.rate_label, "this API key");
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-plain"}}).rate_label, "this API key");
}

// ---- timeout ----

TEST_F(RequestInfoTest, TimeoutHeaderIsParsed) {
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-timeout", "500ms"}}).timeout, milliseconds(500));
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-timeout", "2s"}}).timeout, seconds(2));
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-timeout", "1.5"}}).timeout, milliseconds(1500));
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-timeout", " 3s "}}).timeout, seconds(3));
}

TEST_F(RequestInfoTest, BadTimeoutIsRefused) {
  // "1ns" and "1e9" too: the runtime, which gets the header, refuses them.
  for (std::string_view value :
       {"0", "0s", "-1s", "-2", "soon", "", "5 parsecs", "nan", "1ns", "1e9", "5h"}) {
    std::string message = ErrorOf(kChat, {{"x-kinfer-timeout", std::string(value)}});
    EXPECT_NE(message.find("x-kinfer-timeout"), std::string::npos) << value << ": " << message;
  }
}

TEST_F(RequestInfoTest, TimeoutDefaultsToTheClassTimeout) {
  EXPECT_EQ(MustParse(kChat).timeout, seconds(60));
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", "critical"}}).timeout, seconds(30));
  EXPECT_EQ(MustParse(kChat, {{"x-api-key", "sk-batch"}}).timeout, seconds(120));
  EXPECT_EQ(MustParse(kChat, {{"x-kinfer-priority", "batch"}, {"x-kinfer-timeout", "7s"}}).timeout,
            seconds(7));
}

// ---- token estimate, cache-control ----

TEST_F(RequestInfoTest, TokenEstimateIsPromptBytesOverFourPlusMaxTokens) {
  std::string body = R"({"max_tokens":100,"pad":"x"})";  // 28 bytes -> 7
  ASSERT_EQ(body.size(), 28u);
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 7 + 100);
  body = R"({"max_tokens":100,"pad":"xy"})";  // 29 bytes -> rounded up to 8
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 8 + 100);
}

TEST_F(RequestInfoTest, TokenEstimateUsesTheDefaultWithoutMaxTokens) {
  std::string body = R"({"pad":"abcdef"})";  // 16 bytes -> 4
  ASSERT_EQ(body.size(), 16u);
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 4 + kDefaultMaxTokensEstimate);
  body = R"({"max_completion_tokens":10})";  // 28 bytes -> 7
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 7 + 10);
}

TEST_F(RequestInfoTest, TokenEstimateCountsEveryChoiceOfEveryPrompt) {
  std::string body = R"({"max_tokens":10,"n":3,"pad":"abc"})";  // 35 bytes -> 9
  ASSERT_EQ(body.size(), 35u);
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 9 + 3 * 10);
  body = R"({"max_tokens":10,"n":2,"prompt":["a","b"]})";  // 42 bytes -> 11; 2 x 2 generations
  ASSERT_EQ(body.size(), 42u);
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 11 + 4 * 10);
  body = R"({"max_tokens":10,"prompt":[1,2,3,4,5]})";  // token ids: one prompt; 38 -> 10
  ASSERT_EQ(body.size(), 38u);
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 10 + 10);
  body = R"({"max_tokens":10,"n":2,"best_of":5})";  // 35 -> 9; best_of generations are made
  ASSERT_EQ(body.size(), 35u);
  EXPECT_DOUBLE_EQ(MustParse(body).token_estimate, 9 + 5 * 10);
}

TEST_F(RequestInfoTest, CacheControlIsKeptRaw) {
  EXPECT_EQ(MustParse(kChat, {{"cache-control", "No-Cache, max-age=0"}}).cache_control,
            "No-Cache, max-age=0");
}

// ---- RewriteBody ----

TEST_F(RequestInfoTest, RewriteBodyReplacesModelAndMaxTokens) {
  RequestInfo info = MustParse(
      R"({"model":"big","max_completion_tokens":900,"messages":[{"role":"user","content":"hi"}]})");
  json out = json::parse(RewriteBody(info, "small", 128));
  EXPECT_EQ(out["model"], "small");
  EXPECT_EQ(out["max_tokens"], 128);
  EXPECT_FALSE(out.contains("max_completion_tokens"));
  EXPECT_EQ(out["messages"], info.body["messages"]);
}

TEST_F(RequestInfoTest, RewriteBodyDropsTheBodysPriority) {
  RequestInfo info = MustParse(R"({"model":"m","priority":-100,"prompt":"x"})");
  EXPECT_TRUE(info.body_priority);
  EXPECT_FALSE(MustParse(R"({"model":"m","prompt":"x"})").body_priority);
  json out = json::parse(RewriteBody(info, "", 0));
  EXPECT_FALSE(out.contains("priority"));
  EXPECT_EQ(out["model"], "m");
  EXPECT_EQ(out["prompt"], "x");
}

TEST_F(RequestInfoTest, RewriteBodyLeavesWhatItIsNotAskedToChange) {
  RequestInfo info = MustParse(R"({"model":"big","max_completion_tokens":900,"stream":true})");
  json model_only = json::parse(RewriteBody(info, "small", 0));
  EXPECT_EQ(model_only["model"], "small");
  EXPECT_EQ(model_only["max_completion_tokens"], 900);
  EXPECT_FALSE(model_only.contains("max_tokens"));

  json cap_only = json::parse(RewriteBody(info, "", 64));
  EXPECT_EQ(cap_only["model"], "big");
  EXPECT_EQ(cap_only["max_tokens"], 64);
  EXPECT_FALSE(cap_only.contains("max_completion_tokens"));
  EXPECT_EQ(cap_only["stream"], true);

  EXPECT_EQ(json::parse(RewriteBody(info, "", 0)), info.body);
}

TEST_F(RequestInfoTest, RewriteBodyAddsModelWhenAbsent) {
  RequestInfo info = MustParse(R"({"prompt":"x"})");
  EXPECT_EQ(json::parse(RewriteBody(info, "small", 0))["model"], "small");
}

// ---- NormalizedRequestText ----

TEST_F(RequestInfoTest, NormalizedTextIgnoresKeyOrderAndWhitespace) {
  RequestInfo a =
      MustParse(R"({"model":"m","temperature":0,"messages":[{"role":"user","content":"hi"}]})");
  RequestInfo b = MustParse(
      "{ \"messages\" : [ { \"content\" : \"hi\", \"role\" : \"user\" } ],\n"
      "  \"temperature\": 0,\t\"model\": \"m\" }");
  EXPECT_EQ(NormalizedRequestText("/v1/chat/completions", a),
            NormalizedRequestText("/v1/chat/completions", b));
}

TEST_F(RequestInfoTest, NormalizedTextDiffersByPathAndContent) {
  RequestInfo a = MustParse(R"({"model":"m","prompt":"hi"})");
  RequestInfo b = MustParse(R"({"model":"m","prompt":"ho"})");
  EXPECT_NE(NormalizedRequestText("/v1/completions", a),
            NormalizedRequestText("/v1/chat/completions", a));
  EXPECT_NE(NormalizedRequestText("/v1/completions", a),
            NormalizedRequestText("/v1/completions", b));
  // Array order is meaningful (messages are a conversation).
  RequestInfo c = MustParse(R"({"messages":[1,2]})");
  RequestInfo d = MustParse(R"({"messages":[2,1]})");
  EXPECT_NE(NormalizedRequestText("/p", c), NormalizedRequestText("/p", d));
}

// The runtime's prefix cache gets the same partition: the caller, then the client's own tenant.
// No header a client sends reaches another caller's partition ("tenant:team-a" sent by an
// anonymous client stays under "anonymous/").
TEST_F(RequestInfoTest, TheRuntimesTenantIsTheCallerThenTheClientsTenant) {
  EXPECT_EQ(RuntimeTenant(MustParse("{}")), "anonymous");
  EXPECT_EQ(RuntimeTenant(MustParse("{}", {{"x-kinfer-tenant", "tenant:team-a"}})),
            "anonymous/tenant:team-a");
  EXPECT_EQ(RuntimeTenant(MustParse("{}", {{"authorization", "Bearer sk-gold"}})),
            "tenant:team-a");
  EXPECT_EQ(RuntimeTenant(MustParse("{}", {{"authorization", "Bearer sk-gold"},
                                           {"x-kinfer-tenant", "eu"}})),
            "tenant:team-a/eu");
  const std::string unmapped =
      RuntimeTenant(MustParse("{}", {{"authorization", "Bearer sk-someone"}}));
  EXPECT_EQ(unmapped.rfind("key:", 0), 0u) << unmapped;
  EXPECT_EQ(unmapped.find("sk-someone"), std::string::npos) << "the key itself never travels";
}

TEST_F(RequestInfoTest, NormalizedTextIsThePartitionThePathAndTheSortedBody) {
  RequestInfo a = MustParse(R"({"b":1,"a":2})");
  EXPECT_EQ(NormalizedRequestText("/v1/completions", a),
            "anonymous\n\n/v1/completions\n{\"a\":2,\"b\":1}");
}

// The same deterministic request from two tenants, two unmapped keys, or two x-kinfer-tenant
// values (the runtime's prefix-cache partition) never shares a cache entry: a hit would hand one
// caller another's answer and tell it what the other asked.
TEST_F(RequestInfoTest, NormalizedTextIsPartitionedByCaller) {
  const std::string body = R"({"model":"m","temperature":0,"prompt":"secret"})";
  auto text = [&](const Headers& h) {
    return NormalizedRequestText("/v1/completions", MustParse(body, h));
  };
  const std::string anon = text({});
  EXPECT_NE(anon, text({{"authorization", "Bearer sk-alice"}}));
  EXPECT_NE(text({{"authorization", "Bearer sk-alice"}}),
            text({{"authorization", "Bearer sk-bob"}}));
  EXPECT_NE(text({{"x-kinfer-tenant", "alice"}}), text({{"x-kinfer-tenant", "bob"}}));
  EXPECT_NE(anon, text({{"x-kinfer-tenant", "alice"}}));
  // One tenant's keys (sk-gold maps to team-a) share its partition.
  EXPECT_EQ(text({{"authorization", "Bearer sk-gold"}}),
            text({{"authorization", "Bearer sk-gold"}, {"x-kinfer-priority", "batch"}}));
}

TEST_F(RequestInfoTest, ABodyNestedTooDeeplyIsRefused) {
  const std::string ok = R"({"model":"m","x":)" + std::string(kMaxJsonNesting - 1, '[') +
                         std::string(kMaxJsonNesting - 1, ']') + "}";
  MustParse(ok);
  const std::string deep = R"({"model":"m","temperature":0,"x":)" + std::string(100000, '[') +
                           std::string(100000, ']') + "}";
  EXPECT_THAT(ErrorOf(deep),
              HasSubstr("deeper than " + std::to_string(kMaxJsonNesting) + " levels"));
}

TEST_F(RequestInfoTest, ABadFieldIsNamedAsTheErrorsParam) {
  HeaderLookup none = [](std::string_view) -> std::optional<std::string_view> {
    return std::nullopt;
  };
  const std::pair<std::string, std::string> cases[] = {
      {R"({"model":5})", "model"},
      {R"({"stream":"yes"})", "stream"},
      {R"({"max_tokens":0})", "max_tokens"},
      {R"({"max_completion_tokens":"x"})", "max_completion_tokens"},
      {R"({"temperature":"hot"})", "temperature"},
      {R"({"seed":1.5})", "seed"},
  };
  for (const auto& [body, field] : cases) {
    std::string param;
    EXPECT_FALSE(ParseRequestInfo(path_, body, none, config_, &param).ok()) << body;
    EXPECT_EQ(param, field) << body;
  }
  std::string param = "untouched";
  EXPECT_FALSE(ParseRequestInfo(path_, "[1]", none, config_, &param).ok());
  EXPECT_EQ(param, "untouched") << "not a field's fault";
}

TEST(FreshResponseIdentityTest, ACachedBodyGetsItsOwnIdAndCreated) {
  const std::string cached =
      R"({"id":"chatcmpl-abc123","object":"chat.completion","created":100,"choices":[]})";
  nlohmann::json j = nlohmann::json::parse(FreshResponseIdentity(cached, "sc-1-7", 2000));
  EXPECT_EQ(j["id"], "chatcmpl-sc-1-7");
  EXPECT_EQ(j["created"], 2000);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["choices"].is_array());
  EXPECT_EQ(nlohmann::json::parse(FreshResponseIdentity(R"({"id":"plain"})", "u", 1))["id"], "u");
}

// An upstream body is stored as it came: fields of unexpected types are left alone, never a
// throw (json::value() on `"object": null` aborted the sidecar at the next cache hit).
TEST(FreshResponseIdentityTest, FieldsOfOtherTypesAreLeftAsTheyAre) {
  for (const char* cached : {R"({"id":"chatcmpl-a","object":null,"created":1})",
                             R"({"id":"chatcmpl-a","object":{"x":1},"created":1})",
                             R"({"id":"chatcmpl-a","object":7})"}) {
    nlohmann::json j = nlohmann::json::parse(FreshResponseIdentity(cached, "u", 9));
    EXPECT_EQ(j["id"], "chatcmpl-u") << cached;
  }
  const std::string resp = R"({"id":"resp_a","object":"response","output":[
      {"id":"x","type":null},{"id":"y","type":3,"call_id":"c"},{"type":"message"}]})";
  nlohmann::json j = nlohmann::json::parse(FreshResponseIdentity(resp, "u", 9));
  EXPECT_EQ(j["id"], "resp_u");
  EXPECT_EQ(j["output"][0]["id"], "msg_u-0");
  EXPECT_EQ(j["output"][1]["call_id"], "call_u-1");
}

TEST(FreshResponseIdentityTest, ToolCallsGetIdsOfTheirOwn) {
  const std::string cached = R"({"id":"chatcmpl-abc","created":1,"choices":[{"index":0,
      "message":{"role":"assistant","content":null,"tool_calls":[
        {"id":"call_old","type":"function","function":{"name":"f","arguments":"{}"}},
        {"id":"call_old2","type":"function","function":{"name":"g","arguments":"{}"}}]},
      "finish_reason":"tool_calls"}]})";
  nlohmann::json j = nlohmann::json::parse(FreshResponseIdentity(cached, "sc-1-7", 2000));
  const nlohmann::json& calls = j["choices"][0]["message"]["tool_calls"];
  EXPECT_EQ(calls[0]["id"], "call_sc-1-7-0-0");
  EXPECT_EQ(calls[1]["id"], "call_sc-1-7-0-1");
  EXPECT_EQ(calls[1]["function"]["name"], "g");
}

TEST(FreshResponseIdentityTest, AResponseGetsItsOwnIdsThroughout) {
  const std::string cached = R"({"id":"resp_abc","object":"response","created_at":100,
      "output":[{"id":"msg_old","type":"message","content":[]},
                {"id":"fc_old","type":"function_call","call_id":"call_old","name":"f"}]})";
  nlohmann::json j = nlohmann::json::parse(FreshResponseIdentity(cached, "sc-1-7", 2000));
  EXPECT_EQ(j["id"], "resp_sc-1-7");
  EXPECT_EQ(j["created_at"], 2000);
  EXPECT_EQ(j["output"][0]["id"], "msg_sc-1-7-0");
  EXPECT_EQ(j["output"][1]["id"], "fc_sc-1-7-1");
  EXPECT_EQ(j["output"][1]["call_id"], "call_sc-1-7-1");
  EXPECT_EQ(j["output"][1]["name"], "f");
}

TEST(FreshResponseIdentityTest, OtherBodiesPassUnchanged) {
  for (const std::string& body :
       {std::string("not json"), std::string("[1,2]"), std::string(R"({"id":5})"),
        std::string(R"({"no_id":true})"), std::string(300, '[') + std::string(300, ']')}) {
    EXPECT_EQ(FreshResponseIdentity(body, "u", 1), body);
  }
}

}  // namespace
}  // namespace kinfer
