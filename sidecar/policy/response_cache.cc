#include "sidecar/policy/response_cache.h"

#include <cassert>
#include <utility>

namespace kinfer {
namespace {

// 64-bit FNV-1a followed by a murmur-style finalizer so that short keys spread over all bits.
// Not a keyed hash: correctness never depends on it (keys compare on bytes), only bucket spread.
uint64_t HashBytes(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

char ToLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ToLower(a[i]) != ToLower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// True when the comma-separated Cache-Control value holds a directive named `name` (any
// `=argument` ignored).
bool HasDirective(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    size_t comma = header.find(',');
    std::string_view directive = header.substr(0, comma);
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    directive = Trim(directive.substr(0, directive.find('=')));
    if (EqualsIgnoreCase(directive, name)) return true;
  }
  return false;
}

}  // namespace

Status ResponseCacheConfig::Validate() const {
  if (max_bytes == 0) return InvalidArgument("response cache max_bytes must be > 0");
  if (ttl <= std::chrono::nanoseconds::zero()) {
    return InvalidArgument("response cache ttl must be > 0");
  }
  if (max_entry_bytes == 0 || max_entry_bytes > max_bytes) {
    return InvalidArgument("response cache max_entry_bytes must be in (0, max_bytes], got " +
                           std::to_string(max_entry_bytes));
  }
  return Status::Ok();
}

CacheKey MakeCacheKey(std::string_view model, std::string_view normalized_request) {
  CacheKey key;
  std::string prefix = std::to_string(model.size());
  key.bytes.reserve(prefix.size() + 1 + model.size() + normalized_request.size());
  key.bytes.append(prefix).append(1, ':').append(model).append(normalized_request);
  key.hash = HashBytes(key.bytes);
  return key;
}

bool IsCacheable(const CacheableRequest& request) {
  bool deterministic =
      (request.temperature.has_value() && *request.temperature == 0.0) || request.seed.has_value();
  if (!deterministic) return false;
  if (HasDirective(request.cache_control, "no-cache") ||
      HasDirective(request.cache_control, "no-store")) {
    return false;
  }
  return !request.stream || request.proxy_buffers_stream;
}

ResponseCache::ResponseCache(ResponseCacheConfig config) : config_(config) {
  assert(config_.Validate().ok());
}

void ResponseCache::Erase(Map::iterator it) {
  size_t charge = Charge(it->first, it->second.response);
  assert(bytes_ >= charge);
  bytes_ -= charge;
  lru_.erase(it->second.lru_pos);
  map_.erase(it);
}

std::optional<CachedResponse> ResponseCache::Lookup(const CacheKey& key,
                                                    CacheClock::time_point now) {
  auto it = map_.find(key);
  if (it == map_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  if (now >= it->second.expires_at) {
    Erase(it);
    ++stats_.expired;
    ++stats_.misses;
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru_pos);
  ++stats_.hits;
  return it->second.response;
}

CacheInsertResult ResponseCache::Insert(const CacheKey& key, CachedResponse response,
                                        CacheClock::time_point now) {
  CacheInsertResult refusal = CacheInsertResult::kStored;
  if (response.status < 200 || response.status > 299) {
    refusal = CacheInsertResult::kRejectedStatus;
  } else if (!response.complete) {
    refusal = CacheInsertResult::kRejectedIncomplete;
  } else if (response.body.empty()) {
    refusal = CacheInsertResult::kRejectedEmpty;
  } else if (Charge(key, response) > config_.max_entry_bytes) {
    refusal = CacheInsertResult::kRejectedTooLarge;
  }
  if (refusal != CacheInsertResult::kStored) {
    ++stats_.rejected;
    return refusal;
  }

  if (auto old = map_.find(key); old != map_.end()) {
    ++(now >= old->second.expires_at ? stats_.expired : stats_.replaced);
    Erase(old);
  }
  size_t charge = Charge(key, response);
  auto [it, inserted] = map_.try_emplace(key);
  assert(inserted);
  lru_.push_front(&it->first);
  it->second.response = std::move(response);
  it->second.expires_at = now + config_.ttl;
  it->second.lru_pos = lru_.begin();
  bytes_ += charge;
  ++stats_.inserts;

  // The new entry is at the front and charge <= max_entry_bytes <= max_bytes, so it survives.
  while (bytes_ > config_.max_bytes) {
    assert(lru_.size() > 1);
    Erase(map_.find(*lru_.back()));
    ++stats_.evictions;
  }
  return CacheInsertResult::kStored;
}

}  // namespace kinfer
