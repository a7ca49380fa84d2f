// A context-free grammar over bytes, and a recognizer that feeds it one byte at a time: the core
// of schema-constrained decoding (response_format json_schema; json_schema_grammar.h builds the
// grammar from a schema).
//
//   Grammar             rules of alternatives of sequences of symbols; a symbol is a byte class
//                       (a set of bytes) or a reference to a rule. Built with GrammarBuilder.
//   GrammarRecognizer   the set of parse stacks reachable after the bytes fed so far (llama.cpp's
//                       grammar sampler keeps the same). Feed(byte) keeps the stacks whose next
//                       symbol takes the byte; complete() is true when some stack has matched the
//                       whole root rule.
//
// Contract for grammars: no rule may derive itself without consuming a byte first (left
// recursion); such a path is cut (treated as matching nothing) rather than looping. A reference
// that ends an alternative does not grow the stack (tail calls), so right recursion (`list ::= x
// list | ""`) runs in constant stack. A stack deeper than kMaxStackDepth is dropped: recursive
// grammars (nested JSON values) are bounded by it, and the number of stacks by kMaxStacks.
//
// Thread safety: a Grammar is immutable once built and may be shared; a recognizer is a value type
// used by one thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace kinfer {

class Grammar {
 public:
  struct Element {
    enum Type : uint8_t { kEnd = 0, kChars = 1, kRule = 2 };
    Type type = kEnd;
    int32_t arg = 0;  // kChars: the class id; kRule: the rule id
  };
  using ByteSet = std::array<uint64_t, 4>;

  bool Has(int32_t cls, uint8_t c) const {
    return ((classes_[static_cast<size_t>(cls)][c >> 6] >> (c & 63)) & 1u) != 0;
  }
  const Element& element(int32_t pos) const { return elements_[static_cast<size_t>(pos)]; }
  // The first element of each alternative of `rule`.
  std::span<const int32_t> alternatives(int32_t rule) const {
    return rule_alts_[static_cast<size_t>(rule)];
  }
  int32_t root() const { return root_; }
  size_t num_elements() const { return elements_.size(); }
  size_t num_rules() const { return rule_alts_.size(); }
  // The class that GrammarBuilder::PlainStringByte() returned (-1 if never asked for): the ASCII
  // bytes 0x20..0x7F but '"' and '\\'. A recognizer uses it to skip feeding such bytes inside a
  // string.
  int32_t plain_string_class() const { return plain_class_; }

 private:
  friend class GrammarBuilder;
  std::vector<Element> elements_;  // each alternative's symbols, then a kEnd
  std::vector<std::vector<int32_t>> rule_alts_;
  std::vector<ByteSet> classes_;
  int32_t root_ = 0;
  int32_t plain_class_ = -1;
};

class GrammarBuilder {
 public:
  struct Symbol {
    bool rule = false;
    int32_t id = 0;  // a class id or a rule id
  };
  using Sequence = std::vector<Symbol>;

  // A new rule with no alternatives yet (so that rules can refer to each other, or to
  // themselves, before they are filled).
  int32_t NewRule();
  void AddAlternative(int32_t rule, const Sequence& seq);
  // A new rule with these alternatives.
  int32_t Rule(const std::vector<Sequence>& alternatives);

  static Symbol Ref(int32_t rule) { return {true, rule}; }
  Symbol Byte(uint8_t c);
  // The bytes lo..hi, each pair inclusive.
  Symbol Range(std::initializer_list<std::pair<uint8_t, uint8_t>> ranges);
  Symbol Class(const Grammar::ByteSet& set);
  Symbol PlainStringByte();
  // Appends the bytes of `text` to `seq`, one class each.
  void AppendLiteral(std::string_view text, Sequence* seq);
  Sequence Literal(std::string_view text) {
    Sequence s;
    AppendLiteral(text, &s);
    return s;
  }

  size_t num_elements() const { return g_.elements_.size(); }
  std::shared_ptr<const Grammar> Build(int32_t root);

 private:
  Grammar g_;
};

class GrammarRecognizer {
 public:
  static constexpr size_t kMaxStackDepth = 512;
  // At most this many parse stacks are kept: a grammar ambiguous enough to need more (nested
  // alternatives that agree for a long stretch) keeps the first ones reached. That can only
  // refuse text the grammar allows, never allow text it refuses. The work per byte is bounded
  // too, which a hostile schema could otherwise make grow exponentially with its nesting: a stack
  // reached again along another path (nested nullable rules) is not expanded twice, and a byte's
  // expansion stops after a fixed number of steps (grammar.cc), again refusing, never allowing.
  static constexpr size_t kMaxStacks = 256;

  // Before any byte: the root rule's start.
  explicit GrammarRecognizer(std::shared_ptr<const Grammar> grammar);
  // Before any byte of `rule` (a rule of the grammar other than its root).
  GrammarRecognizer(std::shared_ptr<const Grammar> grammar, int32_t rule);
  // No stacks at all (dead()): storage for FeedInto.
  GrammarRecognizer() = default;

  // Feeds one byte. False when it cannot come next; the state is then unchanged.
  bool Feed(uint8_t c);
  bool Feed(std::string_view bytes);
  // The stacks after `c`, into *out (its storage is reused). False (and *out empty) when `c`
  // cannot come next.
  bool FeedInto(uint8_t c, GrammarRecognizer* out) const;
  bool Accepts(std::string_view bytes) const;

  // The bytes so far are a whole sentence of the grammar (more may still follow).
  bool complete() const;
  // No byte can come next and the text is not complete: nothing was fed that leads anywhere.
  bool dead() const { return data_.empty(); }
  // Every byte of the plain-string class leaves the state as it is (and no stack that does not
  // read that class takes any of its bytes): so a caller may skip feeding such bytes.
  bool InPlainString() const;
  // The next bytes that can come (for tests and diagnostics).
  Grammar::ByteSet NextBytes() const;

  bool SameStacksAs(const GrammarRecognizer& other) const;
  // The stacks as stored (equal spans: the same state; the same state may also be stored in
  // another order). For caching what a state allows.
  std::span<const int32_t> raw() const { return data_; }
  size_t num_stacks() const;

 private:
  // Pushes `stack` after resolving rule references and ended alternatives, until each resulting
  // stack's top is a byte class (or it is empty: the root matched).
  void Expand(std::vector<int32_t>* stack, int depth);
  void Emit(const std::vector<int32_t>& stack);

  std::shared_ptr<const Grammar> g_;
  // The stacks, each as its length then its element positions, bottom first: [n, e1 .. en] ...
  std::vector<int32_t> data_;
  size_t stacks_ = 0;  // stacks emitted into data_ (or dropped past kMaxStacks)
};

}  // namespace kinfer
