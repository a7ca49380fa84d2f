// AdmissionQueue: a bounded priority queue in front of a concurrency limit to the upstream.
//
// Contract:
//  * Priority classes 0..num_priorities-1; 0 is the MOST important. FCFS within a class; when a
//    slot frees, the oldest request of the most important non-empty class starts first.
//  * At most max_concurrency requests are in flight. `reserved_for_top` slots are held for class
//    0: the reserved slots class 0 is not using stay free for it, so other classes start only
//    while in_flight < max_concurrency - max(0, reserved_for_top - class-0 requests in flight).
//    (Class 0 filling its reserved slots does not shrink what the other classes may use.)
//  * The queue is bounded in total and per class; a full queue rejects (kQueueFull / kClassFull).
//    When the total bound is reached, an arrival of a more important class than the least
//    important queued request displaces the newest request of the least important non-empty
//    class instead (reported in AdmitResult::displaced, counted as rejected kDisplaced; the proxy
//    answers it 503), so a burst of low-priority work cannot lock the top class out of the queue.
//  * Each request carries a deadline: the latest time it may START upstream (the proxy derives it
//    from the client's timeout). A queued request whose deadline passes is dropped by Expire() or
//    skipped at dispatch and reported, so the proxy answers 503 instead of serving late.
//  * Early rejection: an EWMA of service time gives the expected wait of a new arrival as
//    (requests queued ahead of it + 1) * mean_service / usable_slots. Admit rejects with
//    kDeadlineUnreachable when now + expected wait is after the deadline.
//  * Standing queue (CoDel spirit): the sojourn (queue wait) of each request that leaves the
//    queue to start is sampled. When sojourns have stayed above `codel_target` for a whole
//    `codel_interval` (the minimum over the interval is above target), the queue is "standing":
//    it is not absorbing a burst, it is just adding latency. While standing, arrivals of classes
//    other than 0 that would have to queue are rejected at once (kStandingQueue); class 0 is still
//    queued. A sojourn below target, or the queue draining empty, ends the standing state.
//  * Rejections carry a retry_after (estimated drain time, at least min_retry_after). All of
//    them mean "overloaded": the proxy answers 503 + Retry-After (429 is the rate limiter's).
//  * Reload (SIGHUP): Reconfigure() adopts a new config in place, without dropping anything.
//    num_priorities cannot change (FAILED_PRECONDITION; the caller keeps the old queue or builds
//    a new one). Everything else takes effect at once: concurrency, reservation, queue bounds,
//    CoDel target/interval, alpha, min_retry_after. The EWMA estimate, the queued requests (in
//    their order), the in-flight requests and the CoDel state are kept. New limits apply to what
//    happens next, never retroactively: a queue already longer than a new bound keeps all its
//    requests (the bound rejects new arrivals until it drains below); in-flight requests above a
//    lowered max_concurrency run to completion, and nothing starts until in_flight drops below
//    the new limit. When the new limits free slots, queued requests start at once, in the usual
//    order, and are returned by Reconfigure like OnComplete returns them.
//  * Counters (stats()) satisfy, at every moment:
//      submitted == admitted + rejected_total() + expired + cancelled + queued()
//    where admitted counts requests started upstream (at once or from the queue).
//
// Thread safety: not thread-safe; no threads or clocks inside. The owner (the proxy worker that
// runs the admission loop) serialises all calls and passes `now` in.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"

namespace kinfer {

struct AdmissionConfig {
  using Duration = std::chrono::nanoseconds;

  int num_priorities = 3;        // classes 0 (highest) .. num_priorities-1
  int max_concurrency = 8;       // in flight to the upstream
  int reserved_for_top = 1;      // of max_concurrency, usable by class 0 only
  size_t max_queue_total = 256;  // queued, all classes
  size_t max_queue_per_class = 128;
  Duration initial_service_time = std::chrono::seconds(1);  // EWMA seed
  double ewma_alpha = 0.2;                                  // weight of a new service-time sample
  Duration codel_target = std::chrono::milliseconds(5);
  Duration codel_interval = std::chrono::milliseconds(100);
  Duration min_retry_after = std::chrono::seconds(1);

  // InvalidArgument unless num_priorities >= 1, max_concurrency >= 1,
  // 0 <= reserved_for_top < max_concurrency, queue bounds >= 1 (per class <= total),
  // 0 < ewma_alpha <= 1, and durations > 0 (codel and service seed) or >= 0 (min_retry_after).
  Status Validate() const;
};

class AdmissionQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Duration = std::chrono::nanoseconds;
  using RequestId = uint64_t;

  enum class Outcome { kStartNow, kQueued, kRejected };
  enum class Reason {
    kNone = 0,
    kQueueFull,            // the total queue bound is reached
    kClassFull,            // this class's queue bound is reached
    kDeadlineUnreachable,  // expected start is after the deadline (or the deadline has passed)
    kStandingQueue,        // standing queue: non-top classes are shed at arrival
    kDuplicateId,          // the id is already queued or in flight (a caller bug)
    kDisplaced,            // a queued request pushed out by a more important arrival
    kCount
  };
  static constexpr size_t kNumReasons = static_cast<size_t>(Reason::kCount);

  struct AdmitResult {
    Outcome outcome = Outcome::kRejected;
    Reason reason = Reason::kNone;            // set when rejected
    Duration retry_after = Duration::zero();  // set when rejected
    // Set when this arrival (kQueued) pushed a less important queued request out of a full
    // queue: that request is no longer queued and must be answered 503.
    std::optional<RequestId> displaced;
  };

  // What to do after a completion or a reconfiguration: requests to start now, in order, and
  // queued requests whose deadline had passed (the proxy answers them 503).
  struct Dispatch {
    std::vector<RequestId> start;
    std::vector<RequestId> expired;
  };

  struct Stats {
    uint64_t submitted = 0;
    uint64_t admitted = 0;                         // started upstream, at once or from the queue
    std::array<uint64_t, kNumReasons> rejected{};  // indexed by Reason
    uint64_t expired = 0;
    uint64_t cancelled = 0;
    uint64_t rejected_total() const;
  };

  // REQUIRES: config.Validate().ok(); see Create().
  explicit AdmissionQueue(AdmissionConfig config);
  static StatusOr<AdmissionQueue> Create(AdmissionConfig config);

  // Decides a new request. kStartNow: the caller starts it upstream now (it counts in flight until
  // OnComplete). kQueued: it will come back from OnComplete().start, OnComplete().expired,
  // Expire(), or go away by Cancel(). kRejected: nothing is kept. A priority outside
  // [0, num_priorities) is clamped to the nearest valid class.
  AdmitResult Admit(RequestId id, int priority, Clock::time_point deadline, Clock::time_point now);

  // An in-flight request finished after `service_time` (fed to the EWMA when > 0; pass zero for
  // a request that failed or was cancelled upstream, whose time says nothing about service).
  // Frees its slot and starts queued requests while slots allow. Unknown ids free nothing.
  Dispatch OnComplete(RequestId id, Duration service_time, Clock::time_point now);

  // Config reload (see the contract above): adopts `config` and returns the queued requests that
  // may start under it (and the expired ones met on the way), as OnComplete does.
  // Errors, which leave the queue exactly as it was: INVALID_ARGUMENT when !config.Validate().ok();
  // FAILED_PRECONDITION when config.num_priorities differs from the current one.
  [[nodiscard]] StatusOr<Dispatch> Reconfigure(const AdmissionConfig& config,
                                               Clock::time_point now);

  // Removes a queued request (the client went away). Returns false when it is not queued; an
  // in-flight request is ended by OnComplete instead.
  bool Cancel(RequestId id);

  // Drops queued requests whose deadline is before `now` and returns them (class 0 first, FCFS
  // within a class).
  std::vector<RequestId> Expire(Clock::time_point now);

  // Metrics. REQUIRES for depth(): 0 <= priority < num_priorities.
  size_t depth(int priority) const { return queues_[priority].size(); }
  size_t queued() const { return queued_index_.size(); }
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  int in_flight_top() const { return top_in_flight_; }
  bool standing() const { return standing_; }
  Duration mean_service_time() const;
  // How long a request of this class arriving now would wait for a slot: zero when it would
  // start at once, else (queued ahead + 1) x mean service time / the slots open to its class.
  // Admit's deadline check and the sidecar's degrade rule both use this one estimate.
  Duration EstimatedWait(int priority) const;
  const Stats& stats() const { return stats_; }
  const AdmissionConfig& config() const { return config_; }

 private:
  struct Queued {
    RequestId id;
    Clock::time_point deadline;
    Clock::time_point enqueued;
  };
  using ClassQueue = std::list<Queued>;
  struct Location {
    int priority;
    ClassQueue::iterator it;
  };

  int SlotsFor(int priority) const;
  void StartInFlight(RequestId id, int priority);  // counts a start (admitted, in flight)
  size_t QueuedAheadOf(int priority) const;  // queued in classes <= priority
  double WaitNs(size_t ahead, int slots) const;  // the expected wait behind `ahead`, in ns
  Duration RetryAfter() const;
  AdmitResult Reject(Reason reason, Duration retry_after);
  void SampleSojourn(Duration sojourn, Clock::time_point now);
  void ResetStandingIfEmpty();
  // Starts queued requests while slots allow, most important class first; drops (and reports)
  // the expired ones met at the head of a class.
  void StartQueued(Clock::time_point now, Dispatch* out);

  AdmissionConfig config_;
  std::vector<ClassQueue> queues_;
  std::unordered_map<RequestId, Location> queued_index_;
  std::unordered_map<RequestId, int> in_flight_;  // id -> its class
  int top_in_flight_ = 0;                          // class-0 requests in flight
  double mean_service_ns_;
  // CoDel state: when sojourns first went above target in the current episode (none when below).
  bool above_target_ = false;
  Clock::time_point first_above_;
  bool standing_ = false;
  Stats stats_;
};

}  // namespace kinfer
