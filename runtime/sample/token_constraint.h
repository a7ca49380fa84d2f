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
// Cost: Mask tries every token's bytes against a copy of the state: about the vocabulary's total
// bytes per step (~250 KB for a 49,152-token vocabulary), except inside a string, where an
// indexed vocabulary (ConstraintVocab::Index) answers most tokens with one flag. A
// GrammarConstraint walks the vocabulary's byte trie instead, feeding each shared prefix once and
// skipping a subtree at its first refused byte; inside a free string it, too, passes plain bytes
// without feeding them; and it keeps the masks of the last 16 states it walked from, since states
// recur (inside a free string every character leaves the same one).
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

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -infinity. At least one token stays
  // allowed: when the constraint allows none, the end-of-generation tokens are.
  virtual void Mask(std::span<float> logits) const = 0;
  // The token chosen (allowed by Mask, or an end-of-generation token).
  virtual void Accept(int32_t token) = 0;
};

class JsonObjectConstraint : public TokenConstraint {
 public:
  explicit JsonObjectConstraint(std::shared_ptr<const ConstraintVocab> vocab);
  void Mask(std::span<float> logits) const override;
  void Accept(int32_t token) override;
  bool complete() const { return state_.complete(); }

 private:
  std::shared_ptr<const ConstraintVocab> vocab_;
  JsonRecognizer state_;
};

class GrammarConstraint : public TokenConstraint {
 public:
  // REQUIRES: vocab->Index() was called.
  GrammarConstraint(std::shared_ptr<const ConstraintVocab> vocab,
                    std::shared_ptr<const Grammar> grammar);
  void Mask(std::span<float> logits) const override;
  void Accept(int32_t token) override;
  bool complete() const { return state_.complete(); }
  const GrammarRecognizer& state() const { return state_; }

 private:
  // What the walk found for one state: a bit per token id.
  struct CachedMask {
    std::vector<int32_t> state;  // GrammarRecognizer::raw()
    std::vector<uint64_t> allowed;
  };
  static constexpr size_t kMaskCacheEntries = 16;  // ~6 KB each for a 49,152-token vocabulary

  const std::vector<uint64_t>& AllowedTokens() const;

  std::shared_ptr<const ConstraintVocab> vocab_;
  GrammarRecognizer state_;
  // The walk's recognizer per trie depth, kept to reuse their storage.
  mutable std::vector<GrammarRecognizer> scratch_;
  // States recur (every character of a free string leaves the same one): their masks are kept,
  // the oldest replaced first.
  mutable std::vector<CachedMask> cache_;
  mutable size_t cache_next_ = 0;
};

}  // namespace kinfer
