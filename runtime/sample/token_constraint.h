// Constrained decoding: which tokens may come next, applied to the logits before the draw.
//
//   ConstraintVocab   the vocabulary as a constraint sees it: each token's bytes, and whether it
//                     ends generation (end-of-generation ids) or can never be chosen under a
//                     constraint (other control tokens, tokens with no bytes). Built once per
//                     engine from the tokenizer.
//   TokenConstraint   the interface a Sampler calls: Mask the logits, then Accept the token drawn.
//   JsonObjectConstraint  OpenAI's response_format {"type": "json_object"}: the text is one JSON
//                     object (JsonRecognizer); end-of-generation tokens are allowed only once it is
//                     complete, and then nothing else is.
//   GrammarConstraint the text is a sentence of a Grammar (grammar.h; response_format
//                     json_schema builds one from the schema): end-of-generation tokens are
//                     allowed once the text is complete, beside whatever may still follow.
//
// The check is on token bytes as the model emits them, so the streamed text is that object (a
// response cut by max_tokens is a prefix of one, with finish_reason "length", as OpenAI's).
//
// Cost: over an indexed vocabulary (ConstraintVocab::Index, as the engine's), Mask walks the
// vocabulary's byte trie, feeding each shared prefix once and skipping a subtree at its first
// refused byte; inside a free string it passes plain bytes without feeding them; and it keeps the
// masks of the last 16 states it walked from (MaskCache), since states recur (inside a free
// string every character leaves the same one). Without the index, a JsonObjectConstraint tries
// every token's bytes against a copy of the state (about the vocabulary's total bytes, ~250 KB
// for a 49,152-token vocabulary, per step).
//
// Thread safety: a constraint belongs to its request's Sampler (one thread); a ConstraintVocab is
// immutable and shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/sample/grammar.h"
#include "runtime/sample/json_recognizer.h"

namespace kinfer {

struct ConstraintVocab {
  enum Kind : uint8_t { kText = 0, kEndOfGeneration = 1, kNever = 2 };
  std::vector<std::string> bytes;  // per id
  std::vector<uint8_t> kind;       // per id, a Kind
  // Filled by Index(): per id, whether its bytes can sit inside a JSON string as they are
  // (JsonRecognizer::PlainStringBytes). Without it every token is fed byte by byte.
  std::vector<uint8_t> json_plain;
  // Filled by Index(): the kText tokens' bytes as a trie, nodes in preorder (node 0 is the root,
  // the empty prefix). Node i's subtree is the nodes i .. end-1; the tokens whose bytes end at it
  // are trie_tokens[tok_begin .. tok_end).
  struct TrieNode {
    uint8_t byte = 0;    // the edge from its parent
    uint16_t depth = 0;  // bytes from the root
    int32_t end = 0;
    int32_t tok_begin = 0, tok_end = 0;
  };
  std::vector<TrieNode> trie;
  std::vector<int32_t> trie_tokens;
  size_t trie_depth = 0;  // the longest token's bytes

  void Index();
};

// The masks (a bit per token id) of the last kEntries states a constraint walked from, the
// oldest replaced first: states recur (inside a free string every character leaves the same one).
template <typename State>
class MaskCache {
 public:
  static constexpr size_t kEntries = 16;  // ~6 KB each for a 49,152-token vocabulary

  // The mask kept for `state`, or nullptr.
  const std::vector<uint64_t>* Find(const State& state) const {
    for (const Entry& e : entries_) {
      if (e.state == state) return &e.allowed;
    }
    return nullptr;
  }
  // The slot for `state`'s mask, to be filled by the caller.
  std::vector<uint64_t>* Insert(const State& state) {
    if (entries_.size() < kEntries) {
      entries_.emplace_back();
      next_ = entries_.size() - 1;
    }
    Entry& e = entries_[next_];
    next_ = (next_ + 1) % kEntries;
    e.state = state;
    return &e.allowed;
  }

 private:
  struct Entry {
    State state;
    std::vector<uint64_t> allowed;
  };
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -infinity. At least one token stays
  // allowed: when the constraint allows none, the end-of-generation tokens are.
  virtual void Mask(std::span<float> logits) const = 0;
  // The token chosen (allowed by Mask, or an end-of-generation token).
  virtual void Accept(int32_t token) = 0;
  // Whether Mask's decision can be had as bits (AppendAllowed), for a backend that applies it
  // where the logits are (DrawParams::mask). The default: no, the constraint masks on the host.
  virtual bool MasksAsBits() const { return false; }
  // Appends ceil(n / 64) words to *bits, a bit per id below n, set for the ids Mask leaves:
  // Mask(logits of n ids) is ApplyTokenMask(those words, fallback(), logits). REQUIRES:
  // MasksAsBits().
  virtual void AppendAllowed(size_t n, std::vector<uint64_t>* bits) const {}
  // The ids allowed instead when nothing the mask leaves has a finite logit (the
  // end-of-generation tokens). Valid while the constraint lives.
  virtual std::span<const int32_t> fallback() const { return {}; }
};

class JsonObjectConstraint : public TokenConstraint {
 public:
  // An indexed vocabulary (ConstraintVocab::Index) is walked as a trie, with masks cached per
  // state; without the index every token's bytes are fed (the reference the tests compare with).
  explicit JsonObjectConstraint(std::shared_ptr<const ConstraintVocab> vocab);
  void Mask(std::span<float> logits) const override;
  void Accept(int32_t token) override;
  bool MasksAsBits() const override { return true; }
  void AppendAllowed(size_t n, std::vector<uint64_t>* bits) const override;
  std::span<const int32_t> fallback() const override { return end_ids_; }
  bool complete() const { return state_.complete(); }

 private:
  std::shared_ptr<const ConstraintVocab> vocab_;
  std::vector<int32_t> end_ids_;  // the vocabulary's end-of-generation ids
  JsonRecognizer state_;
  mutable std::vector<JsonRecognizer> scratch_;  // the walk's states per trie depth
  mutable MaskCache<JsonRecognizer> cache_;
};

class GrammarConstraint : public TokenConstraint {
 public:
  // REQUIRES: vocab->Index() was called.
  GrammarConstraint(std::shared_ptr<const ConstraintVocab> vocab,
                    std::shared_ptr<const Grammar> grammar);
  void Mask(std::span<float> logits) const override;
  void Accept(int32_t token) override;
  bool MasksAsBits() const override { return true; }
  void AppendAllowed(size_t n, std::vector<uint64_t>* bits) const override;
  std::span<const int32_t> fallback() const override { return end_ids_; }
  bool complete() const { return state_.complete(); }
  const GrammarRecognizer& state() const { return state_; }

 private:
  // The cached trie walk's bits for the current state.
  const std::vector<uint64_t>& Walked() const;

  std::shared_ptr<const ConstraintVocab> vocab_;
  std::vector<int32_t> end_ids_;
  GrammarRecognizer state_;
  // The walk's recognizer per trie depth, kept to reuse their storage.
  mutable std::vector<GrammarRecognizer> scratch_;
  mutable std::vector<int32_t> key_;  // GrammarRecognizer::raw(), the cache's key
  mutable MaskCache<std::vector<int32_t>> cache_;
};

}  // namespace kinfer
