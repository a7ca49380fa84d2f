// ChoiceStreams: the engine streams of one OpenAI request's n choices, read as one.
//
// Contract:
//  * Next() returns the next event of any choice not yet finished, with the choice's index, or
//    false once `timeout` passes without one (or every choice has finished). It does not spin:
//    with several streams it waits on a StreamNotifier that every Push announces.
//  * Fair: after serving choice i, the next scan starts at i + 1, so a choice that streams fast
//    cannot starve the others.
//  * Events of one choice come in its own order; a choice's final event (finish != kNone) is its
//    last.
//  * With one stream it is that stream's Next(), unchanged.
//
// Thread safety: one consumer thread; the engine pushes from its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/engine/engine.h"

namespace kinfer {

class ChoiceStreams {
 public:
  // REQUIRES: streams non-empty, none of them read yet.
  explicit ChoiceStreams(std::vector<std::shared_ptr<RequestStream>> streams);

  bool Next(int* index, StreamEvent* out, std::chrono::milliseconds timeout);
  // Every choice's final event has been returned.
  bool done() const { return open_ == 0; }
  void CancelAll();

  size_t size() const { return streams_.size(); }
  const std::vector<std::shared_ptr<RequestStream>>& streams() const { return streams_; }

 private:
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<bool> finished_;
  std::shared_ptr<StreamNotifier> notifier_;  // null with one stream
  size_t next_ = 0;                           // where the next scan starts
  size_t open_ = 0;                           // choices not finished
};

}  // namespace kinfer
