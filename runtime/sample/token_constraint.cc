#include "runtime/sample/token_constraint.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "runtime/sample/draw.h"

namespace kinfer {

void ConstraintVocab::Index() {
  json_plain.assign(bytes.size(), 0);
  for (size_t id = 0; id < bytes.size(); ++id) {
    json_plain[id] = kind[id] == kText && JsonRecognizer::PlainStringBytes(bytes[id]) ? 1 : 0;
  }
  // The trie: text tokens sorted by their bytes, so that shared prefixes are adjacent.
  std::vector<int32_t> ids;
  for (size_t id = 0; id < bytes.size(); ++id) {
    if (kind[id] == kText && !bytes[id].empty()) ids.push_back(static_cast<int32_t>(id));
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes[static_cast<size_t>(a)] < bytes[static_cast<size_t>(b)];
  });
  trie.assign(1, TrieNode{});
  trie_tokens.clear();
  trie_depth = 0;
  std::vector<int32_t> path{0};  // the nodes of the previous token's bytes, by depth
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& b = bytes[static_cast<size_t>(id)];
    size_t common = 0;
    if (prev != nullptr) {
      const size_t lim = std::min(prev->size(), b.size());
      while (common < lim && (*prev)[common] == b[common]) ++common;
    }
    while (path.size() - 1 > common) {
      trie[static_cast<size_t>(path.back())].end = static_cast<int32_t>(trie.size());
      path.pop_back();
    }
    for (size_t j = common; j < b.size(); ++j) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(b[j]);
      node.depth = static_cast<uint16_t>(j + 1);
      trie_depth = std::max(trie_depth, j + 1);
      trie.push_back(node);
      path.push_back(static_cast<int32_t>(trie.size() - 1));
    }
    TrieNode& at = trie[static_cast<size_t>(path.back())];
    if (at.tok_begin == at.tok_end) at.tok_begin = static_cast<int32_t>(trie_tokens.size());
    trie_tokens.push_back(id);
    at.tok_end = static_cast<int32_t>(trie_tokens.size());
    prev = &b;
  }
  for (int32_t n : path) trie[static_cast<size_t>(n)].end = static_cast<int32_t>(trie.size());
}

namespace {

// Appends the words of a mask over n ids (TokenConstraint::AppendAllowed): text ids where
// allowed(id), end-of-generation ids when may_end, nothing else (other control tokens, ids past
// the vocabulary).
template <typename Allowed>
void AppendBits(const ConstraintVocab& v, size_t n, bool may_end, const Allowed& allowed,
                std::vector<uint64_t>* bits) {
  const size_t base = bits->size();
  bits->resize(base + (n + 63) / 64, 0);
  uint64_t* w = bits->data() + base;
  const size_t m = std::min(n, v.kind.size());
  for (size_t id = 0; id < m; ++id) {
    const bool ok = v.kind[id] == ConstraintVocab::kText            ? allowed(id)
                    : v.kind[id] == ConstraintVocab::kEndOfGeneration ? may_end
                                                                      : false;
    if (ok) w[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

// The same from a trie walk's bits (text ids only, a word per 64 ids of the vocabulary).
void AppendWalked(const ConstraintVocab& v, size_t n, bool may_end, const std::vector<uint64_t>& text,
                  std::span<const int32_t> end_ids, std::vector<uint64_t>* bits) {
  const size_t base = bits->size();
  bits->resize(base + (n + 63) / 64, 0);
  uint64_t* w = bits->data() + base;
  const size_t m = std::min(n, v.kind.size());
  const size_t full = std::min(m / 64, text.size());
  std::copy_n(text.begin(), full, w);
  if (m % 64 != 0 && m / 64 < text.size()) {
    w[m / 64] = text[m / 64] & ((uint64_t{1} << (m % 64)) - 1);
  }
  if (!may_end) return;
  for (int32_t id : end_ids) {
    if (static_cast<size_t>(id) < m) w[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }
}

// Mask as its bits say it (AppendAllowed, then ApplyTokenMask): one rule for the host and for a
// backend that applies the bits.
void MaskThroughBits(const TokenConstraint& c, std::span<float> logits) {
  thread_local std::vector<uint64_t> bits;
  bits.clear();
  c.AppendAllowed(logits.size(), &bits);
  ApplyTokenMask(bits, c.fallback(), logits);
}

std::vector<int32_t> EndIds(const ConstraintVocab& v) {
  std::vector<int32_t> ids;
  for (size_t id = 0; id < v.kind.size(); ++id) {
    if (v.kind[id] == ConstraintVocab::kEndOfGeneration) ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// The bytes of Grammar::plain_string_class() (JsonRecognizer's plain bytes also take >= 0x80).
bool IsPlainStringByte(uint8_t c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }

// Sets, in *allowed (a bit per token id, cleared first), the text tokens whose bytes `root` may
// take next: a depth-first walk over the vocabulary's trie in preorder. at[d] is the state after a
// node's first d bytes (its parent's own when a plain byte inside a string left it unchanged);
// plain[d] whether that state passes plain bytes (-1: not yet asked). `in_plain(r)`: r passes
// every plain byte unchanged; `feed_into(r, byte, out)`: *out = r fed byte, false when refused.
template <typename R, typename InPlain, typename FeedInto>
void WalkTrie(const ConstraintVocab& v, const R& root, std::vector<R>* scratch,
              const InPlain& in_plain, const FeedInto& feed_into, std::vector<uint64_t>* allowed) {
  allowed->assign((v.kind.size() + 63) / 64, 0);
  const auto& trie = v.trie;
  std::vector<const R*> at(v.trie_depth + 1, &root);
  std::vector<int8_t> plain(v.trie_depth + 1, -1);
  if (scratch->size() < v.trie_depth + 1)
    scratch->resize(v.trie_depth + 1);  // before at[] points in
  for (size_t i = 1; i < trie.size();) {
    const ConstraintVocab::TrieNode& node = trie[i];
    const size_t d = node.depth;
    const R* parent = at[d - 1];
    const bool plain_byte = IsPlainStringByte(node.byte);
    if (plain_byte && plain[d - 1] < 0) plain[d - 1] = in_plain(*parent) ? 1 : 0;
    if (plain_byte && plain[d - 1] == 1) {
      at[d] = parent;
      plain[d] = 1;
    } else {
      if (!feed_into(*parent, node.byte, &(*scratch)[d])) {
        i = static_cast<size_t>(node.end);  // no token below can come next
        continue;
      }
      at[d] = &(*scratch)[d];
      plain[d] = -1;
    }
    for (int32_t t = node.tok_begin; t < node.tok_end; ++t) {
      const auto id = static_cast<size_t>(v.trie_tokens[static_cast<size_t>(t)]);
      (*allowed)[id >> 6] |= uint64_t{1} << (id & 63);
    }
    ++i;
  }
}

}  // namespace

JsonObjectConstraint::JsonObjectConstraint(std::shared_ptr<const ConstraintVocab> vocab)
    : vocab_(std::move(vocab)), end_ids_(EndIds(*vocab_)) {}

void JsonObjectConstraint::Mask(std::span<float> logits) const { MaskThroughBits(*this, logits); }

void JsonObjectConstraint::AppendAllowed(size_t n, std::vector<uint64_t>* bits) const {
  const ConstraintVocab& v = *vocab_;
  const bool done = state_.complete();
  if (!done && v.trie.size() > 1) {
    const std::vector<uint64_t>* allowed = cache_.Find(state_);
    if (allowed == nullptr) {
      std::vector<uint64_t>* slot = cache_.Insert(state_);
      WalkTrie(
          v, state_, &scratch_, [](const JsonRecognizer& r) { return r.in_plain_string(); },
          [](const JsonRecognizer& r, uint8_t c, JsonRecognizer* out) {
            *out = r;
            return out->Feed(c);
          },
          slot);
      allowed = slot;
    }
    AppendWalked(v, n, false, *allowed, end_ids_, bits);
    return;
  }
  // Inside a string, a plain token is allowed without feeding it.
  const bool plain_ok = state_.in_plain_string() && v.json_plain.size() == v.kind.size();
  AppendBits(v, n, done, [&](size_t id) {
    return !done && ((plain_ok && v.json_plain[id] != 0) || state_.Accepts(v.bytes[id]));
  }, bits);
}

void JsonObjectConstraint::Accept(int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= vocab_->kind.size()) return;
  if (vocab_->kind[static_cast<size_t>(token)] != ConstraintVocab::kText) return;
  if (state_.in_plain_string() && vocab_->json_plain.size() == vocab_->kind.size() &&
      vocab_->json_plain[static_cast<size_t>(token)] != 0) {
    return;  // stays inside the string: nothing changes
  }
  JsonRecognizer next = state_;
  if (next.Feed(vocab_->bytes[static_cast<size_t>(token)])) state_ = next;
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const ConstraintVocab> vocab,
                                     std::shared_ptr<const Grammar> grammar)
    : vocab_(std::move(vocab)), end_ids_(EndIds(*vocab_)), state_(std::move(grammar)) {}

const std::vector<uint64_t>& GrammarConstraint::Walked() const {
  const std::span<const int32_t> raw = state_.raw();
  key_.assign(raw.begin(), raw.end());
  const std::vector<uint64_t>* allowed = cache_.Find(key_);
  if (allowed == nullptr) {
    std::vector<uint64_t>* slot = cache_.Insert(key_);
    WalkTrie(
        *vocab_, state_, &scratch_, [](const GrammarRecognizer& r) { return r.InPlainString(); },
        [](const GrammarRecognizer& r, uint8_t c, GrammarRecognizer* out) {
          return r.FeedInto(c, out);
        },
        slot);
    allowed = slot;
  }
  return *allowed;
}

void GrammarConstraint::Mask(std::span<float> logits) const { MaskThroughBits(*this, logits); }

void GrammarConstraint::AppendAllowed(size_t n, std::vector<uint64_t>* bits) const {
  AppendWalked(*vocab_, n, state_.complete(), Walked(), end_ids_, bits);
}

void GrammarConstraint::Accept(int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= vocab_->kind.size()) return;
  if (vocab_->kind[static_cast<size_t>(token)] != ConstraintVocab::kText) return;
  (void)state_.Feed(vocab_->bytes[static_cast<size_t>(token)]);
}

}  // namespace kinfer
