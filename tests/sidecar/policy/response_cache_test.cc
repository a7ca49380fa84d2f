// Tests for ResponseCache: exact hits, TTL, LRU by bytes, byte accounting, refusals,
// IsCacheable rules, hash collisions, counters.
#include "sidecar/policy/response_cache.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

using namespace std::chrono_literals;

CachedResponse Ok(std::string body) {
  return CachedResponse{200, "application/json", std::move(body), /*complete=*/true};
}

class ResponseCacheTest : public ::testing::Test {
 protected:
  ResponseCacheTest() : cache_(Config()) {}

  static ResponseCacheConfig Config() {
    ResponseCacheConfig config;
    config.max_bytes = 100;
    config.ttl = 10s;
    config.max_entry_bytes = 60;
    return config;
  }

  // A key whose charge is exactly `key_bytes` (with model "m", the prefix "1:m" is 3 bytes).
  static CacheKey KeyOf(char c, size_t key_bytes = 10) {
    return MakeCacheKey("m", std::string(key_bytes - 3, c));
  }

  CacheClock::time_point t0_ = CacheClock::time_point() + 1000s;
  ResponseCache cache_;
};

TEST_F(ResponseCacheTest, HitAfterInsertReturnsTheStoredResponse) {
  CacheKey key = MakeCacheKey("llama", R"({"prompt":"hi","temperature":0})");
  ASSERT_EQ(cache_.Insert(key, Ok("hello"), t0_), CacheInsertResult::kStored);
  auto got = cache_.Lookup(key, t0_ + 1s);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->content_type, "application/json");
  EXPECT_EQ(got->body, "hello");
  EXPECT_EQ(cache_.stats().hits, 1u);
}

TEST_F(ResponseCacheTest, DifferentModelOrRequestMisses) {
  ASSERT_EQ(cache_.Insert(MakeCacheKey("a", "req"), Ok("x"), t0_), CacheInsertResult::kStored);
  EXPECT_FALSE(cache_.Lookup(MakeCacheKey("b", "req"), t0_).has_value());
  EXPECT_FALSE(cache_.Lookup(MakeCacheKey("a", "req2"), t0_).has_value());
  EXPECT_TRUE(cache_.Lookup(MakeCacheKey("a", "req"), t0_).has_value());
  EXPECT_EQ(cache_.stats().misses, 2u);
}

TEST_F(ResponseCacheTest, KeyEncodingDoesNotConfuseModelAndRequestBoundary) {
  CacheKey a = MakeCacheKey("ab", "c");
  CacheKey b = MakeCacheKey("a", "bc");
  EXPECT_NE(a.bytes, b.bytes);
  ASSERT_EQ(cache_.Insert(a, Ok("x"), t0_), CacheInsertResult::kStored);
  EXPECT_FALSE(cache_.Lookup(b, t0_).has_value());
}

TEST_F(ResponseCacheTest, EntryExpiresAtTtlAndIsDropped) {
  CacheKey key = KeyOf('a');
  ASSERT_EQ(cache_.Insert(key, Ok("body"), t0_), CacheInsertResult::kStored);
  EXPECT_TRUE(cache_.Lookup(key, t0_ + 10s - 1ns).has_value());  // a hit does not extend the TTL
  EXPECT_FALSE(cache_.Lookup(key, t0_ + 10s).has_value());
  EXPECT_EQ(cache_.entries(), 0u);
  EXPECT_EQ(cache_.bytes(), 0u);
  EXPECT_EQ(cache_.stats().expired, 1u);
  EXPECT_EQ(cache_.stats().misses, 1u);
}

TEST_F(ResponseCacheTest, EvictsLeastRecentlyUsedWhenOverMaxBytes) {
  // Each entry charges 10 key + 20 body = 30 bytes; three fit in 100, a fourth does not.
  ASSERT_EQ(cache_.Insert(KeyOf('a'), Ok(std::string(20, 'A')), t0_), CacheInsertResult::kStored);
  ASSERT_EQ(cache_.Insert(KeyOf('b'), Ok(std::string(20, 'B')), t0_), CacheInsertResult::kStored);
  ASSERT_EQ(cache_.Insert(KeyOf('c'), Ok(std::string(20, 'C')), t0_), CacheInsertResult::kStored);
  ASSERT_EQ(cache_.Insert(KeyOf('d'), Ok(std::string(20, 'D')), t0_), CacheInsertResult::kStored);
  EXPECT_FALSE(cache_.Lookup(KeyOf('a'), t0_).has_value());
  EXPECT_TRUE(cache_.Lookup(KeyOf('b'), t0_).has_value());
  EXPECT_TRUE(cache_.Lookup(KeyOf('c'), t0_).has_value());
  EXPECT_TRUE(cache_.Lookup(KeyOf('d'), t0_).has_value());
  EXPECT_EQ(cache_.stats().evictions, 1u);
}

TEST_F(ResponseCacheTest, LookupRefreshesRecency) {
  ASSERT_EQ(cache_.Insert(KeyOf('a'), Ok(std::string(20, 'A')), t0_), CacheInsertResult::kStored);
  ASSERT_EQ(cache_.Insert(KeyOf('b'), Ok(std::string(20, 'B')), t0_), CacheInsertResult::kStored);
  ASSERT_EQ(cache_.Insert(KeyOf('c'), Ok(std::string(20, 'C')), t0_), CacheInsertResult::kStored);
  ASSERT_TRUE(cache_.Lookup(KeyOf('a'), t0_).has_value());  // now 'b' is the oldest
  ASSERT_EQ(cache_.Insert(KeyOf('d'), Ok(std::string(20, 'D')), t0_), CacheInsertResult::kStored);
  EXPECT_TRUE(cache_.Lookup(KeyOf('a'), t0_).has_value());
  EXPECT_FALSE(cache_.Lookup(KeyOf('b'), t0_).has_value());
}

TEST_F(ResponseCacheTest, LargeInsertEvictsSeveralEntries) {
  for (char c : {'a', 'b', 'c'}) {
    ASSERT_EQ(cache_.Insert(KeyOf(c), Ok(std::string(20, c)), t0_), CacheInsertResult::kStored);
  }
  // 10 + 50 = 60 bytes: 90 + 60 > 100, so 'a' and 'b' go (30 + 60 = 90 fits).
  ASSERT_EQ(cache_.Insert(KeyOf('e'), Ok(std::string(50, 'E')), t0_), CacheInsertResult::kStored);
  EXPECT_EQ(cache_.entries(), 2u);
  EXPECT_EQ(cache_.bytes(), 90u);
  EXPECT_EQ(cache_.stats().evictions, 2u);
  EXPECT_TRUE(cache_.Lookup(KeyOf('c'), t0_).has_value());
}

TEST_F(ResponseCacheTest, ByteAccountingIsExactAfterOverwritesAndEvictions) {
  ASSERT_EQ(cache_.Insert(KeyOf('a'), Ok(std::string(20, 'A')), t0_), CacheInsertResult::kStored);
  EXPECT_EQ(cache_.bytes(), 30u);
  // Overwrite with a smaller body: the old charge is released, not added to.
  ASSERT_EQ(cache_.Insert(KeyOf('a'), Ok(std::string(5, 'A')), t0_), CacheInsertResult::kStored);
  EXPECT_EQ(cache_.bytes(), 15u);
  EXPECT_EQ(cache_.entries(), 1u);
  EXPECT_EQ(cache_.stats().replaced, 1u);
  EXPECT_EQ(cache_.Lookup(KeyOf('a'), t0_)->body, std::string(5, 'A'));
  ASSERT_EQ(cache_.Insert(KeyOf('b'), Ok(std::string(40, 'B')), t0_), CacheInsertResult::kStored);
  ASSERT_EQ(cache_.Insert(KeyOf('c'), Ok(std::string(40, 'C')), t0_), CacheInsertResult::kStored);
  // 15 + 50 + 50 = 115 > 100: 'a' is evicted, leaving exactly 100.
  EXPECT_EQ(cache_.bytes(), 100u);
  EXPECT_EQ(cache_.entries(), 2u);
  // Overwrite with a larger body: 50 -> 60 pushes the total to 110, so 'b' goes.
  ASSERT_EQ(cache_.Insert(KeyOf('c'), Ok(std::string(50, 'C')), t0_), CacheInsertResult::kStored);
  EXPECT_EQ(cache_.bytes(), 60u);
  EXPECT_EQ(cache_.entries(), 1u);
}

TEST_F(ResponseCacheTest, NonSuccessStatusIsNeverStored) {
  for (int status : {100, 199, 300, 304, 404, 429, 500, 503}) {
    CachedResponse r = Ok("err");
    r.status = status;
    EXPECT_EQ(cache_.Insert(KeyOf('a'), r, t0_), CacheInsertResult::kRejectedStatus) << status;
  }
  EXPECT_EQ(cache_.Insert(KeyOf('a'), CachedResponse{299, "t", "x", true}, t0_),
            CacheInsertResult::kStored);
  EXPECT_EQ(cache_.stats().rejected, 8u);
}

TEST_F(ResponseCacheTest, PartialEmptyAndOversizeResponsesAreNeverStored) {
  CachedResponse partial = Ok("half a stre");
  partial.complete = false;
  EXPECT_EQ(cache_.Insert(KeyOf('a'), partial, t0_), CacheInsertResult::kRejectedIncomplete);
  EXPECT_EQ(cache_.Insert(KeyOf('a'), Ok(""), t0_), CacheInsertResult::kRejectedEmpty);
  // Charge 10 + 51 = 61 > max_entry_bytes 60; 10 + 50 = 60 is accepted.
  EXPECT_EQ(cache_.Insert(KeyOf('a'), Ok(std::string(51, 'x')), t0_),
            CacheInsertResult::kRejectedTooLarge);
  EXPECT_EQ(cache_.entries(), 0u);
  EXPECT_EQ(cache_.bytes(), 0u);
  EXPECT_EQ(cache_.Insert(KeyOf('a'), Ok(std::string(50, 'x')), t0_), CacheInsertResult::kStored);
  EXPECT_EQ(cache_.stats().rejected, 3u);
}

TEST_F(ResponseCacheTest, RefusedInsertKeepsTheOlderEntry) {
  ASSERT_EQ(cache_.Insert(KeyOf('a'), Ok("good"), t0_), CacheInsertResult::kStored);
  CachedResponse error = Ok("upstream error");
  error.status = 500;
  ASSERT_EQ(cache_.Insert(KeyOf('a'), error, t0_), CacheInsertResult::kRejectedStatus);
  EXPECT_EQ(cache_.Lookup(KeyOf('a'), t0_)->body, "good");
}

TEST_F(ResponseCacheTest, ForcedHashCollisionNeverReturnsTheWrongBody) {
  CacheKey a{/*hash=*/42, "request-a"};
  CacheKey b{/*hash=*/42, "request-b"};
  ASSERT_EQ(cache_.Insert(a, Ok("body-a"), t0_), CacheInsertResult::kStored);
  EXPECT_FALSE(cache_.Lookup(b, t0_).has_value());
  ASSERT_EQ(cache_.Insert(b, Ok("body-b"), t0_), CacheInsertResult::kStored);
  EXPECT_EQ(cache_.entries(), 2u);
  EXPECT_EQ(cache_.Lookup(a, t0_)->body, "body-a");
  EXPECT_EQ(cache_.Lookup(b, t0_)->body, "body-b");
}

TEST_F(ResponseCacheTest, CountersAddUp) {
  int lookups = 0;
  for (int i = 0; i < 40; ++i) {
    std::string request = "r";
    request += std::to_string(i % 7);
    CacheKey key = MakeCacheKey("m", request);
    auto now = t0_ + std::chrono::seconds(i);
    if (!cache_.Lookup(key, now)) {
      CachedResponse r = Ok(std::string(5 + i % 11, 'x'));
      if (i % 9 == 0) r.status = 500;
      (void)cache_.Insert(key, r, now);
    }
    ++lookups;
  }
  const auto& s = cache_.stats();
  EXPECT_EQ(s.hits + s.misses, static_cast<uint64_t>(lookups));
  EXPECT_EQ(cache_.entries(), s.inserts - s.replaced - s.evictions - s.expired);
  EXPECT_GT(s.hits, 0u);
  EXPECT_GT(s.expired, 0u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_GT(s.rejected, 0u);
  EXPECT_LE(cache_.bytes(), cache_.config().max_bytes);
}

TEST(ResponseCacheConfigTest, ValidateRejectsNonsense) {
  ResponseCacheConfig ok{100, 1s, 100};
  EXPECT_TRUE(ok.Validate().ok());
  EXPECT_FALSE((ResponseCacheConfig{0, 1s, 0}).Validate().ok());
  EXPECT_FALSE((ResponseCacheConfig{100, 0s, 10}).Validate().ok());
  EXPECT_FALSE((ResponseCacheConfig{100, 1s, 0}).Validate().ok());
  EXPECT_FALSE((ResponseCacheConfig{100, 1s, 101}).Validate().ok());
}

// A request with temperature 0 unless told otherwise (all fields spelled out: no designated
// initializers, which -Wmissing-field-initializers flags).
CacheableRequest Req(std::optional<double> temperature = 0.0, std::optional<uint64_t> seed = {},
                     std::string_view cache_control = {}, bool stream = false,
                     bool buffered = false) {
  CacheableRequest r;
  r.temperature = temperature;
  r.seed = seed;
  r.cache_control = cache_control;
  r.stream = stream;
  r.proxy_buffers_stream = buffered;
  return r;
}

TEST(IsCacheableTest, RequiresTemperatureZeroOrASeed) {
  EXPECT_TRUE(IsCacheable(Req(0.0)));
  EXPECT_TRUE(IsCacheable(Req(std::nullopt, 7)));
  EXPECT_TRUE(IsCacheable(Req(0.8, 7)));
  EXPECT_FALSE(IsCacheable(Req(0.8)));
  EXPECT_FALSE(IsCacheable(Req(std::nullopt)));  // absent temperature means the default, 1.0
}

TEST(IsCacheableTest, NoCacheAndNoStoreBypass) {
  EXPECT_FALSE(IsCacheable(Req(0.0, {}, "no-cache")));
  EXPECT_FALSE(IsCacheable(Req(0.0, {}, "max-age=0, No-Store")));
  EXPECT_FALSE(IsCacheable(Req(0.0, {}, " no-cache=\"set-cookie\"")));
  EXPECT_FALSE(IsCacheable(Req(std::nullopt, 7, "no-store")));
  EXPECT_TRUE(IsCacheable(Req(0.0, {}, "max-age=60")));
  EXPECT_TRUE(IsCacheable(Req(0.0, {}, "no-cachex")));
}

TEST(IsCacheableTest, StreamsOnlyWhenTheProxyBuffersThem) {
  EXPECT_FALSE(IsCacheable(Req(0.0, {}, {}, /*stream=*/true)));
  EXPECT_TRUE(IsCacheable(Req(0.0, {}, {}, /*stream=*/true, /*buffered=*/true)));
}

}  // namespace
}  // namespace kinfer
