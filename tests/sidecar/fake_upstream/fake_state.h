// FakeState: what all connections of kinfer-fake-upstream share: the global knobs, the counters
// behind GET /control/stats and /metrics, and the FIFO capacity gate.
//
// Threading: one FakeState per process, shared by every session on every io_context thread. All
// state below is protected by mu_; every method takes it briefly and none calls out while holding
// it (a grant is handed to its waiter after the lock is released).
//
// Counting contract (asserted by test writers): every request to a path other than /control* is
// counted by OnRequestStart and ends in exactly one OnRequestEnd, so at any time
//   requests == completed + cancelled + aborted + in_flight.
//   completed: its response was fully written (any status);
//   cancelled: the client closed (or a write failed) before that;
//   aborted:   the fake closed the connection on purpose (reset, disconnect_after_chunks).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tests/sidecar/fake_upstream/fake_settings.h"

namespace kinfer::fake {

enum class Outcome { kCompleted, kCancelled, kAborted };

// One request waiting for a capacity slot. `grant` is called (from whichever thread released the
// slot, with no lock held) once the slot is the waiter's; it must only post work to the waiter's
// own executor.
struct CapacityWaiter {
  std::function<void()> grant;
  enum class State { kQueued, kGranted, kAbandoned } state = State::kQueued;  // guarded by mu_
};

class FakeState {
 public:
  // `defaults` are what POST /control/reset restores. REQUIRES: models is not empty.
  FakeState(GlobalKnobs defaults, std::vector<std::string> models);

  // ---- knobs ----
  GlobalKnobs Knobs() const;
  // Merges a POST /control body (see MergeControlJson); a raised capacity admits waiters.
  [[nodiscard]] Status MergeControl(const nlohmann::json& body);
  // Restores the defaults and zeroes the cumulative counters. Gauges (in_flight, waiting,
  // in_service) keep their live values; max_in_flight restarts from in_flight.
  void Reset();
  // True when fail_first was > 0 (it is decremented): this request must get a 503.
  bool TakeFailFirst();

  // Immutable after construction; no lock needed.
  const std::vector<std::string>& models() const { return models_; }
  bool HasModel(std::string_view name) const;

  // ---- counters ----
  // Returns the request id ("fake-<id>").
  uint64_t OnRequestStart(std::string_view path);
  // `status` is the HTTP status written (only counted for kCompleted).
  void OnRequestEnd(Outcome outcome, int status);
  // The last request to a model endpoint: {method, path, headers, body}.
  void SetLastRequest(nlohmann::json request);
  nlohmann::json StatsJson() const;
  std::string MetricsText() const;

  // ---- capacity gate (FIFO) ----
  // True when a slot was free: the caller holds it now and grant is never called. Otherwise the
  // waiter is queued and grant() runs when a slot is handed to it.
  bool Acquire(const std::shared_ptr<CapacityWaiter>& waiter);
  // Gives a held slot back; hands it to the oldest queued waiter, if any.
  void Release();
  // The waiter's request went away. If still queued it leaves the queue; if already granted (the
  // grant is in flight) the slot is released.
  void Abandon(const std::shared_ptr<CapacityWaiter>& waiter);

 private:
  // Pops queued waiters into free slots. Returns their grants, to be called after unlocking.
  std::vector<std::function<void()>> AdmitLocked();
  static std::string PathKey(std::string_view path);

  const GlobalKnobs defaults_;
  const std::vector<std::string> models_;

  mutable std::mutex mu_;
  // State below is protected by mu_.
  GlobalKnobs knobs_;
  uint64_t next_id_ = 0;
  uint64_t requests_ = 0;
  std::map<std::string, uint64_t> by_path_;  // keys from PathKey: a fixed set, bounded
  std::map<int, uint64_t> by_status_;        // 100..599, bounded
  uint64_t in_flight_ = 0;
  uint64_t max_in_flight_ = 0;
  uint64_t completed_ = 0;
  uint64_t cancelled_ = 0;
  uint64_t aborted_ = 0;
  uint64_t in_service_ = 0;
  std::deque<std::shared_ptr<CapacityWaiter>> waiters_;  // abandoned ones are skipped lazily
  uint64_t waiting_ = 0;                                 // queued, not abandoned
  nlohmann::json last_request_;                          // null until the first model request
};

}  // namespace kinfer::fake
