// A rate-limited work queue with dedup and per-item exponential backoff, as controller-runtime's
// workqueue: an item is queued at most once while it waits; an item re-added while a worker
// processes it is queued again when that worker calls Done (so it is processed again, never by two
// workers at once); AddRateLimited delays an item by base * 2^failures (5 ms .. 1000 s) and
// Forget resets its failure count. A server's Retry-After is a hold, not only a floor: until the
// server's time has passed, further Adds of the item (watch events) do not bring it forward (one
// that came meanwhile queues it when the hold ends); the rest of the backoff past the server's
// time is plain, and a plain backoff yields to events (a new event may fix what failed, as in
// controller-runtime).
//
// WorkQueueCore is pure: no threads, no clock; every call takes `now`. WorkQueue wraps it with a
// mutex, a condition variable and the steady clock for worker threads.
//
// Thread safety: WorkQueueCore is not thread-safe. WorkQueue is: any thread may Add, any number
// of worker threads may Get/Done; ShutDown wakes every waiting Get.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

namespace kinfer::kube {

using Clock = std::chrono::steady_clock;

struct BackoffPolicy {
  std::chrono::nanoseconds base = std::chrono::milliseconds(5);
  std::chrono::nanoseconds max = std::chrono::seconds(1000);
};

class WorkQueueCore {
 public:
  explicit WorkQueueCore(BackoffPolicy policy = {}) : policy_(policy) {}

  // Queues `key` unless it is already waiting; if a worker holds it, marks it dirty so Done
  // requeues it. Delayed copies of `key` stay as they are (the earlier one wins when due).
  void Add(const std::string& key);
  // Queues `key` once `delay` has passed (at `now + delay`); a zero or negative delay is Add.
  void AddAfter(const std::string& key, std::chrono::nanoseconds delay, Clock::time_point now);
  // AddAfter with this key's next backoff delay (base * 2^failures, capped at max, and at least
  // `at_least`: a server's Retry-After) and counts a failure. Returns the delay used. A positive
  // `at_least` holds the key until now + at_least (the server's time, not the whole delay):
  // meanwhile AddAfter of it does nothing and Add only marks it, so that it is queued once when
  // the hold ends (as is a re-add that came while a worker held it); with no Add, the rest of the
  // delay is a plain delayed copy, which a later Add brings forward.
  std::chrono::nanoseconds AddRateLimited(const std::string& key, Clock::time_point now,
                                          std::chrono::nanoseconds at_least = {});
  // Forgets the failure count of `key` (call after a successful process).
  void Forget(const std::string& key);
  // Number of failures counted for `key` since the last Forget.
  int NumRequeues(const std::string& key) const;

  // Moves delayed items due at `now` into the queue, then pops the next ready item and marks it
  // processing. nullopt when none is ready.
  std::optional<std::string> TryGet(Clock::time_point now);
  // Ends the processing of `key`; requeues it if it was added meanwhile.
  void Done(const std::string& key);
  // When the next delayed item becomes due (nullopt when none is delayed).
  std::optional<Clock::time_point> NextDue() const;

  // Ready items (not counting delayed or processing ones).
  size_t Len() const { return queue_.size(); }
  size_t Delayed() const { return delayed_.size(); }

 private:
  void PromoteDue(Clock::time_point now);
  void EraseDelayed(const std::string& key);  // drops the delayed copy of `key`, if any

  BackoffPolicy policy_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;       // waiting in queue_ or to be requeued by Done
  std::set<std::string> processing_;  // held by a worker
  std::multimap<Clock::time_point, std::string> delayed_;
  std::map<std::string, Clock::time_point> delayed_at_;  // earliest due time per key
  std::map<std::string, int> failures_;
  // Delayed under a server's Retry-After: not queued before that copy is due. The value is when
  // the whole backoff ends (a plain delayed copy is left until then, unless an Add came).
  std::map<std::string, Clock::time_point> held_;
  std::set<std::string> added_while_held_;  // Added during its hold: queued when the hold ends
};

// The blocking wrapper for worker threads.
class WorkQueue {
 public:
  explicit WorkQueue(BackoffPolicy policy = {}) : core_(policy) {}

  void Add(const std::string& key);
  void AddAfter(const std::string& key, std::chrono::nanoseconds delay);
  std::chrono::nanoseconds AddRateLimited(const std::string& key,
                                          std::chrono::nanoseconds at_least = {});
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;
  // Blocks until an item is ready (returns it, marked processing) or the queue is shut down
  // (returns nullopt).
  std::optional<std::string> Get();
  void Done(const std::string& key);
  // Wakes all Get calls; later Gets return nullopt at once. Adds after ShutDown are dropped.
  void ShutDown();
  size_t Len() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // State below is protected by mu_.
  WorkQueueCore core_;
  bool shut_down_ = false;
};

}  // namespace kinfer::kube
