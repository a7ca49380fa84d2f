#include "runtime/sample/token_constraint.h"

#include <limits>

namespace kinfer {

void ConstraintVocab::Index() {
  json_plain.assign(bytes.size(), 0);
  for (size_t id = 0; id < bytes.size(); ++id) {
    json_plain[id] = kind[id] == kText && JsonRecognizer::PlainStringBytes(bytes[id]) ? 1 : 0;
  }
}

JsonObjectConstraint::JsonObjectConstraint(std::shared_ptr<const ConstraintVocab> vocab)
    : vocab_(std::move(vocab)) {}

void JsonObjectConstraint::Mask(std::span<float> logits) const {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  const ConstraintVocab& v = *vocab_;
  const size_t n = std::min(logits.size(), v.kind.size());
  const bool done = state_.complete();
  // Inside a string, a plain token is allowed without feeding it.
  const bool plain_ok = state_.in_plain_string() && v.json_plain.size() == v.kind.size();
  bool any = false;
  for (size_t id = 0; id < n; ++id) {
    bool ok;
    switch (v.kind[id]) {
      case ConstraintVocab::kEndOfGeneration:
        ok = done;
        break;
      case ConstraintVocab::kText:
        ok = !done && ((plain_ok && v.json_plain[id] != 0) || state_.Accepts(v.bytes[id]));
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
  if (state_.in_plain_string() && vocab_->json_plain.size() == vocab_->kind.size() &&
      vocab_->json_plain[static_cast<size_t>(token)] != 0) {
    return;  // stays inside the string: nothing changes
  }
  JsonRecognizer next = state_;
  if (next.Feed(vocab_->bytes[static_cast<size_t>(token)])) state_ = next;
}

}  // namespace kinfer
