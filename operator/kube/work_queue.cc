#include "operator/kube/work_queue.h"

#include <algorithm>

namespace kinfer::kube {

void WorkQueueCore::Add(const std::string& key) {
  if (held_.count(key) != 0) {
    added_while_held_.insert(key);  // queued when the hold ends
    return;
  }
  if (dirty_.count(key) != 0) return;
  dirty_.insert(key);
  if (processing_.count(key) != 0) return;  // Done requeues it
  queue_.push_back(key);
}

void WorkQueueCore::AddAfter(const std::string& key, std::chrono::nanoseconds delay,
                             Clock::time_point now) {
  if (delay <= std::chrono::nanoseconds::zero()) {
    Add(key);
    return;
  }
  if (held_.count(key) != 0) return;
  Clock::time_point due = now + delay;
  auto it = delayed_at_.find(key);
  if (it != delayed_at_.end()) {
    if (it->second <= due) return;  // an earlier copy is already waiting
    EraseDelayed(key);
  }
  delayed_.emplace(due, key);
  delayed_at_[key] = due;
}

std::chrono::nanoseconds WorkQueueCore::AddRateLimited(const std::string& key,
                                                       Clock::time_point now,
                                                       std::chrono::nanoseconds at_least) {
  int n = failures_[key]++;
  std::chrono::nanoseconds delay = policy_.max;
  if (n < 62) {
    // base * 2^n without overflow.
    double d = static_cast<double>(policy_.base.count()) * static_cast<double>(int64_t{1} << n);
    if (d < static_cast<double>(policy_.max.count())) {
      delay = std::chrono::nanoseconds(static_cast<int64_t>(d));
    }
  }
  delay = std::max(delay, at_least);
  if (at_least <= std::chrono::nanoseconds::zero()) {
    AddAfter(key, delay, now);
    return delay;
  }
  // The hold replaces any earlier copy (or hold); a pending re-add waits for the hold's end:
  // the server's time comes first. The hold lasts the server's time only; the rest of the
  // backoff is a plain delayed requeue that an event brings forward.
  held_.erase(key);
  bool pending = added_while_held_.erase(key) != 0;
  EraseDelayed(key);
  if (dirty_.erase(key) != 0) {
    pending = true;
    if (processing_.count(key) == 0) {
      queue_.erase(std::remove(queue_.begin(), queue_.end(), key), queue_.end());
    }
  }
  AddAfter(key, at_least, now);
  held_[key] = now + delay;
  if (pending) added_while_held_.insert(key);
  return delay;
}

void WorkQueueCore::Forget(const std::string& key) { failures_.erase(key); }

int WorkQueueCore::NumRequeues(const std::string& key) const {
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueueCore::EraseDelayed(const std::string& key) {
  auto it = delayed_at_.find(key);
  if (it == delayed_at_.end()) return;
  auto range = delayed_.equal_range(it->second);
  for (auto d = range.first; d != range.second; ++d) {
    if (d->second == key) {
      delayed_.erase(d);
      break;
    }
  }
  delayed_at_.erase(it);
}

void WorkQueueCore::PromoteDue(Clock::time_point now) {
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    delayed_at_.erase(key);
    auto held = held_.find(key);
    if (held != held_.end()) {
      // The server's time is up: an event that came meanwhile queues the key now, else the
      // rest of the backoff is a plain delayed requeue.
      Clock::time_point backoff_due = held->second;
      held_.erase(held);
      if (added_while_held_.erase(key) == 0 && backoff_due > now) {
        AddAfter(key, backoff_due - now, now);
        continue;
      }
    }
    Add(key);
  }
}

std::optional<std::string> WorkQueueCore::TryGet(Clock::time_point now) {
  PromoteDue(now);
  if (queue_.empty()) return std::nullopt;
  std::string key = std::move(queue_.front());
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return key;
}

void WorkQueueCore::Done(const std::string& key) {
  processing_.erase(key);
  if (dirty_.count(key) != 0) queue_.push_back(key);
}

std::optional<Clock::time_point> WorkQueueCore::NextDue() const {
  if (delayed_.empty()) return std::nullopt;
  return delayed_.begin()->first;
}

void WorkQueue::Add(const std::string& key) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (shut_down_) return;
    core_.Add(key);
  }
  cv_.notify_one();
}

void WorkQueue::AddAfter(const std::string& key, std::chrono::nanoseconds delay) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (shut_down_) return;
    core_.AddAfter(key, delay, Clock::now());
  }
  cv_.notify_all();  // a waiter may need to shorten its sleep
}

std::chrono::nanoseconds WorkQueue::AddRateLimited(const std::string& key,
                                                   std::chrono::nanoseconds at_least) {
  std::chrono::nanoseconds d;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (shut_down_) return std::chrono::nanoseconds::zero();
    d = core_.AddRateLimited(key, Clock::now(), at_least);
  }
  cv_.notify_all();
  return d;
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  core_.Forget(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  std::lock_guard<std::mutex> l(mu_);
  return core_.NumRequeues(key);
}

std::optional<std::string> WorkQueue::Get() {
  std::unique_lock<std::mutex> l(mu_);
  while (!shut_down_) {
    std::optional<std::string> key = core_.TryGet(Clock::now());
    if (key.has_value()) return key;
    std::optional<Clock::time_point> due = core_.NextDue();
    if (due.has_value()) {
      cv_.wait_until(l, *due);
    } else {
      cv_.wait(l);
    }
  }
  return std::nullopt;
}

void WorkQueue::Done(const std::string& key) {
  {
    std::lock_guard<std::mutex> l(mu_);
    core_.Done(key);
  }
  cv_.notify_one();
}

void WorkQueue::ShutDown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    shut_down_ = true;
  }
  cv_.notify_all();
}

size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> l(mu_);
  return core_.Len();
}

}  // namespace kinfer::kube
