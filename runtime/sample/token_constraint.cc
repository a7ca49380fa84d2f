#include "runtime/sample/token_constraint.h"

#include <limits>

namespace kinfer {

JsonObjectConstraint::JsonObjectConstraint(std::shared_ptr<const ConstraintVocab> vocab)
    : vocab_(std::move(vocab)) {}

void JsonObjectConstraint::Mask(std::span<float> logits) const {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const ConstraintVocab& v = *vocab_;
  const size_t n = std::min(logits.size(), v.kind.size());
  const bool done = state_.complete();
  bool any = false;
  for (size_t id = 0; id < n; ++id) {
    bool ok;
    switch (v.kind[id]) {
      case ConstraintVocab::kEndOfGeneration:
        ok = done;
        break;
      case ConstraintVocab::kText:
        ok = !done && state_.Accepts(v.bytes[id]);
        break;
      default:
        ok = false;
    }
    if (ok) {
      any |= logits[id] != kOff;
    } else {
      logits[id] = kOff;
    }
  }
  for (size_t id = n; id < logits.size(); ++id) logits[id] = kOff;  // padding past the vocabulary
  if (any) return;
  // Nothing can follow (the whitespace bound, say, with every other byte ruled out): end here
  // rather than draw from nothing.
  for (size_t id = 0; id < n; ++id) {
    if (v.kind[id] == ConstraintVocab::kEndOfGeneration) logits[id] = 0.0f;
  }
}

void JsonObjectConstraint::Accept(int32_t token) {
  if (token < 0 || static_cast<size_t>(token) >= vocab_->kind.size()) return;
  if (vocab_->kind[static_cast<size_t>(token)] != ConstraintVocab::kText) return;
  JsonRecognizer next = state_;
  if (next.Feed(vocab_->bytes[static_cast<size_t>(token)])) state_ = next;
}

}  // namespace kinfer
