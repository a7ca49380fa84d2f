#include "runtime/tokenizer/bpe.h"

#include <queue>

#include "runtime/tokenizer/unicode.h"

namespace kinfer {
namespace {

// Pairs are keyed as left + '\x1F' + right; merge strings never hold the unit separator (byte
// 0x1F is mapped to another code point by the byte-level encoding).
constexpr char kSeparator = '\x1F';

struct Symbol {
  uint32_t start;  // byte offset into the mapped word
  uint32_t n;      // length in bytes; 0 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

struct Bigram {
  int32_t left;
  int32_t right;
  int32_t rank;
  uint32_t left_n;   // symbol lengths when queued; a mismatch later means the pair is stale
  uint32_t right_n;
};

struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

}  // namespace

BpeMerges::BpeMerges(const std::vector<std::string>& merges) {
  ranks_.reserve(merges.size());
  std::string key;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    std::string_view first, second;
    const size_t pos = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (pos != std::string::npos) {
      first = std::string_view(m).substr(0, pos);
      second = std::string_view(m).substr(pos + 1);
    }
    key.assign(first);
    key.push_back(kSeparator);
    key.append(second);
    ranks_.try_emplace(key, static_cast<int32_t>(i));
  }
}

int32_t BpeMerges::Rank(std::string_view left, std::string_view right) const {
  // Small keys stay on the stack.
  char buf[128];
  const size_t len = left.size() + 1 + right.size();
  std::string heap;
  char* key = buf;
  if (len > sizeof(buf)) {
    heap.resize(len);
    key = heap.data();
  }
  std::copy(left.begin(), left.end(), key);
  key[left.size()] = kSeparator;
  std::copy(right.begin(), right.end(), key + left.size() + 1);
  auto it = ranks_.find(std::string_view(key, len));
  return it == ranks_.end() ? -1 : it->second;
}

void BpeMerges::EncodeWord(std::string_view word, const Vocab& vocab, bool ignore_merges,
                           std::vector<int32_t>* out) const {
  std::string mapped;
  mapped.reserve(word.size() * 2);
  for (char c : word) mapped += unicode::ByteToUnicode(static_cast<uint8_t>(c));

  std::vector<Symbol> symbols;
  if (ignore_merges && vocab.Find(mapped) >= 0) {
    symbols.push_back({0, static_cast<uint32_t>(mapped.size()), -1, -1});
  } else {
    symbols.reserve(mapped.size());
    uint32_t offset = 0;
    while (offset < mapped.size()) {
      const uint32_t len = static_cast<uint32_t>(std::min<size_t>(
          mapped.size() - offset, unicode::Utf8SequenceLength(static_cast<uint8_t>(mapped[offset]))));
      const int32_t index = static_cast<int32_t>(symbols.size());
      offset += len;
      symbols.push_back({offset - len, len, index - 1, offset == mapped.size() ? -1 : index + 1});
    }
  }

  auto text_of = [&](const Symbol& s) { return std::string_view(mapped).substr(s.start, s.n); };
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t rank = Rank(text_of(symbols[left]), text_of(symbols[right]));
    if (rank < 0) return;
    queue.push({left, right, rank, symbols[left].n, symbols[right].n});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[bigram.left];
    Symbol& right = symbols[bigram.right];
    if (left.n == 0 || right.n == 0 || left.n != bigram.left_n || right.n != bigram.right_n) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = bigram.left;
    try_add(left.prev, bigram.left);
    try_add(bigram.left, left.next);
  }

  for (const Symbol& s : symbols) {
    if (s.n == 0) continue;
    const std::string_view text = text_of(s);
    const int32_t id = vocab.Find(text);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Byte fallback, as llama.cpp: each byte of the mapped text as a one-byte token text.
    for (char c : text) {
      const int32_t byte_id = vocab.Find(std::string_view(&c, 1));
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace kinfer
