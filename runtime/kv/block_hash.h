// Block hashes for automatic prefix caching.
//
// A full KV block is identified by the chain
//
//   hash_0 = H(kRootBlockHash, salt, tokens of block 0)
//   hash_i = H(hash_{i-1},     salt, tokens of block i)
//
// so a block's hash names its whole prefix (vLLM's scheme). `salt` separates tenants: 0 means "no
// tenant"; requests with different salts never share blocks. The hash is a map key only: a hit is
// served after the KV block manager has compared the stored salt, parent entry and token ids (see
// kv_block_manager.h), so a collision costs a lookup, never a wrong answer.
//
// The default H is 64-bit, seeded from the parent and the salt, mixing each token with a multiply
// and rotate and finishing with the murmur3/xxhash avalanche (not cryptographic; it does not need
// to be, because hits are verified).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace kinfer {

// The parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0x6b696e6665722d6bULL;  // "kinfer-k"

// H(parent, salt, tokens). Injectable so that tests can force collisions.
using BlockHasher =
    std::function<uint64_t(uint64_t parent, uint64_t salt, std::span<const int32_t> tokens)>;

// The default H.
uint64_t HashBlockTokens(uint64_t parent, uint64_t salt, std::span<const int32_t> tokens);

}  // namespace kinfer
