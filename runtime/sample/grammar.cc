#include "runtime/sample/grammar.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <unordered_map>

namespace kinfer {
namespace {

// Expanding without consuming a byte deeper than this is a left-recursive (or absurdly nested)
// path: it is cut.
constexpr int kMaxExpandDepth = 256;

// One expansion round: the start, or one FeedInto. Nullable rules nested in one another (the
// regex `((a?)?){30}`) reach the same stack along exponentially many paths; Emit keeps it once,
// but the paths are all walked. Past kMemoAfter calls in a round, each stack is named by a node of
// a trie of stacks (hash-consed: (parent node, element) -> node) and a stack already expanded at
// that depth or less is not expanded again, which is exact: its expansion is the same every time
// (and one met again inside its own expansion is an empty cycle, which the depth limit cut anyway).
// kMaxExpandCalls is the last bound, for a grammar whose distinct stacks are themselves too many
// (left recursion under several alternatives): past it nothing more is expanded that round, which,
// as kMaxStacks, can only refuse text the grammar allows.
constexpr size_t kMemoAfter = 64;
constexpr size_t kMaxExpandCalls = size_t{1} << 18;
constexpr int16_t kUnexpanded = std::numeric_limits<int16_t>::max();

struct ExpandRound {
  size_t calls = 0;
  bool memo = false;
  // ids[i]: the node of stack[0..i]; kept for a prefix of the stack (a pop cuts it).
  std::vector<uint32_t> ids;
  std::unordered_map<uint64_t, uint32_t> child;
  std::vector<int16_t> least_depth;  // per node: the least depth it was expanded at

  void Begin() {
    calls = 0;
    ids.clear();
    if (memo) {
      child.clear();
      memo = false;
    }
    least_depth.assign(1, kUnexpanded);  // node 0: the empty stack
  }
  void Popped(size_t size) {
    if (ids.size() > size) ids.resize(size);
  }
  // True when `stack` was expanded before at `depth` or less (and notes it expanded at `depth`).
  bool Seen(const std::vector<int32_t>& stack, int depth) {
    memo = true;
    for (size_t i = ids.size(); i < stack.size(); ++i) {
      const uint32_t parent = i == 0 ? 0 : ids[i - 1];
      const uint64_t key = (uint64_t{parent} << 32) | static_cast<uint32_t>(stack[i]);
      const auto [it, added] = child.try_emplace(key, static_cast<uint32_t>(least_depth.size()));
      if (added) least_depth.push_back(kUnexpanded);
      ids.push_back(it->second);
    }
    int16_t& least = least_depth[stack.empty() ? 0 : ids.back()];
    if (least <= depth) return true;
    least = static_cast<int16_t>(depth);
    return false;
  }
};

ExpandRound& Round() {
  thread_local ExpandRound round;
  return round;
}

Grammar::ByteSet PlainSet() {
  Grammar::ByteSet s{};
  for (int c = 0x20; c < 0x80; ++c) {
    if (c == '"' || c == '\\') continue;
    s[static_cast<size_t>(c) >> 6] |= uint64_t{1} << (c & 63);
  }
  return s;
}

}  // namespace

// ---- builder ------------------------------------------------------------------------------------

int32_t GrammarBuilder::NewRule() {
  g_.rule_alts_.emplace_back();
  return static_cast<int32_t>(g_.rule_alts_.size() - 1);
}

void GrammarBuilder::AddAlternative(int32_t rule, const Sequence& seq) {
  g_.rule_alts_[static_cast<size_t>(rule)].push_back(static_cast<int32_t>(g_.elements_.size()));
  for (const Symbol& s : seq) {
    g_.elements_.push_back({s.rule ? Grammar::Element::kRule : Grammar::Element::kChars, s.id});
  }
  g_.elements_.push_back({Grammar::Element::kEnd, 0});
}

int32_t GrammarBuilder::Rule(const std::vector<Sequence>& alternatives) {
  const int32_t r = NewRule();
  for (const Sequence& s : alternatives) AddAlternative(r, s);
  return r;
}

GrammarBuilder::Symbol GrammarBuilder::Class(const Grammar::ByteSet& set) {
  for (size_t i = 0; i < g_.classes_.size(); ++i) {
    if (g_.classes_[i] == set) return {false, static_cast<int32_t>(i)};
  }
  g_.classes_.push_back(set);
  return {false, static_cast<int32_t>(g_.classes_.size() - 1)};
}

GrammarBuilder::Symbol GrammarBuilder::Byte(uint8_t c) { return Range({{c, c}}); }

GrammarBuilder::Symbol GrammarBuilder::Range(
    std::initializer_list<std::pair<uint8_t, uint8_t>> ranges) {
  Grammar::ByteSet s{};
  for (const auto& [lo, hi] : ranges) {
    for (int c = lo; c <= hi; ++c) s[static_cast<size_t>(c) >> 6] |= uint64_t{1} << (c & 63);
  }
  return Class(s);
}

GrammarBuilder::Symbol GrammarBuilder::PlainStringByte() {
  const Symbol s = Class(PlainSet());
  g_.plain_class_ = s.id;
  return s;
}

void GrammarBuilder::AppendLiteral(std::string_view text, Sequence* seq) {
  for (char c : text) seq->push_back(Byte(static_cast<uint8_t>(c)));
}

std::shared_ptr<const Grammar> GrammarBuilder::Build(int32_t root) {
  g_.root_ = root;
  return std::make_shared<const Grammar>(std::move(g_));
}

// ---- recognizer ---------------------------------------------------------------------------------

GrammarRecognizer::GrammarRecognizer(std::shared_ptr<const Grammar> grammar)
    : GrammarRecognizer(grammar, grammar->root()) {}

GrammarRecognizer::GrammarRecognizer(std::shared_ptr<const Grammar> grammar, int32_t rule)
    : g_(std::move(grammar)) {
  // The start: one stack per alternative of the rule, expanded.
  std::vector<int32_t> stack;
  Round().Begin();
  for (int32_t alt : g_->alternatives(rule)) {
    stack.assign(1, alt);
    Round().Popped(0);
    Expand(&stack, 0);
  }
}

void GrammarRecognizer::Emit(const std::vector<int32_t>& stack) {
  // The same stack reached two ways is kept once.
  const size_t n = stack.size();
  for (size_t i = 0; i < data_.size(); i += static_cast<size_t>(data_[i]) + 1) {
    if (static_cast<size_t>(data_[i]) == n &&
        std::equal(stack.begin(), stack.end(), data_.begin() + static_cast<ptrdiff_t>(i) + 1)) {
      return;
    }
  }
  ++stacks_;
  data_.push_back(static_cast<int32_t>(n));
  data_.insert(data_.end(), stack.begin(), stack.end());
}

void GrammarRecognizer::Expand(std::vector<int32_t>* stack, int depth) {
  if (depth > kMaxExpandDepth || stacks_ >= kMaxStacks) return;
  ExpandRound& round = Round();
  if (++round.calls > kMemoAfter) {
    if (round.calls > kMaxExpandCalls || round.Seen(*stack, depth)) return;
  }
  if (stack->empty()) {
    Emit(*stack);  // the root rule matched
    return;
  }
  if (stack->size() > kMaxStackDepth) return;
  const int32_t pos = stack->back();
  const Grammar::Element& e = g_->element(pos);
  switch (e.type) {
    case Grammar::Element::kChars:
      Emit(*stack);
      return;
    case Grammar::Element::kEnd:
      stack->pop_back();
      round.Popped(stack->size());
      Expand(stack, depth + 1);
      stack->push_back(pos);
      return;
    case Grammar::Element::kRule: {
      const bool tail = g_->element(pos + 1).type == Grammar::Element::kEnd;
      stack->pop_back();
      round.Popped(stack->size());
      if (!tail) stack->push_back(pos + 1);
      for (int32_t alt : g_->alternatives(e.arg)) {
        stack->push_back(alt);
        Expand(stack, depth + 1);
        stack->pop_back();
        round.Popped(stack->size());
      }
      if (!tail) {
        stack->pop_back();
        round.Popped(stack->size());
      }
      stack->push_back(pos);
      return;
    }
  }
}

bool GrammarRecognizer::FeedInto(uint8_t c, GrammarRecognizer* out) const {
  out->g_ = g_;
  out->data_.clear();
  out->stacks_ = 0;
  Round().Begin();
  thread_local std::vector<int32_t> stack;
  for (size_t i = 0; i < data_.size(); i += static_cast<size_t>(data_[i]) + 1) {
    const auto n = static_cast<size_t>(data_[i]);
    if (n == 0) continue;  // a complete parse takes no more bytes
    const int32_t top = data_[i + n];
    if (!g_->Has(g_->element(top).arg, c)) continue;
    stack.assign(data_.begin() + static_cast<ptrdiff_t>(i) + 1,
                 data_.begin() + static_cast<ptrdiff_t>(i + n));
    stack.push_back(top + 1);
    Round().Popped(0);
    out->Expand(&stack, 0);
  }
  return !out->data_.empty();
}

bool GrammarRecognizer::Feed(uint8_t c) {
  GrammarRecognizer next;
  if (!FeedInto(c, &next)) return false;
  data_.swap(next.data_);
  return true;
}

bool GrammarRecognizer::Feed(std::string_view bytes) {
  GrammarRecognizer next(*this);
  GrammarRecognizer tmp;
  for (char ch : bytes) {
    if (!next.FeedInto(static_cast<uint8_t>(ch), &tmp)) return false;
    std::swap(next.data_, tmp.data_);
  }
  data_.swap(next.data_);
  return true;
}

bool GrammarRecognizer::Accepts(std::string_view bytes) const {
  GrammarRecognizer copy(*this);
  return copy.Feed(bytes);
}

bool GrammarRecognizer::complete() const {
  for (size_t i = 0; i < data_.size(); i += static_cast<size_t>(data_[i]) + 1) {
    if (data_[i] == 0) return true;
  }
  return false;
}

size_t GrammarRecognizer::num_stacks() const {
  size_t k = 0;
  for (size_t i = 0; i < data_.size(); i += static_cast<size_t>(data_[i]) + 1) ++k;
  return k;
}

Grammar::ByteSet GrammarRecognizer::NextBytes() const {
  Grammar::ByteSet s{};
  for (size_t i = 0; i < data_.size(); i += static_cast<size_t>(data_[i]) + 1) {
    const auto n = static_cast<size_t>(data_[i]);
    if (n == 0) continue;
    const int32_t cls = g_->element(data_[i + n]).arg;
    for (int c = 0; c < 256; ++c) {
      if (g_->Has(cls, static_cast<uint8_t>(c))) {
        s[static_cast<size_t>(c) >> 6] |= uint64_t{1} << (c & 63);
      }
    }
  }
  return s;
}

bool GrammarRecognizer::SameStacksAs(const GrammarRecognizer& other) const {
  if (data_.size() != other.data_.size()) return false;
  // Both hold each stack once; the same set of stacks, in any order.
  for (size_t i = 0; i < data_.size(); i += static_cast<size_t>(data_[i]) + 1) {
    const auto n = static_cast<size_t>(data_[i]);
    bool found = false;
    for (size_t j = 0; j < other.data_.size() && !found;
         j += static_cast<size_t>(other.data_[j]) + 1) {
      found = static_cast<size_t>(other.data_[j]) == n &&
              std::equal(data_.begin() + static_cast<ptrdiff_t>(i) + 1,
                         data_.begin() + static_cast<ptrdiff_t>(i + n) + 1,
                         other.data_.begin() + static_cast<ptrdiff_t>(j) + 1);
    }
    if (!found) return false;
  }
  return true;
}

bool GrammarRecognizer::InPlainString() const {
  const int32_t plain = g_->plain_string_class();
  if (plain < 0 || data_.empty()) return false;
  static const Grammar::ByteSet kPlain = PlainSet();
  bool any_plain = false;
  for (size_t i = 0; i < data_.size(); i += static_cast<size_t>(data_[i]) + 1) {
    const auto n = static_cast<size_t>(data_[i]);
    if (n == 0) return false;  // complete: a plain byte would end this parse
    const int32_t cls = g_->element(data_[i + n]).arg;
    if (cls == plain) {
      any_plain = true;
      continue;
    }
    // Any other stack must take no plain byte, or it would decide some plain bytes differently.
    for (int c = 0x20; c < 0x80; ++c) {
      if (((kPlain[static_cast<size_t>(c) >> 6] >> (c & 63)) & 1u) != 0 &&
          g_->Has(cls, static_cast<uint8_t>(c))) {
        return false;
      }
    }
  }
  if (!any_plain) return false;
  // Every plain byte moves the plain stacks the same way (they share one class), and the others
  // drop out; so one plain byte tells for all of them.
  GrammarRecognizer after;
  return FeedInto('a', &after) && after.SameStacksAs(*this);
}

}  // namespace kinfer
