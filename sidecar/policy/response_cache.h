// ResponseCache: an exact-match cache of complete, successful responses to deterministic requests
// (issue 4 item 6), bounded in bytes with LRU eviction and a fixed TTL, with the clock passed in.
//
// Contract: the proxy decides per request with IsCacheable() (deterministic sampling, no
// `Cache-Control: no-cache`/`no-store`, not an unbuffered stream); only then does it call
// Lookup() and, after the upstream answered, Insert(). The cache stores complete bodies only: a
// streamed response is cacheable only when the proxy buffers the whole stream and inserts it once
// it finished cleanly. Keys are built by MakeCacheKey() from the model name and the request text
// the proxy already normalized (this library knows nothing of JSON). A key keeps its full bytes
// next to its hash and entries are compared on the bytes, so two requests whose hashes collide
// never see each other's body: a collision costs a slower probe, never a wrong answer.
//
// Entries live for `ttl` from their insertion (a hit does not extend it). Expiry is lazy: an
// expired entry is dropped when a Lookup() finds it (counted as a miss and as expired), or when
// LRU eviction reaches it. Size is charged as key bytes + body bytes (see Charge()); the content
// type and per-entry bookkeeping are not charged, so max_bytes bounds payload, not heap use.
//
// Seam: ResponseCacheBackend is the interface the proxy talks to. ResponseCache is the exact
// backend; a semantic cache (nearest request by embedding) can implement the same interface
// later, reading the normalized request back out of CacheKey::bytes, without touching the proxy.
//
// Thread safety: not thread-safe, and Lookup() mutates (recency, expiry, counters). The owner (one
// proxy worker, or a caller holding a lock) serialises all calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"

namespace kinfer {

using CacheClock = std::chrono::steady_clock;

struct ResponseCacheConfig {
  size_t max_bytes = 64 << 20;  // total charge (key + body bytes) kept
  std::chrono::nanoseconds ttl = std::chrono::minutes(5);
  size_t max_entry_bytes = 1 << 20;  // largest single charge accepted

  // OK when max_bytes > 0, ttl > 0 and 0 < max_entry_bytes <= max_bytes; InvalidArgument
  // otherwise.
  Status Validate() const;
};

// An exact cache key. `bytes` is an unambiguous encoding of (model, normalized request); `hash`
// is a 64-bit hash of `bytes`. Equality compares `bytes` only, so a key with a colliding (or even
// a wrong) hash is still told apart correctly; tests build such keys directly.
struct CacheKey {
  uint64_t hash = 0;
  std::string bytes;

  friend bool operator==(const CacheKey& a, const CacheKey& b) { return a.bytes == b.bytes; }
};

// Encodes "<decimal length of model>:<model><normalized_request>" and hashes it, so that no
// (model, request) pair can be confused with another by moving bytes across the boundary.
CacheKey MakeCacheKey(std::string_view model, std::string_view normalized_request);

// What IsCacheable() needs to know about a request; views into the caller's request.
struct CacheableRequest {
  std::optional<double> temperature;  // absent means the API default (1.0): not deterministic
  std::optional<uint64_t> seed;
  std::string_view cache_control;  // the raw Cache-Control header, empty when absent
  bool stream = false;
  bool proxy_buffers_stream = false;  // the proxy collects the full stream before replying
};

// True when the request may be served from and stored into the cache: temperature == 0 or a seed
// is set; Cache-Control has no `no-cache` or `no-store` directive (matched case-insensitively as
// whole directives, `no-cache="x"` included); and it is not a stream, unless the proxy buffers it.
// A fixed seed is trusted to make sampling repeatable; the operator opts in to that by
// deploying the cache.
bool IsCacheable(const CacheableRequest& request);

struct CachedResponse {
  int status = 0;
  std::string content_type;
  std::string body;
  // The upstream finished the response cleanly (no reset, no truncated stream). Defaults to false
  // so that forgetting to set it fails safe: the response is not stored.
  bool complete = false;
};

enum class CacheInsertResult {
  kStored,              // stored (an entry for the same key, if any, was replaced)
  kRejectedStatus,      // status outside 200..299
  kRejectedIncomplete,  // complete == false
  kRejectedEmpty,       // empty body
  kRejectedTooLarge,    // Charge() > max_entry_bytes
};

// The seam between the proxy and a cache implementation (exact now, semantic later).
class ResponseCacheBackend {
 public:
  virtual ~ResponseCacheBackend() = default;

  // The stored response for `key` if one is live at `now`; nullopt otherwise.
  virtual std::optional<CachedResponse> Lookup(const CacheKey& key, CacheClock::time_point now) = 0;

  // Offers `response` for `key`; the implementation may refuse it (the result says why). A
  // refused response leaves the cache unchanged.
  virtual CacheInsertResult Insert(const CacheKey& key, CachedResponse response,
                                   CacheClock::time_point now) = 0;
};

class ResponseCache final : public ResponseCacheBackend {
 public:
  // Counters since construction. Invariants (checked by the tests):
  //   hits + misses == number of Lookup() calls (expired lookups count in misses and expired)
  //   entries() == inserts - replaced - evictions - expired
  //   rejected == number of Insert() calls that did not store
  struct Stats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t inserts = 0;    // stored, including replacements
    uint64_t replaced = 0;   // stores that overwrote a live entry for the same key
    uint64_t evictions = 0;  // entries dropped to make room (LRU), expired or not
    uint64_t expired = 0;    // expired entries dropped by Lookup()
    uint64_t rejected = 0;
  };

  // REQUIRES: config.Validate().ok().
  explicit ResponseCache(ResponseCacheConfig config);

  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  // A hit returns a copy of the stored response and makes the entry most recently used. An entry
  // whose TTL has run out at `now` is removed and reported as a miss.
  std::optional<CachedResponse> Lookup(const CacheKey& key, CacheClock::time_point now) override;

  // Stores a complete 2xx response with a non-empty body whose charge fits max_entry_bytes, as
  // the most recently used entry, expiring at now + ttl; then evicts least recently used entries
  // until bytes() <= max_bytes. A refused response changes nothing but the `rejected` counter
  // (an older entry for the key stays).
  CacheInsertResult Insert(const CacheKey& key, CachedResponse response,
                           CacheClock::time_point now) override;

  // Bytes charged for an entry: key bytes + body bytes.
  static size_t Charge(const CacheKey& key, const CachedResponse& response) {
    return key.bytes.size() + response.body.size();
  }

  size_t bytes() const { return bytes_; }
  size_t entries() const { return map_.size(); }
  const Stats& stats() const { return stats_; }
  const ResponseCacheConfig& config() const { return config_; }

 private:
  struct KeyHash {
    size_t operator()(const CacheKey& key) const { return static_cast<size_t>(key.hash); }
  };
  struct Entry {
    CachedResponse response;
    CacheClock::time_point expires_at;
    std::list<const CacheKey*>::iterator lru_pos;
  };
  using Map = std::unordered_map<CacheKey, Entry, KeyHash>;

  void Erase(Map::iterator it);

  ResponseCacheConfig config_;
  // Map nodes are stable, so the LRU list points at the keys inside the map (one copy of each
  // key). Front = most recently used.
  Map map_;
  std::list<const CacheKey*> lru_;
  size_t bytes_ = 0;
  Stats stats_;
};

}  // namespace kinfer
