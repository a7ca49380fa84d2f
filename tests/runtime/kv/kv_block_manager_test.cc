#include "runtime/kv/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "runtime/kv/block_hash.h"

namespace kinfer {
namespace {

std::vector<int32_t> Range(int32_t first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class KvBlockManagerTest : public ::testing::Test {
 protected:
  void Make(int num_blocks, int block_size = 4, BlockHasher hasher = {}, bool caching = true) {
    KvBlockManagerOptions o;
    o.num_blocks = num_blocks;
    o.block_size = block_size;
    o.hasher = std::move(hasher);
    o.enable_prefix_caching = caching;
    ASSERT_TRUE(ValidateKvBlockManagerOptions(o).ok());
    kv_ = std::make_unique<KvBlockManager>(std::move(o));
  }
  // Allocates the whole of `tokens`, marks it computed (as a finished prefill), returns the hit.
  int Prefill(KvSeqId id, const std::vector<int32_t>& tokens, uint64_t salt = 0) {
    const PrefixHit hit = kv_->Lookup(tokens, salt);
    auto cached = kv_->Allocate(id, tokens, salt, static_cast<int>(tokens.size()) - hit.tokens);
    EXPECT_TRUE(cached.has_value());
    if (!cached) return -1;
    EXPECT_EQ(*cached, hit.tokens);
    kv_->Commit(id, tokens, static_cast<int>(tokens.size()));
    return *cached;
  }
  void ExpectInvariants() {
    const Status st = kv_->CheckInvariants();
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  std::unique_ptr<KvBlockManager> kv_;
};

TEST(KvBlockManagerOptionsTest, RejectsBadSizes) {
  KvBlockManagerOptions o;
  EXPECT_FALSE(ValidateKvBlockManagerOptions(o).ok());
  o.num_blocks = 4;
  o.block_size = 0;
  EXPECT_FALSE(ValidateKvBlockManagerOptions(o).ok());
  o.block_size = 16;
  EXPECT_TRUE(ValidateKvBlockManagerOptions(o).ok());
}

TEST(BlockHashTest, DependsOnParentSaltOrderAndLength) {
  const std::vector<int32_t> a{1, 2, 3, 4};
  const std::vector<int32_t> b{2, 1, 3, 4};
  const std::vector<int32_t> c{1, 2, 3};
  const uint64_t h = HashBlockTokens(kRootBlockHash, 0, a);
  EXPECT_EQ(h, HashBlockTokens(kRootBlockHash, 0, a));
  EXPECT_NE(h, HashBlockTokens(kRootBlockHash, 0, b));
  EXPECT_NE(h, HashBlockTokens(kRootBlockHash, 0, c));
  EXPECT_NE(h, HashBlockTokens(kRootBlockHash, 1, a));
  EXPECT_NE(h, HashBlockTokens(h, 0, a));
}

TEST_F(KvBlockManagerTest, AllocateGrowFreeAccountsBlocks) {
  Make(8);
  const auto p = Range(100, 6);  // 1.5 blocks
  ASSERT_EQ(kv_->Allocate(1, p, 0, 6), 0);
  EXPECT_EQ(kv_->BlockTable(1).size(), 2u);
  EXPECT_EQ(kv_->num_slots(1), 6);
  EXPECT_EQ(kv_->num_computed(1), 0);
  EXPECT_EQ(kv_->num_free_blocks(), 6);
  ASSERT_TRUE(kv_->Grow(1, 2));  // 8 slots: still 2 blocks
  EXPECT_EQ(kv_->BlockTable(1).size(), 2u);
  ASSERT_TRUE(kv_->Grow(1, 1));  // 9 slots: a third block
  EXPECT_EQ(kv_->BlockTable(1).size(), 3u);
  EXPECT_EQ(kv_->stats().used_blocks, 3);
  ExpectInvariants();
  kv_->Free(1);
  EXPECT_FALSE(kv_->Contains(1));
  EXPECT_EQ(kv_->stats().used_blocks, 0);
  EXPECT_EQ(kv_->num_free_blocks(), 8);
  ExpectInvariants();
  kv_->Free(1);  // unknown id: no-op
}

TEST_F(KvBlockManagerTest, AllocationIsAllOrNothing) {
  Make(4);
  ASSERT_TRUE(kv_->Allocate(1, Range(0, 8), 0, 8).has_value());  // 2 blocks
  const KvStats before = kv_->stats();
  EXPECT_FALSE(kv_->Allocate(2, Range(50, 12), 0, 12).has_value());  // needs 3, 2 free
  EXPECT_FALSE(kv_->Contains(2));
  EXPECT_EQ(kv_->num_free_blocks(), 2);
  EXPECT_EQ(kv_->stats().prefix_query_tokens, before.prefix_query_tokens);
  EXPECT_FALSE(kv_->Grow(1, 9));  // 17 slots = 5 blocks > 4
  EXPECT_EQ(kv_->num_slots(1), 8);
  EXPECT_EQ(kv_->BlockTable(1).size(), 2u);
  EXPECT_TRUE(kv_->Grow(1, 8));  // exactly 4 blocks
  EXPECT_EQ(kv_->num_free_blocks(), 0);
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, ChunkedAllocationHoldsOnlyTheChunk) {
  Make(16);
  const auto p = Range(0, 40);
  ASSERT_EQ(kv_->Allocate(1, p, 0, 10), 0);
  EXPECT_EQ(kv_->num_slots(1), 10);
  EXPECT_EQ(kv_->BlockTable(1).size(), 3u);
  kv_->Commit(1, p, 10);
  EXPECT_EQ(kv_->stats().cached_blocks, 2);  // two full blocks, the third is partial
  ASSERT_TRUE(kv_->Grow(1, 30));
  kv_->Commit(1, p, 40);
  EXPECT_EQ(kv_->stats().cached_blocks, 10);
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, ConcurrentSequencesShareCommonPrefixBlocks) {
  Make(16);
  const auto system = Range(1000, 8);  // two full blocks
  const auto a = Concat(system, Range(1, 5));
  const auto b = Concat(system, Range(2000, 3));
  EXPECT_EQ(Prefill(1, a), 0);
  EXPECT_EQ(kv_->Lookup(b, 0).tokens, 8);
  EXPECT_EQ(Prefill(2, b), 8);
  auto ta = kv_->BlockTable(1);
  auto tb = kv_->BlockTable(2);
  ASSERT_GE(tb.size(), 3u);
  EXPECT_EQ(ta[0], tb[0]);
  EXPECT_EQ(ta[1], tb[1]);
  EXPECT_NE(ta[2], tb[2]);
  EXPECT_EQ(kv_->ref_count(ta[0]), 2);
  EXPECT_EQ(kv_->ref_count(ta[1]), 2);
  EXPECT_EQ(kv_->ref_count(ta[2]), 1);
  EXPECT_EQ(kv_->num_computed(2), static_cast<int>(b.size()));
  ExpectInvariants();
  // Freeing one keeps the shared blocks for the other.
  const int32_t shared = ta[0];
  kv_->Free(1);
  EXPECT_EQ(kv_->ref_count(shared), 1);
  kv_->Free(2);
  EXPECT_EQ(kv_->ref_count(shared), 0);
  EXPECT_TRUE(kv_->is_cached(shared));
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, LastPromptTokenIsNeverServedFromCache) {
  Make(16);
  const auto p = Range(0, 8);  // exactly two blocks
  Prefill(1, p);
  kv_->Free(1);
  // The same 8 tokens again: only the first block may hit (the second holds the last token).
  EXPECT_EQ(kv_->Lookup(p, 0).tokens, 4);
  // One more token: both blocks hit, the 9th is computed.
  EXPECT_EQ(kv_->Lookup(Concat(p, {42}), 0).tokens, 8);
  EXPECT_EQ(kv_->Lookup(std::vector<int32_t>{7}, 0).tokens, 0);
}

TEST_F(KvBlockManagerTest, LookupHasNoSideEffects) {
  Make(8);
  Prefill(1, Range(0, 9));
  kv_->Free(1);
  const KvStats before = kv_->stats();
  const int free_before = kv_->num_free_blocks();
  const PrefixHit hit = kv_->Lookup(Range(0, 9), 0);
  EXPECT_EQ(hit.tokens, 8);
  EXPECT_EQ(hit.blocks, 2);
  EXPECT_EQ(hit.blocks_free, 2);
  EXPECT_EQ(kv_->stats().prefix_query_tokens, before.prefix_query_tokens);
  EXPECT_EQ(kv_->stats().prefix_hit_tokens, before.prefix_hit_tokens);
  EXPECT_EQ(kv_->num_free_blocks(), free_before);
}

TEST_F(KvBlockManagerTest, PrefixHitCountsAreInTokens) {
  Make(16);
  const auto first = Range(0, 10);
  Prefill(1, first);
  kv_->Free(1);
  // A second turn: the first turn plus more.
  const auto second = Concat(first, Range(500, 7));
  EXPECT_EQ(Prefill(2, second), 8);
  const KvStats st = kv_->stats();
  EXPECT_EQ(st.prefix_query_tokens, 10 + 17);
  EXPECT_EQ(st.prefix_hit_tokens, 8);
}

TEST_F(KvBlockManagerTest, FreedCachedBlocksAreReusedWithoutCopy) {
  Make(4);
  const auto p = Range(0, 9);
  Prefill(1, p);
  const std::vector<int32_t> table(kv_->BlockTable(1).begin(), kv_->BlockTable(1).end());
  kv_->Free(1);
  EXPECT_EQ(kv_->num_free_blocks(), 4);
  EXPECT_EQ(Prefill(2, p), 8);
  EXPECT_EQ(kv_->BlockTable(2)[0], table[0]);
  EXPECT_EQ(kv_->BlockTable(2)[1], table[1]);
  EXPECT_EQ(kv_->stats().evictions, 0);
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, EvictsLeastRecentlyFreedFirstAndDeepestBlockOfASequenceFirst) {
  Make(6);
  // Three sequences of two full blocks + one token each would need 9 blocks; use 2 full blocks
  // (8 tokens + 1) for A, then free; B likewise; the pool then holds A's and B's cached blocks.
  const auto a = Range(0, 9);
  const auto b = Range(100, 9);
  Prefill(1, a);
  const std::vector<int32_t> ta(kv_->BlockTable(1).begin(), kv_->BlockTable(1).end());
  kv_->Free(1);
  Prefill(2, b);
  const std::vector<int32_t> tb(kv_->BlockTable(2).begin(), kv_->BlockTable(2).end());
  kv_->Free(2);
  EXPECT_EQ(kv_->stats().cached_blocks, 4);
  // The uncached partial blocks (ta[2], tb[2]) are handed out before any cached one.
  ASSERT_TRUE(kv_->Allocate(3, Range(900, 2), 0, 2).has_value());
  ASSERT_TRUE(kv_->Allocate(4, Range(910, 2), 0, 2).has_value());
  EXPECT_EQ(kv_->stats().evictions, 0);
  // Next: A's deepest block (A freed first, last block first), then A's first, then B's.
  ASSERT_TRUE(kv_->Allocate(5, Range(920, 2), 0, 2).has_value());
  EXPECT_EQ(kv_->BlockTable(5)[0], ta[1]);
  EXPECT_EQ(kv_->stats().evictions, 1);
  EXPECT_EQ(kv_->Lookup(a, 0).tokens, 4);  // A's first block still hits
  EXPECT_EQ(kv_->Lookup(b, 0).tokens, 8);
  ASSERT_TRUE(kv_->Allocate(6, Range(930, 2), 0, 2).has_value());
  EXPECT_EQ(kv_->BlockTable(6)[0], ta[0]);
  EXPECT_EQ(kv_->Lookup(a, 0).tokens, 0);
  EXPECT_EQ(kv_->Lookup(b, 0).tokens, 8);
  EXPECT_EQ(kv_->stats().evictions, 2);
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, AHitMovesABlockOffTheFreeListSoItIsNotEvicted) {
  Make(4);
  const auto a = Range(0, 5);  // block 0 full and cached
  Prefill(1, a);
  kv_->Free(1);
  EXPECT_EQ(Prefill(2, a), 4);  // takes the cached block back
  // The remaining 2 free blocks can be allocated without evicting the shared one.
  ASSERT_TRUE(kv_->Allocate(3, Range(50, 8), 0, 8).has_value());
  EXPECT_EQ(kv_->stats().evictions, 0);
  EXPECT_FALSE(kv_->Allocate(4, Range(60, 1), 0, 1).has_value());
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, HitBlocksOnTheFreeListDoNotCountAsSpaceForNewBlocks) {
  Make(3);
  const auto a = Range(0, 9);  // 2 cached blocks + 1 partial
  Prefill(1, a);
  kv_->Free(1);
  // Reusing the 2 cached blocks leaves 1 free block: 9 tokens + 4 more needs 2 new blocks.
  const auto longer = Concat(Range(0, 8), Range(70, 5));
  EXPECT_EQ(kv_->Lookup(longer, 0).blocks_free, 2);
  EXPECT_FALSE(kv_->Allocate(2, longer, 0, 5).has_value());
  EXPECT_TRUE(kv_->Allocate(2, longer, 0, 4).has_value());  // exactly one new block
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, DifferentSaltsNeverShareBlocks) {
  Make(16);
  const auto p = Range(0, 13);
  EXPECT_EQ(Prefill(1, p, /*salt=*/7), 0);
  EXPECT_EQ(kv_->Lookup(p, 8).tokens, 0);
  EXPECT_EQ(kv_->Lookup(p, 0).tokens, 0);
  EXPECT_EQ(kv_->Lookup(p, 7).tokens, 12);
  EXPECT_EQ(Prefill(2, p, 8), 0);
  EXPECT_NE(kv_->BlockTable(1)[0], kv_->BlockTable(2)[0]);
  EXPECT_EQ(Prefill(3, p, 7), 12);
  EXPECT_EQ(kv_->BlockTable(1)[0], kv_->BlockTable(3)[0]);
}

TEST_F(KvBlockManagerTest, SaltIsolationHoldsEvenWhenTheHasherIgnoresTheSalt) {
  Make(16, 4, [](uint64_t parent, uint64_t, std::span<const int32_t> t) {
    return HashBlockTokens(parent, 0, t);
  });
  const auto p = Range(0, 9);
  Prefill(1, p, 1);
  EXPECT_EQ(kv_->Lookup(p, 2).tokens, 0);
  EXPECT_EQ(kv_->Lookup(p, 1).tokens, 8);
}

TEST_F(KvBlockManagerTest, HashCollisionsAreNeverServed) {
  // Every block hashes to the same value.
  Make(32, 4, [](uint64_t, uint64_t, std::span<const int32_t>) { return uint64_t{42}; });
  const auto a = Range(0, 9);
  const auto b = Range(100, 9);
  Prefill(1, a);
  EXPECT_EQ(kv_->Lookup(b, 0).tokens, 0);
  EXPECT_EQ(Prefill(2, b), 0);
  EXPECT_EQ(kv_->Lookup(a, 0).tokens, 8);
  EXPECT_EQ(kv_->Lookup(b, 0).tokens, 8);
  // Same second block, different first block: the parent check rejects the second block too.
  const auto c = Concat(Range(500, 4), Concat(Range(4, 4), {1}));
  EXPECT_EQ(kv_->Lookup(c, 0).tokens, 0);
  // Same first block, different second block: only the first hits.
  const auto d = Concat(Range(0, 4), Concat(Range(600, 4), {1}));
  EXPECT_EQ(kv_->Lookup(d, 0).tokens, 4);
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, ParentCheckRejectsAMatchingBlockUnderADifferentPrefix) {
  // A hasher that ignores the parent: a child block matches on tokens alone unless the parent
  // entry is checked.
  Make(4, 4, [](uint64_t, uint64_t salt, std::span<const int32_t> t) {
    return HashBlockTokens(kRootBlockHash, salt, t);
  });
  const auto x = Concat(Range(0, 4), Concat(Range(10, 4), {99}));
  Prefill(1, x);
  kv_->Free(1);
  const auto y = Concat(Range(50, 4), Concat(Range(10, 4), {99}));
  EXPECT_EQ(kv_->Lookup(y, 0).tokens, 0);
}

TEST_F(KvBlockManagerTest, DuplicateContentComputedTwiceStaysConsistent) {
  Make(16);
  const auto p = Range(0, 9);
  // Both allocated before either commits: no sharing, both compute the same blocks.
  ASSERT_EQ(kv_->Allocate(1, p, 0, 9), 0);
  ASSERT_EQ(kv_->Allocate(2, p, 0, 9), 0);
  kv_->Commit(1, p, 9);
  kv_->Commit(2, p, 9);
  EXPECT_EQ(kv_->stats().cached_blocks, 2);  // the duplicates are not cached twice
  // A continuation of seq 2 still chains from the canonical entries.
  auto longer = Concat(p, Range(30, 8));
  ASSERT_TRUE(kv_->Grow(2, 8));
  kv_->Commit(2, longer, 17);
  kv_->Free(1);
  kv_->Free(2);
  EXPECT_EQ(kv_->Lookup(Concat(longer, {1}), 0).tokens, 16);
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, PrefixCachingOffNeverHits) {
  Make(16, 4, {}, /*caching=*/false);
  const auto p = Range(0, 13);
  Prefill(1, p);
  kv_->Free(1);
  EXPECT_EQ(kv_->Lookup(p, 0).tokens, 0);
  EXPECT_EQ(kv_->stats().cached_blocks, 0);
  ExpectInvariants();
}

TEST_F(KvBlockManagerTest, RandomizedOperationsKeepInvariantsAndLeakNothing) {
  std::mt19937_64 rng(12345);
  Make(48, 4, [](uint64_t p, uint64_t s, std::span<const int32_t> t) {
    return HashBlockTokens(p, s, t) & 0xF;  // many collisions
  });
  struct Live {
    std::vector<int32_t> tokens;
  };
  std::unordered_map<KvSeqId, Live> live;
  // What each block holds, as the test saw it written: (salt, the whole prefix up to its end).
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> written(48);
  auto record = [&](KvSeqId id, const std::vector<int32_t>& t, uint64_t salt) {
    const auto table = kv_->BlockTable(id);
    const int full = kv_->num_computed(id) / 4;
    for (int i = 0; i < full; ++i) {
      written[table[i]] = {salt, std::vector<int32_t>(t.begin(), t.begin() + 4 * (i + 1))};
    }
  };
  std::unordered_map<KvSeqId, uint64_t> salts;
  KvSeqId next = 1;
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 || live.empty()) {
      // A prompt from a small alphabet of prefixes, so hits are common.
      std::vector<int32_t> t = Range(static_cast<int32_t>(rng() % 3) * 100, 4 * (rng() % 4));
      const int extra = 1 + static_cast<int>(rng() % 9);
      for (int i = 0; i < extra; ++i) t.push_back(static_cast<int32_t>(rng() % 5));
      const uint64_t salt = rng() % 2;
      const PrefixHit hit = kv_->Lookup(t, salt);
      const int n = 1 + static_cast<int>(rng() % (t.size() - hit.tokens));
      auto cached = kv_->Allocate(next, t, salt, n);
      if (cached) {
        ASSERT_EQ(*cached, hit.tokens);
        // Every served block holds exactly this prefix under this salt.
        const auto table = kv_->BlockTable(next);
        for (int i = 0; i < hit.blocks; ++i) {
          ASSERT_EQ(written[table[i]].first, salt);
          ASSERT_EQ(written[table[i]].second,
                    std::vector<int32_t>(t.begin(), t.begin() + 4 * (i + 1)));
        }
        live[next] = Live{t};
        salts[next] = salt;
        kv_->Commit(next, t, *cached + n);
        record(next, t, salt);
      }
      ++next;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const KvSeqId id = it->first;
      if (op == 1) {
        kv_->Free(id);
        live.erase(it);
      } else {
        // Finish the known tokens or append a generated one.
        std::vector<int32_t>& t = it->second.tokens;
        const int slots = kv_->num_slots(id);
        if (slots < static_cast<int>(t.size())) {
          const int n = static_cast<int>(t.size()) - slots;
          if (kv_->Grow(id, n)) {
            kv_->Commit(id, t, slots + n);
            record(id, t, salts[id]);
          }
        } else {
          t.push_back(static_cast<int32_t>(rng() % 5));
          if (kv_->Grow(id, 1)) {
            kv_->Commit(id, t, static_cast<int>(t.size()));
            record(id, t, salts[id]);
          } else {
            t.pop_back();
          }
        }
      }
    }
    if (step % 97 == 0) {
      const Status st = kv_->CheckInvariants();
      ASSERT_TRUE(st.ok()) << "step " << step << ": " << st.ToString();
    }
  }
  for (auto& [id, l] : live) kv_->Free(id);
  ExpectInvariants();
  EXPECT_EQ(kv_->stats().used_blocks, 0);
  EXPECT_EQ(kv_->num_free_blocks(), 48);
}

}  // namespace
}  // namespace kinfer
