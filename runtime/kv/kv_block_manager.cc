#include "runtime/kv/kv_block_manager.h"

#include <algorithm>
#include <cassert>
#include <unordered_set>
#include <utility>

namespace kinfer {

Status ValidateKvBlockManagerOptions(const KvBlockManagerOptions& options) {
  if (options.num_blocks <= 0) return InvalidArgument("num_blocks: must be > 0");
  if (options.block_size <= 0) return InvalidArgument("block_size: must be > 0");
  if (static_cast<int64_t>(options.num_blocks) * options.block_size > (int64_t{1} << 31) - 1) {
    return InvalidArgument("num_blocks * block_size: must fit in 31 bits");
  }
  return Status::Ok();
}

KvBlockManager::KvBlockManager(KvBlockManagerOptions options)
    : block_size_(options.block_size),
      prefix_caching_(options.enable_prefix_caching),
      hasher_(std::move(options.hasher)) {
  assert(ValidateKvBlockManagerOptions(options).ok());
  blocks_.resize(options.num_blocks);
  block_tokens_.resize(static_cast<size_t>(options.num_blocks) * block_size_);
  for (int32_t b = 0; b < options.num_blocks; ++b) PushFreeBack(b);
}

uint64_t KvBlockManager::Hash(uint64_t parent, uint64_t salt,
                              std::span<const int32_t> tokens) const {
  return hasher_ ? hasher_(parent, salt, tokens) : HashBlockTokens(parent, salt, tokens);
}

std::span<const int32_t> KvBlockManager::BlockTokens(int32_t block) const {
  return {block_tokens_.data() + static_cast<size_t>(block) * block_size_,
          static_cast<size_t>(block_size_)};
}

// ---- free list ------------------------------------------------------------------------------

void KvBlockManager::PushFreeFront(int32_t b) {
  Block& blk = blocks_[b];
  assert(!blk.on_free_list && blk.ref == 0);
  blk.prev = kNil;
  blk.next = free_head_;
  if (free_head_ != kNil) blocks_[free_head_].prev = b;
  free_head_ = b;
  if (free_tail_ == kNil) free_tail_ = b;
  blk.on_free_list = true;
  ++num_free_;
}

void KvBlockManager::PushFreeBack(int32_t b) {
  Block& blk = blocks_[b];
  assert(!blk.on_free_list && blk.ref == 0);
  blk.next = kNil;
  blk.prev = free_tail_;
  if (free_tail_ != kNil) blocks_[free_tail_].next = b;
  free_tail_ = b;
  if (free_head_ == kNil) free_head_ = b;
  blk.on_free_list = true;
  ++num_free_;
}

void KvBlockManager::RemoveFree(int32_t b) {
  Block& blk = blocks_[b];
  assert(blk.on_free_list);
  if (blk.prev != kNil)
    blocks_[blk.prev].next = blk.next;
  else
    free_head_ = blk.next;
  if (blk.next != kNil)
    blocks_[blk.next].prev = blk.prev;
  else
    free_tail_ = blk.prev;
  blk.prev = blk.next = kNil;
  blk.on_free_list = false;
  --num_free_;
}

int32_t KvBlockManager::PopFree() {
  assert(num_free_ > 0);
  const int32_t b = free_head_;
  RemoveFree(b);
  if (blocks_[b].entry != 0) {
    DropEntry(b);
    ++evictions_;
  }
  return b;
}

void KvBlockManager::DropEntry(int32_t b) {
  Block& blk = blocks_[b];
  auto [lo, hi] = by_hash_.equal_range(blk.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == b) {
      by_hash_.erase(it);
      break;
    }
  }
  blk.entry = 0;
  blk.hash = 0;
  blk.salt = 0;
  blk.parent_entry = 0;
  --cached_blocks_;
}

void KvBlockManager::Unref(int32_t b) {
  Block& blk = blocks_[b];
  assert(blk.ref > 0);
  if (--blk.ref > 0) return;
  --used_blocks_;
  if (blk.entry != 0)
    PushFreeBack(b);  // evicted after everything freed before it
  else
    PushFreeFront(b);  // nothing worth keeping: hand it out first
}

// ---- lookup ---------------------------------------------------------------------------------

int32_t KvBlockManager::FindEntry(uint64_t hash, uint64_t salt, uint64_t parent_entry,
                                  std::span<const int32_t> tokens) const {
  auto [lo, hi] = by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const Block& blk = blocks_[it->second];
    if (blk.salt != salt || blk.parent_entry != parent_entry) continue;
    const std::span<const int32_t> stored = BlockTokens(it->second);
    if (std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return kNil;
}

KvBlockManager::Match KvBlockManager::FindPrefix(std::span<const int32_t> tokens, uint64_t salt,
                                                 bool keep_path) const {
  Match m;
  if (!prefix_caching_ || tokens.empty()) return m;
  const int max_blocks = static_cast<int>((tokens.size() - 1) / block_size_);
  uint64_t parent_hash = kRootBlockHash;
  uint64_t parent_entry = 0;
  for (int i = 0; i < max_blocks; ++i) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    const uint64_t h = Hash(parent_hash, salt, block_tokens);
    const int32_t b = FindEntry(h, salt, parent_entry, block_tokens);
    if (b == kNil) break;
    ++m.hit.blocks;
    if (blocks_[b].ref == 0) ++m.hit.blocks_free;
    if (keep_path) {
      m.blocks.push_back(b);
      m.hashes.push_back(h);
      m.entries.push_back(blocks_[b].entry);
    }
    parent_hash = h;
    parent_entry = blocks_[b].entry;
  }
  m.hit.tokens = m.hit.blocks * block_size_;
  return m;
}

PrefixHit KvBlockManager::Lookup(std::span<const int32_t> tokens, uint64_t salt) const {
  return FindPrefix(tokens, salt, /*keep_path=*/false).hit;
}

std::vector<int32_t> KvBlockManager::LookupBlocks(std::span<const int32_t> tokens,
                                                  uint64_t salt) const {
  return FindPrefix(tokens, salt, /*keep_path=*/true).blocks;
}

// ---- sequences ------------------------------------------------------------------------------

KvBlockManager::Seq& KvBlockManager::GetSeq(KvSeqId seq) {
  auto it = seqs_.find(seq);
  assert(it != seqs_.end());
  return it->second;
}

const KvBlockManager::Seq& KvBlockManager::GetSeq(KvSeqId seq) const {
  auto it = seqs_.find(seq);
  assert(it != seqs_.end());
  return it->second;
}

std::optional<int> KvBlockManager::Allocate(KvSeqId seq, std::span<const int32_t> tokens,
                                            uint64_t salt, int n_compute) {
  assert(!Contains(seq));
  assert(!tokens.empty() && n_compute >= 0);
  Match m = FindPrefix(tokens, salt, /*keep_path=*/true);
  const int64_t slots =
      std::min<int64_t>(static_cast<int64_t>(m.hit.tokens) + n_compute, tokens.size());
  const int new_blocks = BlocksForTokens(slots) - m.hit.blocks;
  if (new_blocks > num_free_ - m.hit.blocks_free) return std::nullopt;

  query_tokens_ += static_cast<int64_t>(tokens.size());
  hit_tokens_ += m.hit.tokens;
  Seq s;
  s.salt = salt;
  s.table.reserve(BlocksForTokens(slots));
  for (int32_t b : m.blocks) {
    Block& blk = blocks_[b];
    if (blk.ref == 0) {
      RemoveFree(b);
      ++used_blocks_;
    }
    ++blk.ref;
    s.table.push_back(b);
  }
  for (int i = 0; i < new_blocks; ++i) {
    const int32_t b = PopFree();
    blocks_[b].ref = 1;
    ++used_blocks_;
    s.table.push_back(b);
  }
  s.num_slots = static_cast<int>(slots);
  s.num_computed = m.hit.tokens;
  s.hashes = std::move(m.hashes);
  s.entries = std::move(m.entries);
  seqs_.emplace(seq, std::move(s));
  return m.hit.tokens;
}

bool KvBlockManager::Grow(KvSeqId seq, int n) {
  assert(n >= 0);
  Seq& s = GetSeq(seq);
  const int need =
      BlocksForTokens(static_cast<int64_t>(s.num_slots) + n) - static_cast<int>(s.table.size());
  if (need > num_free_) return false;
  for (int i = 0; i < need; ++i) {
    const int32_t b = PopFree();
    blocks_[b].ref = 1;
    ++used_blocks_;
    s.table.push_back(b);
  }
  s.num_slots += n;
  return true;
}

void KvBlockManager::Shrink(KvSeqId seq, int num_slots) {
  Seq& s = GetSeq(seq);
  assert(num_slots >= s.num_computed && num_slots <= s.num_slots);
  const int keep = BlocksForTokens(num_slots);
  while (static_cast<int>(s.table.size()) > keep) {
    const int32_t b = s.table.back();
    assert(blocks_[b].ref == 1 && blocks_[b].entry == 0);  // past num_computed: private, uncached
    s.table.pop_back();
    Unref(b);
  }
  s.num_slots = num_slots;
}

void KvBlockManager::Commit(KvSeqId seq, std::span<const int32_t> tokens, int num_computed,
                            int cacheable) {
  Seq& s = GetSeq(seq);
  assert(num_computed >= s.num_computed && num_computed <= s.num_slots);
  assert(tokens.size() >= static_cast<size_t>(num_computed));
  s.num_computed = num_computed;
  const int full = std::min(num_computed, cacheable) / block_size_;
  for (int i = static_cast<int>(s.hashes.size()); i < full; ++i) {
    const auto block_tokens = tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    const uint64_t parent_hash = i == 0 ? kRootBlockHash : s.hashes[i - 1];
    const uint64_t parent_entry = i == 0 ? 0 : s.entries[i - 1];
    const uint64_t h = Hash(parent_hash, s.salt, block_tokens);
    uint64_t entry = 0;
    if (prefix_caching_) {
      const int32_t existing = FindEntry(h, s.salt, parent_entry, block_tokens);
      if (existing != kNil) {
        entry = blocks_[existing].entry;  // same content computed elsewhere: name it the same
      } else {
        const int32_t b = s.table[i];
        Block& blk = blocks_[b];
        assert(blk.entry == 0 && blk.ref > 0);
        blk.entry = next_entry_++;
        blk.hash = h;
        blk.salt = s.salt;
        blk.parent_entry = parent_entry;
        std::copy(block_tokens.begin(), block_tokens.end(),
                  block_tokens_.begin() + static_cast<size_t>(b) * block_size_);
        by_hash_.emplace(h, b);
        ++cached_blocks_;
        entry = blk.entry;
      }
    }
    s.hashes.push_back(h);
    s.entries.push_back(entry);
  }
}

void KvBlockManager::Free(KvSeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  // Last block first: with the tail of the free list evicted last, the sequence's deepest blocks
  // are evicted before its (more shareable) leading ones.
  for (auto b = it->second.table.rbegin(); b != it->second.table.rend(); ++b) Unref(*b);
  seqs_.erase(it);
}

std::span<const int32_t> KvBlockManager::BlockTable(KvSeqId seq) const { return GetSeq(seq).table; }
int KvBlockManager::num_slots(KvSeqId seq) const { return GetSeq(seq).num_slots; }
int KvBlockManager::num_computed(KvSeqId seq) const { return GetSeq(seq).num_computed; }

KvStats KvBlockManager::stats() const {
  KvStats st;
  st.num_blocks = num_blocks();
  st.used_blocks = used_blocks_;
  st.cached_blocks = cached_blocks_;
  st.prefix_query_tokens = query_tokens_;
  st.prefix_hit_tokens = hit_tokens_;
  st.evictions = evictions_;
  return st;
}

Status KvBlockManager::CheckInvariants() const {
  const int n = num_blocks();
  std::vector<int32_t> refs(n, 0);
  for (const auto& [id, s] : seqs_) {
    const std::string who = "seq " + std::to_string(id);
    if (static_cast<int>(s.table.size()) != BlocksForTokens(s.num_slots)) {
      return Internal(who + ": table has " + std::to_string(s.table.size()) + " blocks for " +
                      std::to_string(s.num_slots) + " slots");
    }
    if (s.num_computed > s.num_slots) return Internal(who + ": computed past its slots");
    if (static_cast<int>(s.hashes.size()) != s.num_computed / block_size_ ||
        s.entries.size() != s.hashes.size()) {
      return Internal(who + ": hash chain length does not match its full blocks");
    }
    std::unordered_set<int32_t> seen;
    for (int32_t b : s.table) {
      if (b < 0 || b >= n) return Internal(who + ": block id out of range");
      if (!seen.insert(b).second) return Internal(who + ": block listed twice");
      ++refs[b];
    }
  }
  int used = 0, cached = 0, on_list = 0;
  for (int32_t b = 0; b < n; ++b) {
    const Block& blk = blocks_[b];
    const std::string who = "block " + std::to_string(b);
    if (blk.ref != refs[b]) {
      return Internal(who + ": ref " + std::to_string(blk.ref) + " but " + std::to_string(refs[b]) +
                      " table references");
    }
    if ((blk.ref == 0) != blk.on_free_list) return Internal(who + ": free list membership wrong");
    if (blk.ref > 0) ++used;
    if (blk.entry != 0) {
      ++cached;
      bool found = false;
      auto [lo, hi] = by_hash_.equal_range(blk.hash);
      for (auto it = lo; it != hi; ++it) found |= it->second == b;
      if (!found) return Internal(who + ": cached but not in the hash map");
    }
  }
  for (int32_t b = free_head_, prev = kNil; b != kNil; prev = b, b = blocks_[b].next) {
    if (blocks_[b].prev != prev) return Internal("free list: broken back link");
    if (++on_list > n) return Internal("free list: cycle");
  }
  if (on_list != num_free_) return Internal("free list: length differs from num_free");
  if (used != used_blocks_) return Internal("used block count is stale");
  if (cached != cached_blocks_ || static_cast<size_t>(cached) != by_hash_.size()) {
    return Internal("cached block count is stale");
  }
  if (used + num_free_ != n) return Internal("used + free != num_blocks");
  return Status::Ok();
}

}  // namespace kinfer
