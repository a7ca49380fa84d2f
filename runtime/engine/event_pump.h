// EventPump: pushes stream events on a thread of its own, beside the engine thread.
//
// Pushing an event wakes the stream's reader (an HTTP handler blocked in RequestStream::Next): a
// futex wake per reader, most of the engine thread's time per token at large batches
// (docs/benchmarks.md, "The engine's own time per step"). The engine thread posts each step's
// events in one batch and goes on planning and launching the next step while the pump wakes
// the readers.
//
// Order: events are pushed in the order they were posted, so each stream's events keep theirs.
// Thread safety: Post is called from one thread (the engine thread). The destructor pushes
// whatever is still posted, then joins the pump's thread.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/engine/request.h"

namespace kinfer {

class RequestStream;

class EventPump {
 public:
  struct Event {
    std::shared_ptr<RequestStream> stream;
    StreamEvent event;
  };

  EventPump();
  ~EventPump();
  EventPump(const EventPump&) = delete;
  EventPump& operator=(const EventPump&) = delete;

  // Takes every event of *batch, in order; *batch is left empty (with the capacity of an earlier
  // batch, so that steady state allocates no vectors). While the pump is still pushing one
  // batch, one more may wait; posting a third blocks until the pump takes the second, so that
  // a pump slower than the steps holds the engine back instead of letting events pile up.
  void Post(std::vector<Event>* batch);

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable work_cv_;   // posted events, or stopping
  std::condition_variable taken_cv_;  // the pump took the posted batch
  std::vector<Event> posted_;         // guarded by mu_
  bool stopping_ = false;             // guarded by mu_
  std::thread thread_;
};

}  // namespace kinfer
