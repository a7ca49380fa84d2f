// KvBlockManager: the paged KV cache's bookkeeping (vLLM v1's KVCacheManager + BlockPool, small).
//
// The physical KV memory is a pool of `num_blocks` blocks of `block_size` token positions each (all
// layers, keys and values). This class owns no tensors: it hands out integer block ids, keeps a
// block table per sequence, reference-counts blocks shared between sequences, and caches full
// blocks by content so that a later request with the same prefix skips their prefill.
//
//   sequence 7, block_size 4, 10 slots          pool (ref counts; F = on the free list)
//   tokens:  t0 t1 t2 t3 | t4 t5 t6 t7 | t8 t9      block 0: ref 2  cached  (shared with seq 9)
//   table:   [ 0,          5,            2 ]       block 5: ref 1  cached
//   position p lives in block table[p / 4],        block 2: ref 1  partial, not cached
//   row p % 4 of that block.                       block 3: ref 0  cached  F (reusable until
//   evicted)
//                                                  block 1: ref 0  empty   F
//
// Per sequence it tracks `num_slots` (positions that have a block: computed, or being computed by
// the step in flight) and `num_computed` (positions whose KV has been written). Slots only grow at
// the end, and a shared block is always full and computed, so no block is ever written by two
// sequences and nothing is copied on write.
//
// Prefix caching. When Commit() marks a block full and computed, it becomes a cache entry keyed by
// its chained hash (block_hash.h) and holding its salt, its parent entry's id and its token ids.
// Lookup() walks the prompt block by block; block i hits when an entry has the same hash AND the
// same salt, the same parent entry (the block matched at i-1; entry ids are never reused) AND the
// same token ids. By induction the whole prefix is then identical, so a hash collision can cost a
// miss but is never served. Only full blocks are cached, and the prompt's last token is never
// served from the cache (at most (len - 1) / block_size blocks hit), so the caller always computes
// at least one token and has logits to sample from.
//
// Free list and eviction. A block whose ref count drops to 0 goes on the free list but keeps its
// cached content: a later hit takes it back off the list (no copy). New blocks are taken from the
// head of the list; taking a cached block evicts its entry. Blocks with no cached content go to the
// head (used first); cached blocks go to the tail, and a freed sequence's blocks are appended last
// block first, so its longest-prefix block is evicted first and a shared system prompt last (vLLM).
// The order is "least recently freed first".
//
// Errors: running out of blocks is an ordinary return value (nullopt / false) and changes nothing;
// the scheduler preempts and retries. Violated REQUIRES are bugs (assert).
//
// Thread safety: none. One owner (the scheduler, on the engine thread) calls everything.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "runtime/kv/block_hash.h"

namespace kinfer {

using KvSeqId = uint64_t;

struct KvBlockManagerOptions {
  int num_blocks = 0;   // > 0
  int block_size = 16;  // tokens per block, > 0
  bool enable_prefix_caching = true;
  BlockHasher hasher;  // empty = HashBlockTokens
};

// INVALID_ARGUMENT naming the bad field.
Status ValidateKvBlockManagerOptions(const KvBlockManagerOptions& options);

// What the cache holds for a token sequence (Lookup()).
struct PrefixHit {
  int tokens = 0;       // positions served from the cache: blocks * block_size
  int blocks = 0;       // leading full blocks found
  int blocks_free = 0;  // of those, how many sit on the free list (ref count 0): taking them
                        // removes them from the free blocks that new allocations could use
};

// Counters in vLLM's meanings (kv_cache_usage, prefix_cache_queries/hits in tokens).
struct KvStats {
  int num_blocks = 0;
  int used_blocks = 0;              // ref count > 0
  int cached_blocks = 0;            // blocks holding a cache entry (used or free)
  int64_t prefix_query_tokens = 0;  // prompt tokens looked up by Allocate()
  int64_t prefix_hit_tokens = 0;    // of those, served from the cache
  int64_t evictions = 0;            // cache entries dropped to reuse their block
};

class KvBlockManager {
 public:
  // REQUIRES: ValidateKvBlockManagerOptions(options).ok().
  explicit KvBlockManager(KvBlockManagerOptions options);

  KvBlockManager(const KvBlockManager&) = delete;
  KvBlockManager& operator=(const KvBlockManager&) = delete;

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks a new allocation can take now: the free list, cached or not.
  int num_free_blocks() const { return num_free_; }
  // Blocks that hold `num_tokens` positions: ceil(num_tokens / block_size).
  int BlocksForTokens(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + block_size_ - 1) / block_size_);
  }

  // The cached prefix of `tokens` under `salt`. No side effects (no stats, no LRU touch).
  // tokens.size() - 1 positions at most (the last token is always computed).
  PrefixHit Lookup(std::span<const int32_t> tokens, uint64_t salt) const;
  // The blocks of that cached prefix, in order (Lookup().blocks of them). Pure, as Lookup().
  std::vector<int32_t> LookupBlocks(std::span<const int32_t> tokens, uint64_t salt) const;

  // Registers `seq`, takes a reference on each block of its cached prefix (as Lookup() would report
  // it now) and allocates new blocks so that the sequence holds `hit + n_compute` slots (clamped to
  // tokens.size()). Returns the number of positions served from the cache (num_computed starts
  // there). All or nothing: nullopt, with nothing changed, when the free list is too short.
  // Counts tokens.size() prefix query tokens and the hit as hit tokens.
  // REQUIRES: `seq` not registered; tokens non-empty; n_compute >= 0.
  std::optional<int> Allocate(KvSeqId seq, std::span<const int32_t> tokens, uint64_t salt,
                              int n_compute);

  // Adds `n` slots at the end of `seq`, taking blocks from the free list as needed. All or nothing:
  // false, with nothing changed, when there are not enough free blocks (the caller preempts).
  // REQUIRES: `seq` registered; n >= 0.
  [[nodiscard]] bool Grow(KvSeqId seq, int n);

  // Gives back the slots of `seq` from `num_slots` on (speculative decoding reserved slots for
  // draft tokens that were rejected): blocks left wholly past the end are released (they hold no
  // committed position, so no cache entry). REQUIRES: `seq` registered;
  // num_computed(seq) <= num_slots <= num_slots(seq).
  void Shrink(KvSeqId seq, int num_slots);

  // Marks positions [0, num_computed) of `seq` as written. Every block that becomes full is
  // hashed and, with prefix caching on, becomes a cache entry (unless an identical entry already
  // exists in another block: then this block stays private and is never served).
  // `tokens` are the sequence's token ids, at least num_computed of them (the same ids as before).
  // REQUIRES: `seq` registered; old num_computed <= num_computed <= num_slots.
  // Only blocks wholly below `cacheable` positions become cache entries (the batching engine keeps
  // blocks holding generated tokens out of the cache: their keys were computed on the decode path,
  // a prompt that contains the same tokens computes them on the prompt path).
  void Commit(KvSeqId seq, std::span<const int32_t> tokens, int num_computed,
              int cacheable = std::numeric_limits<int>::max());

  // Drops `seq`'s references; blocks reaching ref 0 go on the free list (see the header comment).
  // No-op for an unknown id.
  void Free(KvSeqId seq);

  bool Contains(KvSeqId seq) const { return seqs_.count(seq) != 0; }
  // REQUIRES: Contains(seq). The table stays valid until the next call that changes `seq`.
  std::span<const int32_t> BlockTable(KvSeqId seq) const;
  int num_slots(KvSeqId seq) const;
  int num_computed(KvSeqId seq) const;

  int ref_count(int block) const { return blocks_[block].ref; }
  // True when `block` holds a cache entry (servable by Lookup() while its prefix is cached too).
  bool is_cached(int block) const { return blocks_[block].entry != 0; }

  KvStats stats() const;

  // Checks every internal invariant (ref counts equal table references, the free list holds exactly
  // the ref-0 blocks, the hash map and the entries agree). INTERNAL with the first violation.
  // O(num_blocks + slots); for tests and debug builds.
  Status CheckInvariants() const;

 private:
  static constexpr int32_t kNil = -1;

  struct Block {
    int32_t ref = 0;
    int32_t prev = kNil;  // free list links, valid while on_free_list
    int32_t next = kNil;
    bool on_free_list = false;
    // Cache entry; entry == 0 means none.
    uint64_t entry = 0;  // unique, never reused
    uint64_t hash = 0;
    uint64_t salt = 0;
    uint64_t parent_entry = 0;  // 0 for a sequence's first block
  };
  struct Seq {
    uint64_t salt = 0;
    std::vector<int32_t> table;
    int num_slots = 0;
    int num_computed = 0;
    // Per full committed block: its chained hash and the entry id that names its content.
    std::vector<uint64_t> hashes;
    std::vector<uint64_t> entries;
  };
  struct Match {
    PrefixHit hit;
    std::vector<int32_t> blocks;
    std::vector<uint64_t> hashes;
    std::vector<uint64_t> entries;
  };

  Match FindPrefix(std::span<const int32_t> tokens, uint64_t salt, bool keep_path) const;
  // The cached block with this content, or kNil.
  int32_t FindEntry(uint64_t hash, uint64_t salt, uint64_t parent_entry,
                    std::span<const int32_t> tokens) const;
  uint64_t Hash(uint64_t parent, uint64_t salt, std::span<const int32_t> tokens) const;
  std::span<const int32_t> BlockTokens(int32_t block) const;

  // Free list.
  void PushFreeFront(int32_t b);
  void PushFreeBack(int32_t b);
  void RemoveFree(int32_t b);
  int32_t PopFree();  // REQUIRES: num_free_ > 0; evicts the block's entry
  void DropEntry(int32_t b);
  void Unref(int32_t b);

  Seq& GetSeq(KvSeqId seq);
  const Seq& GetSeq(KvSeqId seq) const;

  int block_size_;
  bool prefix_caching_;
  BlockHasher hasher_;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // [num_blocks][block_size]: token ids of cached blocks
  int32_t free_head_ = kNil;
  int32_t free_tail_ = kNil;
  int num_free_ = 0;
  uint64_t next_entry_ = 1;
  std::unordered_multimap<uint64_t, int32_t> by_hash_;  // hash -> blocks with that hash
  std::unordered_map<KvSeqId, Seq> seqs_;
  int used_blocks_ = 0;
  int cached_blocks_ = 0;
  int64_t query_tokens_ = 0;
  int64_t hit_tokens_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace kinfer
