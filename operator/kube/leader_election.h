// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection package does
// it, so that one kinfer-operator replica reconciles at a time.
//
// The rules (client-go's tryAcquireOrRenew):
//   - Each attempt reads the Lease. A holder's lease is valid while its record (holderIdentity,
//     leaseDurationSeconds, acquireTime, renewTime, leaseTransitions, resourceVersion) keeps
//     changing: it expires once leaseDurationSeconds have passed on OUR steady clock since we last
//     saw it change. renewTime is never compared with our wall clock, so clock skew between nodes
//     does not matter. An empty holderIdentity is free at once.
//   - A candidate tries every retry_period (jittered by up to jitter_factor, as JitterUntil):
//     Create when the Lease is absent, else Update (PUT) with the resourceVersion it read, so two
//     candidates racing get one 409 Conflict (or AlreadyExists) and the loser tries again later.
//   - The leader renews every retry_period. If no renewal succeeds for renew_deadline, or an
//     attempt reads a Lease that is no longer ours (another holder, released, deleted), it has
//     lost leadership: on_stopped_leading runs once and the elector stops (the operator exits,
//     as client-go's Run returns).
//   - leaseTransitions counts holder changes: +1 when we take the Lease from anyone (or from a
//     free record), kept when we renew. acquireTime is set when we take it, renewTime on every
//     write, both RFC 3339 MicroTime strings ("2026-11-30T05:00:00.123456Z").
//   - Stop(release) writes the Lease free (holderIdentity "", leaseDurationSeconds 1, as
//     client-go's ReleaseOnCancel) so a successor takes over at its next attempt.
//
// leaseDurationSeconds is whole seconds on the wire: a sub-second lease_duration (tests) is
// written as 1 s, and expiry of another holder's record is judged by the record's own
// leaseDurationSeconds (our lease_duration when the record has none).
//
// Layout: LeaderElectionCore is the pure decision (no I/O, no threads, no clock: `now` and the
// wall time are arguments); LeaderElector is the thin adapter that runs it on one thread against
// a Client. Each request of the elector is bounded by a timeout derived from the durations (see
// LeaderElector), so a hung API server cannot keep a stale leader believing it leads.
//
// Thread safety: LeaderElectionCore is not thread-safe. LeaderElector is: IsLeader, identity and
// observed_holder may be called from any thread; Start and Stop from the owning thread; the
// callbacks run on the elector's own thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "operator/kube/client.h"

namespace kinfer::kube {

struct LeaderElectionConfig {
  std::string lease_namespace;  // e.g. "kinfer-system"
  std::string lease_name;       // e.g. "kinfer-operator-leader"
  std::string identity;         // unique per process, e.g. POD_NAME + "_" + random
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  // A candidate waits retry_period * (1 + U[0, jitter_factor)) between attempts (client-go's
  // JitterFactor); the leader renews every retry_period exactly.
  double jitter_factor = 1.2;
};

// client-go's checks: names and identity set; lease_duration > renew_deadline >
// jitter_factor * retry_period > 0. InvalidArgument naming the first field that fails.
Status ValidateLeaderElectionConfig(const LeaderElectionConfig& config);

// "2026-11-30T05:00:00.123456Z" (UTC, microseconds), the format of metav1.MicroTime.
std::string FormatMicroTime(std::chrono::system_clock::time_point t);

// The pure decision. One attempt is: Decide(read) -> write the plan's body (if any) ->
// OnWriteResult. Time is passed in; nothing here blocks or does I/O.
class LeaderElectionCore {
 public:
  using Clock = std::chrono::steady_clock;
  using WallClock = std::chrono::system_clock;

  explicit LeaderElectionCore(LeaderElectionConfig config);

  struct Plan {
    enum class Action { kNone, kCreate, kUpdate };
    Action action = Action::kNone;
    // The whole Lease to Create or Update (for kUpdate it carries the resourceVersion read).
    nlohmann::json body;
    // Whether we lead after this decision (before the write: a leader stays one while renewing).
    bool leading = false;
  };

  // The Lease as read at `now` (nullopt: NotFound). Records the observation (a changed record
  // restarts its expiry), drops leadership when the Lease is no longer ours or renew_deadline has
  // passed since the last successful write, and says what to write.
  Plan Decide(const std::optional<nlohmann::json>& lease, Clock::time_point now,
              WallClock::time_point wall);
  // The read failed (not NotFound): the attempt failed. `now` is when the failure came back.
  void OnReadFailed(Clock::time_point now);
  // The outcome of the write that Decide planned: the Lease the server answered, or nullopt when
  // the write failed (Conflict, AlreadyExists, 5xx, timeout). On success we lead, and the renewal
  // counts from the `now` given to Decide (when the attempt began: conservative). On failure
  // `now` is when it came back, checked against renew_deadline.
  void OnWriteResult(const std::optional<nlohmann::json>& stored, Clock::time_point now);
  // Drops leadership when renew_deadline has passed since the last successful renewal. Returns
  // leading().
  bool Tick(Clock::time_point now);

  // The Lease to write to give leadership up, when we lead (nullopt otherwise): our last written
  // Lease (its resourceVersion) with holderIdentity "", leaseDurationSeconds 1, acquireTime and
  // renewTime `wall`, leaseTransitions kept. Call OnReleased after a successful write.
  std::optional<nlohmann::json> ReleaseBody(WallClock::time_point wall) const;
  void OnReleased(const nlohmann::json& stored, Clock::time_point now);
  // Stops leading without a write (the elector stopped; the record is left to expire).
  void Resign() { leading_ = false; }

  // Whether we lead as of the last call (no clock check).
  bool leading() const { return leading_; }
  // Whether we lead at `now`: leading() and renew_deadline has not passed since the last
  // successful renewal.
  bool IsLeader(Clock::time_point now) const;
  // When a leader must have renewed by (meaningful while leading()).
  Clock::time_point renew_deadline_at() const { return last_renew_ + config_.renew_deadline; }
  // The holderIdentity last seen (read or written); "" when none.
  const std::string& observed_holder() const { return observed_.holder; }
  // leaseDurationSeconds as we write it: lease_duration rounded up to whole seconds, at least 1.
  int64_t lease_duration_seconds() const;
  const LeaderElectionConfig& config() const { return config_; }

 private:
  struct Record {
    std::string holder;
    int64_t duration_seconds = 0;
    std::string acquire_time;
    std::string renew_time;
    int64_t transitions = 0;
    std::string resource_version;
    bool operator==(const Record& o) const;
  };
  static Record RecordOf(const nlohmann::json& lease);
  void Observe(const nlohmann::json& lease, Clock::time_point now);
  bool ObservedValid(Clock::time_point now) const;
  nlohmann::json Body(const std::optional<nlohmann::json>& base, bool renewing,
                      WallClock::time_point wall) const;

  LeaderElectionConfig config_;
  bool leading_ = false;
  bool has_observed_ = false;
  Record observed_;                  // the record last read or written
  Clock::time_point observed_time_;  // when observed_ last changed, on our clock
  nlohmann::json last_lease_;        // the whole Lease last read or written
  Clock::time_point last_renew_;     // start of the last successful write (while leading_)
  Clock::time_point attempt_start_;  // `now` of the last Decide
};

// The adapter: one thread that runs the core against the API server.
//
// Requests go through a Client made from `client->config()` with a request timeout of
// (leaseDurationSeconds - renew_deadline) / 2 (at least 50 ms), so a leader notices a failed
// renewal before another candidate can see its lease expire; `client` itself is used only when
// that Client cannot be made. Callbacks run on the elector's thread and should return promptly
// (on_started_leading starts the controllers; it does not run them); they must not destroy the
// elector.
class LeaderElector {
 public:
  // REQUIRES: `client` non-null; it must outlive the elector. Callbacks run on the elector's
  // thread. on_stopped_leading runs once if leadership held is lost (renew failed for
  // renew_deadline, or another holder took it) — the operator exits then. It does not run on Stop.
  LeaderElector(const Client* client, LeaderElectionConfig config,
                std::function<void()> on_started_leading, std::function<void()> on_stopped_leading);
  ~LeaderElector();  // Stop(true)
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Starts the thread: try to acquire every retry_period (jittered), then renew. Once only.
  void Start();
  // Stops the loop promptly (the sleep is interruptible; an attempt in flight finishes first) and
  // joins the thread; when `release` and we hold the lease, writes it released (holderIdentity
  // "", leaseDurationSeconds 1, as client-go's ReleaseOnCancel) so a successor takes over at
  // once. Idempotent. Called from a callback it only asks the loop to end.
  void Stop(bool release = true);
  // Whether we hold the lease now (false as soon as renew_deadline passes without a renewal, even
  // before the elector's thread notices).
  bool IsLeader() const;
  std::string identity() const { return config_.identity; }
  std::string observed_holder() const;  // the last holderIdentity seen ("" none)

 private:
  void Run();
  // One read-decide-write attempt; runs the callbacks. False when leadership was lost.
  bool Attempt();
  const Client* client() const;
  std::chrono::milliseconds NextWait();
  // A failed read or write of the Lease, logged (a warning); repeats of one message at most
  // every 30 s. Elector thread only.
  void LogFailure(const char* doing, const Status& status);

  const LeaderElectionConfig config_;
  const Client* client_;                // the caller's; used when own_client_ is null
  std::unique_ptr<Client> own_client_;  // with the bounded request timeout
  std::function<void()> on_started_leading_;
  std::function<void()> on_stopped_leading_;
  std::thread thread_;
  std::mt19937_64 rng_;  // elector thread only
  std::string last_failure_;                          // elector thread only
  std::chrono::steady_clock::time_point last_failure_logged_;  // elector thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // State below is protected by mu_.
  LeaderElectionCore core_;
  bool started_ = false;
  bool stop_ = false;
  bool release_on_stop_ = false;
};

}  // namespace kinfer::kube
