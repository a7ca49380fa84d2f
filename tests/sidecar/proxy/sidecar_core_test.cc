// Tests for SidecarCore: the decision order (draining -> rate limit -> cache -> degrade ->
// admission), the breaker at start, completion and dispatch, reload, /stats and the counters,
// all driven by a fake clock (a TimePoint advanced by hand) and real policy classes.
#include "sidecar/proxy/sidecar_core.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kinfer {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using Action = SidecarCore::Action;
using Result = SidecarCore::Result;
using TimePoint = SidecarCore::TimePoint;
using Verdict = SidecarCore::Verdict;
using Headers = std::map<std::string, std::string>;
using Ids = std::vector<SidecarCore::RequestId>;

constexpr std::string_view kPath = "/v1/chat/completions";
constexpr std::string_view kDeterministic =
    R"({"model":"big","temperature":0,"messages":[{"role":"user","content":"hi"}]})";
constexpr std::string_view kSampled =
    R"({"model":"big","temperature":0.7,"messages":[{"role":"user","content":"hi"}]})";

class SidecarCoreTest : public ::testing::Test {
 protected:
  SidecarCoreTest() {
    // Roomy by default; tests tighten what they exercise.
    config_.admission.max_concurrency = 8;
    config_.admission.reserved_for_top = 0;
  }

  // Builds the core under test from config_ (call after adjusting config_).
  void Init() {
    Status valid = config_.Validate();
    ASSERT_TRUE(valid.ok()) << valid.ToString();
    std::vector<std::string> names;
    for (const PriorityClassConfig& c : config_.classes) names.push_back(c.name);
    metrics_ = std::make_unique<SidecarMetrics>(names, config_.ttft_buckets, config_.e2e_buckets);
    core_ = std::make_unique<SidecarCore>(config_, metrics_.get());
  }

  // The fallback model "small", served by its own upstream (not guarded by the breaker).
  void UseFallbackUpstream() {
    config_.fallback_model = "small";
    config_.fallback_upstream_text = "http://127.0.0.1:9000";
    config_.fallback_upstream = {.host = "127.0.0.1", .port = 9000, .base_path = ""};
    config_.has_fallback_upstream = true;
  }

  // The count-based breaker of the brief: 4 calls, 2 failures open it for 10 s, one probe.
  void UseSmallBreaker() {
    config_.breaker.window_type = CircuitBreakerWindowType::kCountBased;
    config_.breaker.window_size = 4;
    config_.breaker.minimum_calls = 4;
    config_.breaker.failure_rate_threshold = 50;
    config_.breaker.open_duration = seconds(10);
    config_.breaker.half_open_permitted_calls = 1;
  }

  static RequestInfo Info(std::string_view body, const Headers& headers, const SidecarConfig& c) {
    HeaderLookup lookup = [&headers](std::string_view name) -> std::optional<std::string_view> {
      auto it = headers.find(std::string(name));
      if (it == headers.end()) return std::nullopt;
      return std::string_view(it->second);
    };
    StatusOr<RequestInfo> info = ParseRequestInfo("/v1/chat/completions", body, lookup, c);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? std::move(*info) : RequestInfo{};
  }
  RequestInfo Info(std::string_view body = kSampled, const Headers& headers = {}) const {
    return Info(body, headers, config_);
  }
  RequestInfo OfClass(std::string_view cls, std::string_view body = kSampled) const {
    return Info(body, {{"x-kinfer-priority", std::string(cls)}});
  }

  Verdict Arrive(SidecarCore::RequestId id, const RequestInfo& info,
                 std::string_view path = kPath) {
    return core_->OnArrival(id, path, info, now_);
  }

  // Arrives, starts and finishes one primary call with `result` (it must be admitted at once).
  void Call(SidecarCore::RequestId id, Result result) {
    Verdict v = Arrive(id, Info());
    ASSERT_EQ(v.action, Action::kStart) << v.reason;
    ASSERT_FALSE(core_->OnStart(id, v.route, 1, now_).has_value());
    core_->OnFinished(id, v.route, result, milliseconds(50), now_);
  }

  // The value of one series in the /metrics text ("name{labels}"), or -1 when absent.
  double Metric(std::string_view series) const {
    std::istringstream text(metrics_->ExposeText());
    std::string line;
    const std::string prefix = std::string(series) + " ";
    while (std::getline(text, line)) {
      if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
    }
    return -1;
  }

  SidecarConfig config_;
  std::unique_ptr<SidecarMetrics> metrics_;
  std::unique_ptr<SidecarCore> core_;
  TimePoint now_ = TimePoint{} + hours(100);
};

CachedResponse Response(std::string body) {
  return CachedResponse{
      .status = 200, .content_type = "application/json", .body = std::move(body), .complete = true};
}

// ---- RetryAfterSeconds ----

TEST(RetryAfterSecondsTest, RoundsUpToAtLeastOneSecond) {
  EXPECT_EQ(RetryAfterSeconds(nanoseconds(0)), 1);
  EXPECT_EQ(RetryAfterSeconds(nanoseconds(1)), 1);
  EXPECT_EQ(RetryAfterSeconds(seconds(1)), 1);
  EXPECT_EQ(RetryAfterSeconds(seconds(1) + nanoseconds(1)), 2);
  EXPECT_EQ(RetryAfterSeconds(milliseconds(9500)), 10);
}

// ---- rate limits ----

// rate_limits.overrides name tenants: a key mapped to the tenant gets its limits and its bucket; a
// client sending the tenant's name as its key gets neither (it cannot drain the tenant's bucket),
// and no 429 names the key it sent.
TEST_F(SidecarCoreTest, OverridesAreTheTenantsAndNoKeyAClientSendsReachesThem) {
  config_.api_keys["sk-gold"] = {.class_name = "", .tenant = "team-a"};
  config_.rate_limits.default_limit.requests_per_second = 1;
  config_.rate_limits.default_limit.request_burst = 1;
  config_.rate_limits.overrides["team-a"] = {.requests_per_second = 1, .request_burst = 3};
  Init();
  const RequestInfo tenant = Info(kSampled, {{"authorization", "Bearer sk-gold"}});
  const RequestInfo posing = Info(kSampled, {{"authorization", "Bearer team-a"}});
  SidecarCore::RequestId id = 1;
  // The impostor has the default limit (1) in a bucket of its own.
  EXPECT_EQ(Arrive(id++, posing).action, Action::kStart);
  Verdict refused = Arrive(id++, posing);
  ASSERT_EQ(refused.action, Action::kReject);
  EXPECT_EQ(refused.message.find("team-a"), std::string::npos) << refused.message;
  EXPECT_NE(refused.message.find("this API key"), std::string::npos) << refused.message;
  // The tenant still has its whole burst of 3.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Arrive(id++, tenant).action, Action::kStart) << i;
  Verdict over = Arrive(id++, tenant);
  ASSERT_EQ(over.action, Action::kReject);
  EXPECT_NE(over.message.find("tenant 'team-a'"), std::string::npos) << over.message;
}

TEST_F(SidecarCoreTest, RateLimitRejects429WithRetryAfterAndReason) {
  config_.rate_limits.default_limit.requests_per_second = 1;
  config_.rate_limits.default_limit.request_burst = 1;
  Init();
  Verdict first = Arrive(1, Info());
  EXPECT_EQ(first.action, Action::kStart);

  Verdict second = Arrive(2, Info());
  ASSERT_EQ(second.action, Action::kReject);
  EXPECT_EQ(second.http_status, 429);
  EXPECT_EQ(second.reason, "rate_limited_requests");
  EXPECT_NE(second.message.find("without an API key"), std::string::npos) << second.message;
  ASSERT_TRUE(second.retry_after.has_value());
  EXPECT_GT(*second.retry_after, nanoseconds(0));
  EXPECT_LE(*second.retry_after, seconds(1));
  EXPECT_EQ(RetryAfterSeconds(*second.retry_after), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="rate_limited_requests"})"),
            1);
  // A refused request takes no admission slot.
  EXPECT_EQ(core_->outstanding(), 1u);

  // Another key has its own bucket; the anonymous one refills after a second.
  EXPECT_EQ(Arrive(3, Info(kSampled, {{"x-api-key", "other"}})).action, Action::kStart);
  now_ += seconds(1);
  EXPECT_EQ(Arrive(4, Info()).action, Action::kStart);
}

TEST_F(SidecarCoreTest, TokenRateLimitRejectsWithRetryAfter) {
  config_.rate_limits.default_limit.tokens_per_second = 100;
  config_.rate_limits.default_limit.token_burst = 150;
  Init();
  RequestInfo info = Info(R"({"max_tokens":90})");  // 17 bytes: 5 + 90 tokens
  EXPECT_EQ(Arrive(1, info).action, Action::kStart);
  Verdict v = Arrive(2, info);
  ASSERT_EQ(v.action, Action::kReject);
  EXPECT_EQ(v.http_status, 429);
  EXPECT_EQ(v.reason, "rate_limited_tokens");
  ASSERT_TRUE(v.retry_after.has_value());
  EXPECT_GT(*v.retry_after, nanoseconds(0));
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="rate_limited_tokens"})"),
            1);
}

TEST_F(SidecarCoreTest, RequestOverTheTokenBurstIsRejectedWithoutRetryAfter) {
  config_.rate_limits.default_limit.tokens_per_second = 100;
  config_.rate_limits.default_limit.token_burst = 100;
  Init();
  Verdict v = Arrive(1, Info(R"({"max_tokens":1000})"));
  ASSERT_EQ(v.action, Action::kReject);
  EXPECT_EQ(v.http_status, 429);
  EXPECT_EQ(v.reason, "token_limit_exceeded");
  EXPECT_FALSE(v.retry_after.has_value());
  // A request within the burst still passes: the refused one took nothing.
  EXPECT_EQ(Arrive(2, Info(R"({"max_tokens":50})")).action, Action::kStart);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="token_limit_exceeded"})"),
            1);
}

TEST_F(SidecarCoreTest, RateLimitComesBeforeTheCache) {
  config_.rate_limits.default_limit.requests_per_second = 1;
  config_.rate_limits.default_limit.request_burst = 1;
  Init();
  Verdict first = Arrive(1, Info(kDeterministic));
  ASSERT_TRUE(first.cache_key.has_value());
  core_->StoreInCache(*first.cache_key, Response("{\"cached\":true}"), now_);
  EXPECT_EQ(Arrive(2, Info(kDeterministic)).http_status, 429);
}

// ---- cache ----

TEST_F(SidecarCoreTest, DeterministicRequestMissesThenHitsAfterStore) {
  Init();
  Verdict miss = Arrive(1, Info(kDeterministic));
  ASSERT_EQ(miss.action, Action::kStart);
  ASSERT_TRUE(miss.cache_key.has_value());
  EXPECT_EQ(Metric(R"(kinfer_sidecar_cache_lookups_total{result="miss"})"), 1);
  ASSERT_FALSE(core_->OnStart(1, miss.route, 1, now_).has_value());
  core_->StoreInCache(*miss.cache_key, Response("{\"answer\":42}"), now_);
  core_->OnFinished(1, miss.route, Result::kSuccess, milliseconds(100), now_);

  // Same request, keys reordered and spaced: a hit, which takes no admission slot.
  Verdict hit = Arrive(2, Info(R"({ "messages":[{"content":"hi","role":"user"}],
                                    "temperature":0, "model":"big" })"));
  ASSERT_EQ(hit.action, Action::kCacheHit);
  EXPECT_EQ(hit.cached.status, 200);
  EXPECT_EQ(hit.cached.body, "{\"answer\":42}");
  EXPECT_EQ(hit.cached.content_type, "application/json");
  EXPECT_EQ(core_->outstanding(), 0u);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_cache_lookups_total{result="hit"})"), 1);

  // Another path is another request.
  EXPECT_EQ(Arrive(3, Info(kDeterministic), "/v1/completions").action, Action::kStart);
}

TEST_F(SidecarCoreTest, SeededRequestIsCacheable) {
  Init();
  Verdict v = Arrive(1, Info(R"({"model":"big","temperature":0.9,"seed":7,"prompt":"x"})"));
  EXPECT_TRUE(v.cache_key.has_value());
}

TEST_F(SidecarCoreTest, NoCacheHeaderBypassesTheCache) {
  Init();
  Verdict first = Arrive(1, Info(kDeterministic));
  ASSERT_TRUE(first.cache_key.has_value());
  core_->StoreInCache(*first.cache_key, Response("{\"answer\":42}"), now_);

  Verdict bypass = Arrive(2, Info(kDeterministic, {{"cache-control", "no-cache"}}));
  EXPECT_EQ(bypass.action, Action::kStart);
  EXPECT_FALSE(bypass.cache_key.has_value());
  Verdict no_store = Arrive(3, Info(kDeterministic, {{"cache-control", "No-Store"}}));
  EXPECT_EQ(no_store.action, Action::kStart);
  EXPECT_FALSE(no_store.cache_key.has_value());
  // Only the first arrival looked the cache up.
  EXPECT_EQ(Metric(R"(kinfer_sidecar_cache_lookups_total{result="miss"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_cache_lookups_total{result="hit"})"), 0);
}

TEST_F(SidecarCoreTest, NonDeterministicRequestIsNeverCached) {
  Init();
  for (std::string_view body : {kSampled, std::string_view(R"({"model":"big","prompt":"x"})")}) {
    Verdict v = Arrive(1, Info(body));
    EXPECT_EQ(v.action, Action::kStart);
    EXPECT_FALSE(v.cache_key.has_value()) << body;
    core_->OnFinished(1, v.route, Result::kIgnored, {}, now_);
  }
  // A deterministic but streamed request is not cached either (the proxy relays it unbuffered).
  EXPECT_FALSE(Arrive(2, Info(R"({"temperature":0,"stream":true,"prompt":"x"})")).cache_key);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_cache_lookups_total{result="miss"})"), 0);
}

TEST_F(SidecarCoreTest, DisabledCacheGivesNoKey) {
  config_.cache_enabled = false;
  Init();
  Verdict v = Arrive(1, Info(kDeterministic));
  EXPECT_EQ(v.action, Action::kStart);
  EXPECT_FALSE(v.cache_key.has_value());
}

// ---- admission ----

TEST_F(SidecarCoreTest, ConcurrencyOneQueuesTheSecondAndDispatchesItOnFinish) {
  config_.admission.max_concurrency = 1;
  Init();
  Verdict first = Arrive(1, Info());
  ASSERT_EQ(first.action, Action::kStart);
  Verdict second = Arrive(2, Info());
  ASSERT_EQ(second.action, Action::kQueued);
  EXPECT_EQ(core_->outstanding(), 2u);

  ASSERT_FALSE(core_->OnStart(1, first.route, 1, now_).has_value());
  now_ += milliseconds(200);
  AdmissionQueue::Dispatch d = core_->OnFinished(1, first.route, Result::kSuccess,
                                                 milliseconds(200), now_);
  EXPECT_EQ(d.start, Ids{2});
  EXPECT_TRUE(d.expired.empty());
  EXPECT_EQ(core_->outstanding(), 1u);
  ASSERT_FALSE(core_->OnStart(2, second.route, 1, now_).has_value());
  EXPECT_TRUE(core_->OnFinished(2, second.route, Result::kSuccess, milliseconds(200), now_)
                  .start.empty());
  EXPECT_EQ(core_->outstanding(), 0u);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_admitted_total{class="standard"})"), 2);
}

TEST_F(SidecarCoreTest, FullQueueRejects503WithRetryAfter) {
  config_.admission.max_concurrency = 1;
  config_.admission.max_queue_total = 1;
  config_.admission.max_queue_per_class = 1;
  Init();
  EXPECT_EQ(Arrive(1, Info()).action, Action::kStart);
  EXPECT_EQ(Arrive(2, Info()).action, Action::kQueued);
  Verdict v = Arrive(3, Info());
  ASSERT_EQ(v.action, Action::kReject);
  EXPECT_EQ(v.http_status, 503);
  EXPECT_EQ(v.reason, "queue_full");
  ASSERT_TRUE(v.retry_after.has_value());
  EXPECT_GE(*v.retry_after, config_.admission.min_retry_after);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="queue_full"})"), 1);
}

TEST_F(SidecarCoreTest, ExpireReturnsQueuedRequestsPastTheirDeadline) {
  config_.admission.max_concurrency = 1;
  Init();
  Verdict first = Arrive(1, Info());
  ASSERT_EQ(first.action, Action::kStart);
  ASSERT_EQ(Arrive(2, Info(kSampled, {{"x-kinfer-timeout", "2s"}})).action, Action::kQueued);
  ASSERT_EQ(Arrive(3, Info(kSampled, {{"x-kinfer-timeout", "30s"}})).action, Action::kQueued);

  now_ += seconds(1);
  EXPECT_TRUE(core_->Expire(now_).empty());
  now_ += seconds(2);
  EXPECT_EQ(core_->Expire(now_), Ids{2});
  EXPECT_TRUE(core_->Expire(now_).empty());
  EXPECT_EQ(core_->outstanding(), 2u);
  // The expired one is gone: the next to start is 3.
  EXPECT_EQ(core_->OnFinished(1, first.route, Result::kSuccess, seconds(3), now_).start, Ids{3});
}

TEST_F(SidecarCoreTest, CancelRemovesAQueuedRequestOnly) {
  config_.admission.max_concurrency = 1;
  Init();
  Verdict first = Arrive(1, Info());
  ASSERT_EQ(first.action, Action::kStart);
  ASSERT_EQ(Arrive(2, Info()).action, Action::kQueued);
  EXPECT_FALSE(core_->Cancel(1));  // in flight, not queued
  EXPECT_TRUE(core_->Cancel(2));
  EXPECT_FALSE(core_->Cancel(2));
  EXPECT_FALSE(core_->Cancel(99));
  EXPECT_EQ(core_->outstanding(), 1u);
  EXPECT_TRUE(core_->OnFinished(1, first.route, Result::kIgnored, {}, now_).start.empty());
  EXPECT_EQ(core_->outstanding(), 0u);
}

// ---- circuit breaker ----

class SidecarCoreBreakerTest : public SidecarCoreTest {
 protected:
  // Four failed primary calls: the breaker opens at now_.
  void Trip() {
    for (SidecarCore::RequestId id = 1; id <= 4; ++id) Call(id, Result::kFailure);
  }
};

TEST_F(SidecarCoreBreakerTest, FailuresOpenTheBreakerAndOnStartRefuses) {
  UseSmallBreaker();
  Init();
  // Admitted while CLOSED, started after the breaker opened.
  Verdict late = Arrive(100, Info());
  ASSERT_EQ(late.action, Action::kStart);
  EXPECT_TRUE(core_->Ready(now_));
  Trip();
  EXPECT_FALSE(core_->Ready(now_));

  now_ += seconds(1);
  std::optional<nanoseconds> refused = core_->OnStart(100, late.route, 1, now_);
  ASSERT_TRUE(refused.has_value());
  EXPECT_GT(*refused, seconds(8));
  EXPECT_LE(*refused, seconds(10));
  EXPECT_EQ(RetryAfterSeconds(*refused), 9);
  core_->OnFinished(100, late.route, Result::kIgnored, {}, now_);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="breaker_open"})"), 1);
  EXPECT_EQ(core_->outstanding(), 0u);

  core_->UpdateGauges(now_);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_breaker_state{state="OPEN"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_breaker_state{state="CLOSED"})"), 0);
}

// Calls started while CLOSED that end during HALF_OPEN are no probes: a success does not close
// the breaker for the probe still out, and a client leaving does not hand back a probe permit.
TEST_F(SidecarCoreBreakerTest, OutcomesOfCallsFromAnEarlierStateAreNotProbes) {
  UseSmallBreaker();
  Init();
  auto start = [&](SidecarCore::RequestId id) {
    Verdict v = Arrive(id, Info());
    EXPECT_EQ(v.action, Action::kStart);
    return std::make_pair(v.route, core_->OnStart(id, v.route, 1, now_));
  };
  auto state_is = [&](const char* state) {
    core_->UpdateGauges(now_);
    return Metric(std::string(R"(kinfer_sidecar_breaker_state{state=")") + state + "\"}") == 1;
  };
  const auto [a_route, a_refused] = start(100);  // a long stream, started while CLOSED
  const auto [b_route, b_refused] = start(101);  // another
  ASSERT_FALSE(a_refused.has_value());
  ASSERT_FALSE(b_refused.has_value());
  Trip();
  now_ += seconds(10);  // HALF_OPEN: one probe
  const auto [p_route, p_refused] = start(200);
  ASSERT_FALSE(p_refused.has_value());
  EXPECT_TRUE(state_is("HALF_OPEN"));
  core_->OnFinished(100, a_route, Result::kSuccess, milliseconds(50), now_);
  EXPECT_TRUE(state_is("HALF_OPEN"));  // not closed by a call that was no probe
  core_->OnFinished(101, b_route, Result::kIgnored, {}, now_);
  // Still one probe at a time: a new request finds the breaker down (503, no fallback here).
  Verdict q = Arrive(300, Info());
  EXPECT_EQ(q.action, Action::kReject);
  EXPECT_EQ(q.reason, "breaker_open");
  // The probe's own verdict decides.
  core_->OnFinished(200, p_route, Result::kFailure, milliseconds(50), now_);
  EXPECT_TRUE(state_is("OPEN"));
}

TEST_F(SidecarCoreBreakerTest, FewerFailuresKeepItClosed) {
  UseSmallBreaker();
  Init();
  Call(1, Result::kFailure);
  Call(2, Result::kSuccess);
  Call(3, Result::kSuccess);
  Call(4, Result::kSuccess);
  EXPECT_TRUE(core_->Ready(now_));
  // Calls that end without a verdict on the upstream do not count.
  for (SidecarCore::RequestId id = 5; id < 10; ++id) Call(id, Result::kIgnored);
  EXPECT_TRUE(core_->Ready(now_));
}

// A 504 that ends the client's own deadline (x-kinfer-timeout) says nothing of the upstream:
// twenty of them leave the breaker closed, where four 504s without one open it.
TEST_F(SidecarCoreBreakerTest, ClientDeadline504sDoNotOpenTheBreaker) {
  using R = SidecarCore::Result;
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(200, true), R::kSuccess);
  // Load shed by the upstream (429, or 503 with Retry-After) is not a failure of it.
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(429, false), R::kIgnored);
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(503, false, /*shed=*/true), R::kIgnored);
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(503, false, /*shed=*/false), R::kFailure);
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(500, false, /*shed=*/true), R::kFailure);
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(500, true), R::kFailure);
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(503, true), R::kFailure);
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(504, false), R::kFailure);
  EXPECT_EQ(SidecarCore::ResultForUpstreamStatus(504, true), R::kIgnored);

  UseSmallBreaker();
  Init();
  for (SidecarCore::RequestId id = 1; id <= 20; ++id) {
    Call(id, SidecarCore::ResultForUpstreamStatus(504, true));
  }
  EXPECT_TRUE(core_->Ready(now_));
  for (SidecarCore::RequestId id = 21; id <= 24; ++id) {
    Call(id, SidecarCore::ResultForUpstreamStatus(504, false));
  }
  EXPECT_FALSE(core_->Ready(now_));
}

TEST_F(SidecarCoreBreakerTest, OpenBreakerRoutesToTheFallbackUpstream) {
  UseSmallBreaker();
  UseFallbackUpstream();
  Init();
  Trip();
  EXPECT_TRUE(core_->Ready(now_));  // the fallback answers: the pod stays in its Service

  Verdict v = Arrive(10, Info(kDeterministic));
  ASSERT_EQ(v.action, Action::kStart) << v.reason;
  EXPECT_EQ(v.route.model, "small");
  EXPECT_TRUE(v.route.fallback_upstream);
  EXPECT_EQ(v.route.degraded, "breaker_open");
  EXPECT_TRUE(v.route.rewrite());
  EXPECT_FALSE(v.cache_key.has_value());  // a degraded answer is not stored for the request
  // The fallback upstream is not guarded by the primary's breaker.
  EXPECT_FALSE(core_->OnStart(10, v.route, 1, now_).has_value());
  core_->OnFinished(10, v.route, Result::kFailure, milliseconds(10), now_);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="standard",reason="breaker_open"})"), 1);

  // A class that may not use the fallback model is refused.
  config_.classes[2].degrade.allow_fallback_model = false;
  Init();
  Trip();
  Verdict batch = Arrive(11, OfClass("batch"));
  ASSERT_EQ(batch.action, Action::kReject);
  EXPECT_EQ(batch.http_status, 503);
  EXPECT_EQ(batch.reason, "breaker_open");
}

// While HALF_OPEN with every probe out, and for a request queued before the breaker opened, the
// primary refuses: such requests go to the fallback upstream, as arrivals during OPEN do, instead
// of a 503 while a fallback could serve them.
TEST_F(SidecarCoreBreakerTest, RequestsThePrimaryRefusesGoToTheFallbackUpstream) {
  UseSmallBreaker();
  UseFallbackUpstream();
  config_.admission.max_concurrency = 5;
  Init();
  // One request in flight and one queued, both before the breaker opens.
  Verdict running = Arrive(50, Info());
  ASSERT_EQ(running.action, Action::kStart);
  ASSERT_FALSE(core_->OnStart(50, running.route, 1, now_).has_value());
  for (SidecarCore::RequestId id = 1; id <= 4; ++id) Call(id, Result::kFailure);  // trips it
  now_ += seconds(10);  // HALF_OPEN
  Verdict probe = Arrive(60, Info());
  ASSERT_EQ(probe.action, Action::kStart);
  ASSERT_FALSE(core_->OnStart(60, probe.route, 1, now_).has_value());  // the one probe
  EXPECT_TRUE(probe.route.degraded.empty());
  // A new arrival finds every probe out: served by the fallback, not refused.
  Verdict arrival = Arrive(70, Info(kDeterministic));
  ASSERT_EQ(arrival.action, Action::kStart) << arrival.reason;
  EXPECT_TRUE(arrival.route.fallback_upstream);
  EXPECT_EQ(arrival.route.degraded, "breaker_open");
  EXPECT_FALSE(arrival.cache_key.has_value());
  ASSERT_FALSE(core_->OnStart(70, arrival.route, 1, now_).has_value());
  core_->OnFinished(70, arrival.route, Result::kSuccess, milliseconds(10), now_);
  // A request admitted for the primary before (a queued one dispatched now) is rerouted at
  // OnStart rather than refused.
  SidecarCore::Route queued;
  queued.requested_max_tokens = 100;
  ASSERT_FALSE(core_->OnStart(50, queued, 1, now_).has_value());
  EXPECT_TRUE(queued.fallback_upstream);
  EXPECT_EQ(queued.model, "small");
  EXPECT_EQ(queued.degraded, "breaker_open");
  // (Metric is -1 for a series never written: nothing was refused.)
  EXPECT_LT(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="breaker_open"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="standard",reason="breaker_open"})"), 2);
  // It held its admission slot all along and frees it when it finishes.
  core_->OnFinished(50, queued, Result::kSuccess, milliseconds(10), now_);
  core_->OnFinished(60, probe.route, Result::kSuccess, milliseconds(10), now_);
  EXPECT_EQ(core_->outstanding(), 0u);
  EXPECT_TRUE(core_->Ready(now_));
}

// The fallback upstream has a breaker of its own: once its calls fail, it is no fallback. With
// the primary down too, arrivals get the 503 breaker_open answer (not a 503 upstream_connect per
// request after a connection attempt), /ready fails, and the gauge and /stats say which is down.
TEST_F(SidecarCoreBreakerTest, AFallbackUpstreamThatFailsIsNoFallback) {
  UseSmallBreaker();
  UseFallbackUpstream();
  Init();
  Trip();
  for (SidecarCore::RequestId id = 10; id < 14; ++id) {
    Verdict v = Arrive(id, Info());
    ASSERT_EQ(v.action, Action::kStart) << id << ": " << v.reason;
    ASSERT_TRUE(v.route.fallback_upstream);
    ASSERT_FALSE(core_->OnStart(id, v.route, 1, now_).has_value());
    core_->OnFinished(id, v.route, Result::kFailure, milliseconds(5), now_);
  }
  EXPECT_FALSE(core_->Ready(now_));
  Verdict v = Arrive(20, Info());
  ASSERT_EQ(v.action, Action::kReject);
  EXPECT_EQ(v.http_status, 503);
  EXPECT_EQ(v.reason, "breaker_open");
  ASSERT_TRUE(v.retry_after.has_value());
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="standard",reason="breaker_open"})"), 4);
  core_->UpdateGauges(now_);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_fallback_breaker_state{state="OPEN"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_breaker_state{state="OPEN"})"), 1);
  EXPECT_EQ(nlohmann::json::parse(core_->StatsJson(now_))["fallback_breaker"], "OPEN");

  // Both open times pass. The primary's one probe goes out first; with every primary permit
  // out, the next request probes the fallback, and its success brings the fallback back.
  now_ += seconds(10);
  Verdict primary_probe = Arrive(29, Info());
  ASSERT_EQ(primary_probe.action, Action::kStart) << primary_probe.reason;
  ASSERT_FALSE(primary_probe.route.fallback_upstream);
  ASSERT_FALSE(core_->OnStart(29, primary_probe.route, 1, now_).has_value());
  Verdict probe = Arrive(30, Info());
  ASSERT_EQ(probe.action, Action::kStart) << probe.reason;
  ASSERT_TRUE(probe.route.fallback_upstream);
  ASSERT_FALSE(core_->OnStart(30, probe.route, 1, now_).has_value());
  // Every probe permit is out: one more is refused at arrival, not sent to a fallback in doubt.
  EXPECT_EQ(Arrive(31, Info()).action, Action::kReject);
  core_->OnFinished(30, probe.route, Result::kSuccess, milliseconds(5), now_);
  core_->UpdateGauges(now_);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_fallback_breaker_state{state="CLOSED"})"), 1);
  EXPECT_TRUE(core_->Ready(now_));
}

// A primary up and a fallback upstream down: the SLO rule can only cap tokens (on the primary).
TEST_F(SidecarCoreBreakerTest, TheSloRuleDoesNotSendToAFallbackUpstreamThatIsDown) {
  UseSmallBreaker();
  UseFallbackUpstream();
  config_.slo_ttft_p99_seconds = 1;
  config_.classes[1].degrade.max_tokens_cap = 64;
  Init();
  for (SidecarCore::RequestId id = 10; id < 14; ++id) {  // trips the fallback's breaker
    SidecarCore::Route fallback;
    fallback.fallback_upstream = true;
    fallback.model = "small";
    ASSERT_FALSE(core_->OnStart(id, fallback, 1, now_).has_value());
    core_->OnFinished(id, fallback, Result::kFailure, milliseconds(5), now_);
  }
  for (int i = 0; i < 30; ++i) core_->RecordTtft(2.0, {}, now_);
  Verdict v = Arrive(1, Info(R"({"max_tokens":500,"temperature":0.5,"prompt":"x"})"));
  ASSERT_EQ(v.action, Action::kStart) << v.reason;
  EXPECT_EQ(v.route.degraded, "slo");
  EXPECT_EQ(v.route.model, "");
  EXPECT_FALSE(v.route.fallback_upstream);
  EXPECT_EQ(v.route.max_tokens, 64);
  EXPECT_TRUE(core_->Ready(now_));  // the primary serves
}

TEST_F(SidecarCoreBreakerTest, OpenBreakerWithoutFallbackUpstreamRejects503) {
  UseSmallBreaker();
  config_.fallback_model = "small";  // served by the primary, which is down
  Init();
  Trip();
  now_ += seconds(2);
  Verdict v = Arrive(10, Info());
  ASSERT_EQ(v.action, Action::kReject);
  EXPECT_EQ(v.http_status, 503);
  EXPECT_EQ(v.reason, "breaker_open");
  ASSERT_TRUE(v.retry_after.has_value());
  EXPECT_EQ(RetryAfterSeconds(*v.retry_after), 8);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="breaker_open"})"), 1);
  EXPECT_EQ(core_->outstanding(), 0u);
}

// A stream's call is judged slow on its time to first token: four healthy 2 s generations
// that began within 10 ms keep the breaker closed; four 2 s waits for a first token open it.
TEST_F(SidecarCoreBreakerTest, StreamsAreSlowByTimeToFirstTokenOnly) {
  UseSmallBreaker();
  config_.breaker.slow_call_duration = seconds(1);
  config_.breaker.slow_call_rate_threshold = 100;
  Init();
  auto stream = [&](SidecarCore::RequestId id, std::optional<nanoseconds> ttft) {
    Verdict v = Arrive(id, Info());
    ASSERT_EQ(v.action, Action::kStart) << v.reason;
    ASSERT_FALSE(core_->OnStart(id, v.route, 1, now_).has_value());
    core_->OnFinished(id, v.route, Result::kSuccess, seconds(2), now_, ttft);
  };
  for (SidecarCore::RequestId id = 1; id <= 4; ++id) stream(id, milliseconds(10));
  EXPECT_TRUE(core_->Ready(now_));
  for (SidecarCore::RequestId id = 5; id <= 8; ++id) stream(id, std::nullopt);
  EXPECT_FALSE(core_->Ready(now_));
}

TEST_F(SidecarCoreBreakerTest, HalfOpenProbeSuccessClosesTheBreaker) {
  UseSmallBreaker();
  Init();
  Trip();
  now_ += seconds(10);
  EXPECT_TRUE(core_->Ready(now_));  // HALF_OPEN takes traffic (the probe)
  Verdict probe = Arrive(20, Info());
  ASSERT_EQ(probe.action, Action::kStart);
  EXPECT_EQ(probe.route.degraded, "");
  ASSERT_FALSE(core_->OnStart(20, probe.route, 1, now_).has_value());
  core_->OnFinished(20, probe.route, Result::kSuccess, milliseconds(30), now_);
  EXPECT_EQ(nlohmann::json::parse(core_->StatsJson(now_))["breaker"], "CLOSED");
  EXPECT_TRUE(core_->Ready(now_));
  Call(21, Result::kSuccess);
}

TEST_F(SidecarCoreBreakerTest, HalfOpenProbeFailureReopens) {
  UseSmallBreaker();
  Init();
  Trip();
  now_ += seconds(10);
  Call(20, Result::kFailure);
  EXPECT_FALSE(core_->Ready(now_));
  now_ += seconds(9);
  EXPECT_FALSE(core_->Ready(now_));
  now_ += seconds(1);
  EXPECT_TRUE(core_->Ready(now_));
}

TEST_F(SidecarCoreBreakerTest, RefusedStartDoesNotReleaseTheProbePermit) {
  UseSmallBreaker();
  Init();
  Trip();
  now_ += seconds(10);
  Verdict a = Arrive(20, Info());
  Verdict b = Arrive(21, Info());
  Verdict c = Arrive(22, Info());
  ASSERT_EQ(a.action, Action::kStart);
  ASSERT_EQ(b.action, Action::kStart);
  ASSERT_EQ(c.action, Action::kStart);
  ASSERT_FALSE(core_->OnStart(20, a.route, 1, now_).has_value());  // the one probe
  // The second is refused; the proxy answers 503 and reports it ignored.
  ASSERT_TRUE(core_->OnStart(21, b.route, 1, now_).has_value());
  core_->OnFinished(21, b.route, Result::kIgnored, {}, now_);
  // That must not free a second probe while the first is still out.
  EXPECT_TRUE(core_->OnStart(22, c.route, 1, now_).has_value());
  core_->OnFinished(22, c.route, Result::kIgnored, {}, now_);
  // The probe fails: OPEN again.
  core_->OnFinished(20, a.route, Result::kFailure, milliseconds(10), now_);
  EXPECT_FALSE(core_->Ready(now_));
}

// ---- SLO degrade ----

TEST_F(SidecarCoreTest, SloBreachDegradesLowerClassesWithTheirCap) {
  config_.slo_ttft_p99_seconds = 1;
  config_.classes[1].degrade.max_tokens_cap = 100;  // standard; batch has 256 by default
  Init();
  for (int i = 0; i < 30; ++i) core_->RecordTtft(2.0, {}, now_);

  Verdict standard = Arrive(1, Info(R"({"max_tokens":500,"temperature":0,"prompt":"x"})"));
  ASSERT_EQ(standard.action, Action::kStart) << standard.reason;
  EXPECT_EQ(standard.route.degraded, "slo");
  EXPECT_EQ(standard.route.max_tokens, 100);
  EXPECT_EQ(standard.route.model, "");  // no fallback model configured
  EXPECT_FALSE(standard.route.fallback_upstream);
  EXPECT_FALSE(standard.cache_key.has_value());  // degraded: never given a cache key

  Verdict batch = Arrive(2, OfClass("batch"));
  ASSERT_EQ(batch.action, Action::kStart);
  EXPECT_EQ(batch.route.degraded, "slo");
  EXPECT_EQ(batch.route.max_tokens, 256);

  // A cap above what the client asked for changes nothing.
  Verdict small = Arrive(3, OfClass("batch", R"({"max_tokens":10})"));
  ASSERT_EQ(small.action, Action::kStart);
  EXPECT_EQ(small.route.degraded, "");
  EXPECT_EQ(small.route.max_tokens, 0);

  Verdict critical = Arrive(4, OfClass("critical", kDeterministic));
  ASSERT_EQ(critical.action, Action::kStart);
  EXPECT_EQ(critical.route.degraded, "");
  EXPECT_FALSE(critical.route.rewrite());
  EXPECT_TRUE(critical.cache_key.has_value());

  // Counted as they go upstream.
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="standard",reason="slo"})"), -1);
  ASSERT_FALSE(core_->OnStart(1, standard.route, 1, now_).has_value());
  ASSERT_FALSE(core_->OnStart(2, batch.route, 2, now_).has_value());
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="standard",reason="slo"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="batch",reason="slo"})"), 1);
}

// The deadline trigger: the expected wait (1 s per request, one slot busy) is past a 500 ms
// deadline. With a fallback upstream the request goes there at once, outside the primary's
// queue; without one, degrading cannot make it start sooner, so it is a rejection only.
TEST_F(SidecarCoreTest, DeadlineAtRiskIsServedByTheFallbackUpstreamOutsideTheQueue) {
  config_.admission.max_concurrency = 1;
  config_.admission.initial_service_time = seconds(1);
  UseFallbackUpstream();
  Init();
  ASSERT_EQ(Arrive(1, Info()).action, Action::kStart);  // holds the primary's only slot
  SidecarCore::Route primary;
  ASSERT_FALSE(core_->OnStart(1, primary, 1, now_).has_value());

  Verdict v = Arrive(2, Info(kSampled, {{"x-kinfer-timeout", "500ms"}}));
  ASSERT_EQ(v.action, Action::kStart) << v.reason;
  EXPECT_EQ(v.route.degraded, "deadline");
  EXPECT_EQ(v.route.model, "small");
  EXPECT_TRUE(v.route.fallback_upstream);
  EXPECT_EQ(core_->outstanding(), 2u);
  ASSERT_FALSE(core_->OnStart(2, v.route, 1, now_).has_value());
  EXPECT_TRUE(core_->OnFinished(2, v.route, Result::kSuccess, milliseconds(80), now_).start.empty());
  EXPECT_EQ(core_->outstanding(), 1u);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="standard",reason="deadline"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="deadline_unreachable"})"), -1);
}

// The deadline trigger reads the queue's own estimate: with a slot reserved for the top class
// and a critical request already holding it, a standard request that admission starts at once
// has no wait and is not degraded (the sidecar used max - reserved slots whatever held them).
TEST_F(SidecarCoreTest, TheDeadlineTriggerUsesAdmissionsOwnWaitEstimate) {
  config_.admission.max_concurrency = 8;
  config_.admission.reserved_for_top = 1;
  config_.admission.initial_service_time = seconds(1);
  UseFallbackUpstream();
  Init();
  ASSERT_EQ(Arrive(1, OfClass("critical", kSampled)).action, Action::kStart);
  for (SidecarCore::RequestId id = 2; id <= 7; ++id) {
    Verdict v = Arrive(id, Info());
    ASSERT_EQ(v.action, Action::kStart) << id << ": " << v.reason;
    ASSERT_EQ(v.route.degraded, "") << id;
  }
  Verdict v = Arrive(8, Info(kSampled, {{"x-kinfer-timeout", "100ms"}}));
  ASSERT_EQ(v.action, Action::kStart) << v.reason;
  EXPECT_EQ(v.route.degraded, "");
  EXPECT_FALSE(v.route.fallback_upstream);
  // The eighth slot was the reserved one: a ninth standard request waits 1 s, past its 100 ms.
  Verdict late = Arrive(9, Info(kSampled, {{"x-kinfer-timeout", "100ms"}}));
  EXPECT_EQ(late.route.degraded, "deadline");
  EXPECT_TRUE(late.route.fallback_upstream);
}

TEST_F(SidecarCoreTest, DeadlineAtRiskWithoutAFallbackUpstreamIsARejectionOnly) {
  config_.admission.max_concurrency = 1;
  config_.admission.initial_service_time = seconds(1);
  config_.fallback_model = "small";  // on the primary: the same queue
  Init();
  ASSERT_EQ(Arrive(1, Info()).action, Action::kStart);
  Verdict v = Arrive(2, Info(kSampled, {{"x-kinfer-timeout", "500ms"}}));
  ASSERT_EQ(v.action, Action::kReject);
  EXPECT_EQ(v.http_status, 503);
  EXPECT_EQ(v.reason, "deadline_unreachable");
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="standard",reason="deadline"})"), -1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="deadline_unreachable"})"), 1);
}

// A degraded request that waits in the queue and is refused there (its deadline passed) was
// never served degraded: a rejection only. Counted both ways, degraded_total overstated
// degradation about fourfold under load.
TEST_F(SidecarCoreTest, ADegradedRequestTheQueueRefusesIsNotCountedDegraded) {
  config_.slo_ttft_p99_seconds = 1;
  config_.admission.max_concurrency = 1;
  config_.admission.initial_service_time = milliseconds(100);
  Init();
  for (int i = 0; i < 30; ++i) core_->RecordTtft(2.0, {}, now_);
  Verdict first = Arrive(1, OfClass("critical"));  // never degraded: holds the only slot
  ASSERT_EQ(first.action, Action::kStart);
  ASSERT_FALSE(core_->OnStart(1, first.route, 0, now_).has_value());
  Verdict queued = Arrive(2, Info(R"({"max_tokens":500,"prompt":"x"})",
                                  {{"x-kinfer-priority", "batch"}, {"x-kinfer-timeout", "1s"}}));
  ASSERT_EQ(queued.action, Action::kQueued) << queued.reason;
  EXPECT_EQ(queued.route.degraded, "slo");
  now_ += seconds(2);
  ASSERT_EQ(core_->Expire(now_), std::vector<SidecarCore::RequestId>{2});
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="batch",reason="slo"})"), -1);

  // One that waits and then starts is counted when it starts.
  Verdict later = Arrive(3, OfClass("batch", R"({"max_tokens":500,"prompt":"x"})"));
  ASSERT_EQ(later.action, Action::kQueued) << later.reason;
  AdmissionQueue::Dispatch d = core_->OnFinished(1, first.route, Result::kSuccess,
                                                 milliseconds(100), now_);
  ASSERT_EQ(d.start, std::vector<SidecarCore::RequestId>{3});
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="batch",reason="slo"})"), -1);
  ASSERT_FALSE(core_->OnStart(3, later.route, 2, now_).has_value());
  EXPECT_EQ(Metric(R"(kinfer_sidecar_degraded_total{class="batch",reason="slo"})"), 1);
}

TEST_F(SidecarCoreTest, SloBreachUsesTheFallbackModelOnThePrimary) {
  config_.slo_ttft_p99_seconds = 1;
  config_.fallback_model = "small";
  Init();
  for (int i = 0; i < 30; ++i) core_->RecordTtft(2.0, {}, now_);
  Verdict v = Arrive(1, Info());
  ASSERT_EQ(v.action, Action::kStart);
  EXPECT_EQ(v.route.degraded, "slo");
  EXPECT_EQ(v.route.model, "small");
  EXPECT_FALSE(v.route.fallback_upstream);  // same upstream: still guarded by the breaker
}

// Only the primary model's answers teach the SLO window: the fallback's fast ones pulled the
// P99 under the SLO while the primary still breached it, and degrade turned itself off.
TEST_F(SidecarCoreTest, FallbackAnswersDoNotCountInTheSloWindow) {
  config_.slo_ttft_p99_seconds = 1;
  config_.fallback_model = "small";
  Init();
  SidecarCore::Route degraded;
  degraded.model = "small";
  degraded.degraded = "slo";
  for (int i = 0; i < 30; ++i) core_->RecordTtft(2.0, {}, now_);
  for (int i = 0; i < 3000; ++i) core_->RecordTtft(0.01, degraded, now_);
  EXPECT_EQ(nlohmann::json::parse(core_->StatsJson(now_))["ttft_seconds"]["count"], 30);
  Verdict v = Arrive(1, Info());
  ASSERT_EQ(v.action, Action::kStart);
  EXPECT_EQ(v.route.degraded, "slo");
  // A primary answer whose tokens were capped is still the primary's latency.
  SidecarCore::Route capped;
  capped.max_tokens = 64;
  capped.degraded = "slo";
  core_->RecordTtft(2.0, capped, now_);
  EXPECT_EQ(nlohmann::json::parse(core_->StatsJson(now_))["ttft_seconds"]["count"], 31);
}

TEST_F(SidecarCoreTest, FastTtftsDoNotDegrade) {
  config_.slo_ttft_p99_seconds = 1;
  Init();
  for (int i = 0; i < 30; ++i) core_->RecordTtft(0.2, {}, now_);
  Verdict v = Arrive(1, OfClass("batch"));
  ASSERT_EQ(v.action, Action::kStart);
  EXPECT_EQ(v.route.degraded, "");
}

// ---- draining, retries, readiness ----

TEST_F(SidecarCoreTest, DrainingRejectsArrivalsButFinishesTheRest) {
  config_.admission.max_concurrency = 1;
  Init();
  Verdict first = Arrive(1, Info(kDeterministic));
  ASSERT_EQ(first.action, Action::kStart);
  core_->StoreInCache(*first.cache_key, Response("{\"a\":1}"), now_);
  ASSERT_EQ(Arrive(2, Info()).action, Action::kQueued);

  core_->StartDraining();
  EXPECT_TRUE(core_->draining());
  EXPECT_FALSE(core_->Ready(now_));
  Verdict v = Arrive(3, Info(kDeterministic));  // even a cache hit is refused
  ASSERT_EQ(v.action, Action::kReject);
  EXPECT_EQ(v.http_status, 503);
  EXPECT_EQ(v.reason, "draining");
  ASSERT_TRUE(v.retry_after.has_value());
  EXPECT_EQ(Metric(R"(kinfer_sidecar_rejected_total{class="standard",reason="draining"})"), 1);

  EXPECT_EQ(core_->outstanding(), 2u);
  EXPECT_EQ(core_->OnFinished(1, first.route, Result::kSuccess, seconds(1), now_).start, Ids{2});
  SidecarCore::Route primary;
  ASSERT_FALSE(core_->OnStart(2, primary, 1, now_).has_value());
  core_->OnFinished(2, primary, Result::kSuccess, seconds(1), now_);
  EXPECT_EQ(core_->outstanding(), 0u);
}

TEST_F(SidecarCoreTest, TryRetryRespectsRetriesDisabled) {
  config_.retries.enabled = false;
  Init();
  EXPECT_FALSE(core_->TryRetry(now_));
  // No retry was asked of the budget: every upstream 503 counted "denied" when retries were off.
  EXPECT_EQ(Metric(R"(kinfer_sidecar_retries_total{result="denied"})"), 0);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_retries_total{result="allowed"})"), 0);
}

TEST_F(SidecarCoreTest, TryRetryAllowedWithinTheBudgetFloor) {
  config_.retries.min_retries_per_second = 1;
  config_.retries.budget_percent = 0;
  Init();
  int allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += core_->TryRetry(now_) ? 1 : 0;
  EXPECT_GE(allowed, 1);
  EXPECT_LT(allowed, 100);  // the budget caps them
  EXPECT_EQ(Metric(R"(kinfer_sidecar_retries_total{result="allowed"})"), allowed);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_retries_total{result="denied"})"), 100 - allowed);
}

// ---- /stats ----

TEST_F(SidecarCoreTest, StatsJsonReportsQueueInFlightAndTtftQuantiles) {
  config_.admission.max_concurrency = 1;
  Init();
  nlohmann::json empty = nlohmann::json::parse(core_->StatsJson(now_));
  EXPECT_EQ(empty["queue_depth"], 0);
  EXPECT_EQ(empty["in_flight"], 0);
  EXPECT_TRUE(empty["ttft_seconds"]["p99"].is_null());
  EXPECT_EQ(empty["ttft_seconds"]["count"], 0);

  ASSERT_EQ(Arrive(1, Info()).action, Action::kStart);
  ASSERT_EQ(Arrive(2, OfClass("batch")).action, Action::kQueued);
  ASSERT_EQ(Arrive(3, OfClass("batch")).action, Action::kQueued);
  for (int i = 0; i < 98; ++i) core_->RecordTtft(0.5, {}, now_);
  core_->RecordTtft(4.0, {}, now_);
  core_->RecordTtft(4.0, {}, now_);

  std::string text = core_->StatsJson(now_);
  nlohmann::json stats = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(stats.is_discarded()) << text;
  EXPECT_EQ(stats["queue_depth"], 2);
  EXPECT_EQ(stats["queue_depth_by_class"]["batch"], 2);
  EXPECT_EQ(stats["queue_depth_by_class"]["critical"], 0);
  EXPECT_EQ(stats["in_flight"], 1);
  EXPECT_EQ(stats["max_concurrency"], 1);
  EXPECT_EQ(stats["draining"], false);
  EXPECT_EQ(stats["breaker"], "CLOSED");
  const nlohmann::json& ttft = stats["ttft_seconds"];
  EXPECT_EQ(ttft["count"], 100);
  EXPECT_NEAR(ttft["p50"].get<double>(), 0.5, 0.5 * 0.02);
  EXPECT_NEAR(ttft["p95"].get<double>(), 0.5, 0.5 * 0.02);
  EXPECT_NEAR(ttft["p99"].get<double>(), 4.0, 4.0 * 0.02);

  // Samples leave the window after it passes.
  now_ += config_.stats_window.window + seconds(1);
  EXPECT_EQ(nlohmann::json::parse(core_->StatsJson(now_))["ttft_seconds"]["count"], 0);
}

TEST_F(SidecarCoreTest, UpdateGaugesExportsQueueAndInFlight) {
  config_.admission.max_concurrency = 1;
  Init();
  ASSERT_EQ(Arrive(1, Info()).action, Action::kStart);
  ASSERT_EQ(Arrive(2, OfClass("batch")).action, Action::kQueued);
  core_->StartDraining();
  core_->UpdateGauges(now_);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_queue_depth{class="batch"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_queue_depth{class="standard"})"), 0);
  EXPECT_EQ(Metric("kinfer_sidecar_in_flight"), 1);
  EXPECT_EQ(Metric("kinfer_sidecar_draining"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_breaker_state{state="CLOSED"})"), 1);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_fallback_breaker_state{state="CLOSED"})"), 0);
}

// Requests degraded to the fallback upstream are in flight too: demand the primary should carry
// (outside its queue and slots, the autoscaler would never see it and never add the pods).
TEST_F(SidecarCoreTest, InFlightCountsTheFallbackUpstreamsRequests) {
  config_.admission.max_concurrency = 1;
  config_.admission.initial_service_time = seconds(1);
  UseFallbackUpstream();
  Init();
  ASSERT_EQ(Arrive(1, Info()).action, Action::kStart);
  Verdict v = Arrive(2, Info(kSampled, {{"x-kinfer-timeout", "500ms"}}));
  ASSERT_TRUE(v.route.fallback_upstream);
  core_->UpdateGauges(now_);
  EXPECT_EQ(Metric("kinfer_sidecar_in_flight"), 2);
  EXPECT_EQ(Metric(R"(kinfer_sidecar_fallback_breaker_state{state="CLOSED"})"), 1);
}

// A reload that turns the cache off zeroes its gauges (they kept the last values forever).
TEST_F(SidecarCoreTest, TurningTheCacheOffOnReloadZeroesItsGauges) {
  Init();
  Verdict first = Arrive(1, Info(kDeterministic));
  ASSERT_TRUE(first.cache_key.has_value());
  core_->StoreInCache(*first.cache_key, Response("{\"a\":1}"), now_);
  core_->UpdateGauges(now_);
  EXPECT_EQ(Metric("kinfer_sidecar_cache_entries"), 1);
  EXPECT_GT(Metric("kinfer_sidecar_cache_bytes"), 0);
  SidecarConfig next = config_;
  next.cache_enabled = false;
  ASSERT_TRUE(core_->Reconfigure(next, now_).ok());
  core_->UpdateGauges(now_);
  EXPECT_EQ(Metric("kinfer_sidecar_cache_entries"), 0);
  EXPECT_EQ(Metric("kinfer_sidecar_cache_bytes"), 0);
}

// ---- reload ----

TEST_F(SidecarCoreTest, ReconfigureRefusesAChangeInTheNumberOfClasses) {
  Init();
  SidecarConfig next = config_;
  next.classes.pop_back();
  next.admission.num_priorities = 2;
  StatusOr<AdmissionQueue::Dispatch> r = core_->Reconfigure(next, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->config().classes.size(), 3u);
}

// The names are the metrics' class labels, fixed at start.
TEST_F(SidecarCoreTest, ReconfigureRefusesRenamedClasses) {
  Init();
  SidecarConfig next = config_;
  const std::string old_name = next.classes[1].name;
  next.classes[1].name = "silver";
  if (next.default_class == old_name) next.default_class = "silver";
  StatusOr<AdmissionQueue::Dispatch> r = core_->Reconfigure(next, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), ::testing::HasSubstr("'" + old_name + "' to 'silver'"));
  EXPECT_EQ(core_->config().classes[1].name, old_name);
}

TEST_F(SidecarCoreTest, ReconfigureRefusesAnInvalidConfig) {
  Init();
  SidecarConfig next = config_;
  next.admission.max_concurrency = 0;
  StatusOr<AdmissionQueue::Dispatch> r = core_->Reconfigure(next, now_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->config().admission.max_concurrency, 8);
}

TEST_F(SidecarCoreTest, ReconfigureRaisingConcurrencyDispatchesQueuedRequests) {
  config_.admission.max_concurrency = 1;
  Init();
  ASSERT_EQ(Arrive(1, Info()).action, Action::kStart);
  ASSERT_EQ(Arrive(2, Info()).action, Action::kQueued);
  ASSERT_EQ(Arrive(3, OfClass("batch")).action, Action::kQueued);
  ASSERT_EQ(Arrive(4, OfClass("batch")).action, Action::kQueued);

  SidecarConfig next = config_;
  next.admission.max_concurrency = 3;
  next.listen = {"127.0.0.1", 9999};  // needs a restart: kept
  StatusOr<AdmissionQueue::Dispatch> r = core_->Reconfigure(next, now_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->start, (Ids{2, 3}));
  EXPECT_TRUE(r->expired.empty());
  EXPECT_EQ(core_->config().admission.max_concurrency, 3);
  EXPECT_EQ(core_->config().listen.port, 8080);
  EXPECT_EQ(core_->outstanding(), 4u);
  EXPECT_EQ(nlohmann::json::parse(core_->StatsJson(now_))["in_flight"], 3);
}

TEST_F(SidecarCoreTest, ReconfigureAppliesNewRateLimits) {
  Init();
  EXPECT_EQ(Arrive(1, Info()).action, Action::kStart);
  EXPECT_EQ(Arrive(2, Info()).action, Action::kStart);
  SidecarConfig next = config_;
  next.rate_limits.default_limit.requests_per_second = 1;
  next.rate_limits.default_limit.request_burst = 1;
  ASSERT_TRUE(core_->Reconfigure(next, now_).ok());
  EXPECT_EQ(Arrive(3, Info()).action, Action::kStart);
  EXPECT_EQ(Arrive(4, Info()).http_status, 429);
}

TEST_F(SidecarCoreBreakerTest, ReconfigureKeepsAnUnchangedBreaker) {
  UseSmallBreaker();
  Init();
  Trip();
  SidecarConfig next = config_;
  next.admission.max_concurrency = 16;
  ASSERT_TRUE(core_->Reconfigure(next, now_).ok());
  EXPECT_FALSE(core_->Ready(now_));
  // A new breaker config starts afresh.
  next.breaker.open_duration = seconds(20);
  ASSERT_TRUE(core_->Reconfigure(next, now_).ok());
  EXPECT_TRUE(core_->Ready(now_));
}

}  // namespace
}  // namespace kinfer
