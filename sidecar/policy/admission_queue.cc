#include "sidecar/policy/admission_queue.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <string>
#include <utility>

namespace kinfer {

Status AdmissionConfig::Validate() const {
  if (num_priorities < 1) return InvalidArgument("num_priorities must be >= 1");
  if (max_concurrency < 1) return InvalidArgument("max_concurrency must be >= 1");
  if (reserved_for_top < 0 || reserved_for_top >= max_concurrency) {
    return InvalidArgument("reserved_for_top must be in [0, max_concurrency)");
  }
  if (max_queue_total < 1 || max_queue_per_class < 1 || max_queue_per_class > max_queue_total) {
    return InvalidArgument("queue bounds must be >= 1 with max_queue_per_class <= max_queue_total");
  }
  if (!(ewma_alpha > 0 && ewma_alpha <= 1)) return InvalidArgument("ewma_alpha must be in (0, 1]");
  if (initial_service_time <= Duration::zero() || codel_target <= Duration::zero() ||
      codel_interval <= Duration::zero() || min_retry_after < Duration::zero()) {
    return InvalidArgument("service seed and codel durations must be > 0, min_retry_after >= 0");
  }
  return Status::Ok();
}

uint64_t AdmissionQueue::Stats::rejected_total() const {
  uint64_t total = 0;
  for (uint64_t n : rejected) total += n;
  return total;
}

AdmissionQueue::AdmissionQueue(AdmissionConfig config)
    : config_(std::move(config)),
      queues_(static_cast<size_t>(std::max(1, config_.num_priorities))),
      mean_service_ns_(static_cast<double>(config_.initial_service_time.count())) {
  assert(config_.Validate().ok());
}

StatusOr<AdmissionQueue> AdmissionQueue::Create(AdmissionConfig config) {
  KINFER_RETURN_IF_ERROR(config.Validate());
  return AdmissionQueue(std::move(config));
}

AdmissionQueue::Duration AdmissionQueue::mean_service_time() const {
  return Duration(static_cast<int64_t>(std::llround(mean_service_ns_)));
}

int AdmissionQueue::SlotsFor(int priority) const {
  if (priority == 0) return config_.max_concurrency;
  return config_.max_concurrency - std::max(0, config_.reserved_for_top - top_in_flight_);
}

void AdmissionQueue::StartInFlight(RequestId id, int priority) {
  in_flight_.emplace(id, priority);
  if (priority == 0) ++top_in_flight_;
  ++stats_.admitted;
}

AdmissionQueue::Duration AdmissionQueue::EstimatedWait(int priority) const {
  priority = std::clamp(priority, 0, config_.num_priorities - 1);
  const size_t ahead = QueuedAheadOf(priority);
  const int slots = SlotsFor(priority);
  if (ahead == 0 && in_flight() < slots) return Duration::zero();
  return Duration(static_cast<int64_t>(
      std::ceil(WaitNs(ahead, slots))));
}

double AdmissionQueue::WaitNs(size_t ahead, int slots) const {
  // `ahead + 1` completions must happen before a slot is ours, and completions arrive at about
  // slots / mean_service per second.
  return static_cast<double>(ahead + 1) * mean_service_ns_ / std::max(slots, 1);
}

size_t AdmissionQueue::QueuedAheadOf(int priority) const {
  size_t ahead = 0;
  for (int p = 0; p <= priority; ++p) ahead += queues_[p].size();
  return ahead;
}

AdmissionQueue::Duration AdmissionQueue::RetryAfter() const {
  // Time for the whole queue (plus this request) to drain through all slots.
  const double drain_ns =
      static_cast<double>(queued() + 1) * mean_service_ns_ / config_.max_concurrency;
  return std::max(config_.min_retry_after, Duration(static_cast<int64_t>(std::ceil(drain_ns))));
}

AdmissionQueue::AdmitResult AdmissionQueue::Reject(Reason reason, Duration retry_after) {
  ++stats_.rejected[static_cast<size_t>(reason)];
  return AdmitResult{Outcome::kRejected, reason, retry_after, std::nullopt};
}

AdmissionQueue::AdmitResult AdmissionQueue::Admit(RequestId id, int priority,
                                                  Clock::time_point deadline,
                                                  Clock::time_point now) {
  ++stats_.submitted;
  priority = std::clamp(priority, 0, config_.num_priorities - 1);
  if (queued_index_.count(id) != 0 || in_flight_.count(id) != 0) {
    return Reject(Reason::kDuplicateId, Duration::zero());
  }
  if (deadline < now) return Reject(Reason::kDeadlineUnreachable, RetryAfter());

  const size_t ahead = QueuedAheadOf(priority);
  const int slots = SlotsFor(priority);
  if (ahead == 0 && in_flight() < slots) {
    // Nothing of equal or higher class waits and a slot is free: start at once. Its zero
    // sojourn tells the CoDel detector the queue is not standing -- unless less important
    // requests are still waiting, whose queue may well be standing.
    StartInFlight(id, priority);
    if (queued() == 0) SampleSojourn(Duration::zero(), now);
    return AdmitResult{Outcome::kStartNow, Reason::kNone, Duration::zero(), std::nullopt};
  }

  if (standing_ && priority != 0) return Reject(Reason::kStandingQueue, RetryAfter());
  // A full queue: make room by displacing the least important class's newest request, when it
  // is less important than this arrival.
  int victim = -1;
  if (queued() >= config_.max_queue_total) {
    for (int p = config_.num_priorities - 1; p > priority && victim < 0; --p) {
      if (!queues_[p].empty()) victim = p;
    }
    if (victim < 0) return Reject(Reason::kQueueFull, RetryAfter());
  }
  if (queues_[priority].size() >= config_.max_queue_per_class) {
    return Reject(Reason::kClassFull, RetryAfter());
  }
  if (static_cast<double>((deadline - now).count()) < WaitNs(ahead, slots)) {
    return Reject(Reason::kDeadlineUnreachable, RetryAfter());
  }

  std::optional<RequestId> displaced;
  if (victim >= 0) {
    displaced = queues_[victim].back().id;
    queued_index_.erase(*displaced);
    queues_[victim].pop_back();
    ++stats_.rejected[static_cast<size_t>(Reason::kDisplaced)];
  }
  queues_[priority].push_back(Queued{id, deadline, now});
  queued_index_.emplace(id, Location{priority, std::prev(queues_[priority].end())});
  return AdmitResult{Outcome::kQueued, Reason::kNone, Duration::zero(), displaced};
}

void AdmissionQueue::SampleSojourn(Duration sojourn, Clock::time_point now) {
  if (sojourn < config_.codel_target) {
    above_target_ = false;
    standing_ = false;
    return;
  }
  if (!above_target_) {
    above_target_ = true;
    first_above_ = now;
  } else if (now - first_above_ >= config_.codel_interval) {
    // Every sojourn sampled for a whole interval was above target: the minimum was too.
    standing_ = true;
  }
}

void AdmissionQueue::ResetStandingIfEmpty() {
  // An empty queue is not standing, whatever the last sojourn was.
  if (queued() != 0) return;
  above_target_ = false;
  standing_ = false;
}

void AdmissionQueue::StartQueued(Clock::time_point now, Dispatch* out) {
  for (;;) {
    // The most important non-empty class that may use a free slot.
    int chosen = -1;
    for (int p = 0; p < config_.num_priorities; ++p) {
      if (!queues_[p].empty()) {
        if (in_flight() < SlotsFor(p)) chosen = p;
        break;  // a lower class never overtakes a waiting higher one
      }
    }
    if (chosen < 0) break;
    const Queued q = queues_[chosen].front();
    queues_[chosen].pop_front();
    queued_index_.erase(q.id);
    if (q.deadline < now) {
      ++stats_.expired;
      out->expired.push_back(q.id);
      continue;
    }
    StartInFlight(q.id, chosen);
    out->start.push_back(q.id);
    SampleSojourn(now - q.enqueued, now);
  }
}

AdmissionQueue::Dispatch AdmissionQueue::OnComplete(RequestId id, Duration service_time,
                                                    Clock::time_point now) {
  Dispatch out;
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) return out;
  if (it->second == 0) --top_in_flight_;
  in_flight_.erase(it);
  if (service_time > Duration::zero()) {
    mean_service_ns_ = config_.ewma_alpha * static_cast<double>(service_time.count()) +
                       (1 - config_.ewma_alpha) * mean_service_ns_;
  }
  StartQueued(now, &out);
  ResetStandingIfEmpty();
  return out;
}

StatusOr<AdmissionQueue::Dispatch> AdmissionQueue::Reconfigure(const AdmissionConfig& config,
                                                               Clock::time_point now) {
  KINFER_RETURN_IF_ERROR(config.Validate().WithContext("admission config"));
  if (config.num_priorities != config_.num_priorities) {
    return FailedPrecondition("admission config: num_priorities cannot change on reload (" +
                              std::to_string(config_.num_priorities) + " -> " +
                              std::to_string(config.num_priorities) + ")");
  }
  config_ = config;
  // Kept: the EWMA estimate (initial_service_time only seeds a new queue), the queued requests
  // in order, the in-flight set, and the CoDel state (the new target and interval judge the
  // next sojourn sample, which the dispatch below may already take).
  Dispatch out;
  StartQueued(now, &out);  // more slots (or fewer reserved) may let queued requests start
  ResetStandingIfEmpty();
  return out;
}

bool AdmissionQueue::Cancel(RequestId id) {
  auto it = queued_index_.find(id);
  if (it == queued_index_.end()) return false;
  queues_[it->second.priority].erase(it->second.it);
  queued_index_.erase(it);
  ++stats_.cancelled;
  ResetStandingIfEmpty();
  return true;
}

std::vector<AdmissionQueue::RequestId> AdmissionQueue::Expire(Clock::time_point now) {
  std::vector<RequestId> expired;
  for (ClassQueue& q : queues_) {
    for (auto it = q.begin(); it != q.end();) {
      if (it->deadline < now) {
        expired.push_back(it->id);
        queued_index_.erase(it->id);
        it = q.erase(it);
        ++stats_.expired;
      } else {
        ++it;
      }
    }
  }
  ResetStandingIfEmpty();
  return expired;
}

}  // namespace kinfer
