#include "runtime/server/choice_streams.h"

namespace kinfer {

ChoiceStreams::ChoiceStreams(std::vector<std::shared_ptr<RequestStream>> streams)
    : streams_(std::move(streams)), finished_(streams_.size(), false), open_(streams_.size()) {
  if (streams_.size() > 1) {
    notifier_ = std::make_shared<StreamNotifier>();
    for (const auto& s : streams_) s->SetNotifier(notifier_);
  }
}

bool ChoiceStreams::Next(int* index, StreamEvent* out, std::chrono::milliseconds timeout) {
  if (open_ == 0) return false;
  auto take = [&](size_t i) {
    *index = static_cast<int>(i);
    if (out->finish != FinishReason::kNone) {
      finished_[i] = true;
      --open_;
    }
    next_ = (i + 1) % streams_.size();
    return true;
  };
  if (!notifier_) return streams_[0]->Next(out, timeout) && take(0);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // Read before polling: a push after the poll of its stream bumps it past `seen`.
    const uint64_t seen = notifier_->seq();
    for (size_t k = 0; k < streams_.size(); ++k) {
      const size_t i = (next_ + k) % streams_.size();
      if (!finished_[i] && streams_[i]->Next(out, std::chrono::milliseconds(0))) return take(i);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    notifier_->Wait(seen, left);
  }
}

void ChoiceStreams::CancelAll() {
  for (const auto& s : streams_) s->Cancel();
}

}  // namespace kinfer
