#include "runtime/kv/block_hash.h"

namespace kinfer {
namespace {

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;  // xxhash64's primes
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// murmur3's fmix64: every input bit affects every output bit.
inline uint64_t Avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 33;
  return h;
}

inline uint64_t Round(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = Rotl(acc, 31);
  return acc * kPrime1;
}

}  // namespace

uint64_t HashBlockTokens(uint64_t parent, uint64_t salt, std::span<const int32_t> tokens) {
  uint64_t h = Avalanche(parent ^ kPrime3) ^ Rotl(Avalanche(salt + kPrime1), 17);
  h = Round(h, tokens.size());
  // Two tokens per round, so the order and the pairing both matter.
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    const uint64_t pair = (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) << 32) |
                          static_cast<uint32_t>(tokens[i + 1]);
    h = Round(h, pair);
  }
  if (i < tokens.size()) h = Round(h, static_cast<uint32_t>(tokens[i]) ^ kPrime3);
  return Avalanche(h);
}

}  // namespace kinfer
