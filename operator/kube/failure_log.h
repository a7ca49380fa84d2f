// Rate-limits a warning about a failure that repeats while its cause lasts (RBAC, a webhook,
// throttling): per key, the first failure and each new message are logged at once, a lasting one
// again every `every` (30 s), as the leader elector's Lease warning. Clear(key) once it succeeds.
//
// Thread safety: thread-safe (one mutex).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace kinfer::kube {

class FailureLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit FailureLog(std::chrono::nanoseconds every = std::chrono::seconds(30)) : every_(every) {}

  // True when this failure of `key` should be logged now (and records it as logged).
  bool ShouldLog(const std::string& key, const std::string& message,
                 Clock::time_point now = Clock::now()) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = last_.find(key);
    if (it != last_.end() && it->second.first == message && now - it->second.second < every_) {
      return false;
    }
    last_[key] = {message, now};
    return true;
  }
  // The failure of `key` ended: its next one is logged at once.
  void Clear(const std::string& key) {
    std::lock_guard<std::mutex> l(mu_);
    last_.erase(key);
  }

 private:
  const std::chrono::nanoseconds every_;
  std::mutex mu_;
  std::map<std::string, std::pair<std::string, Clock::time_point>> last_;  // guarded by mu_
};

}  // namespace kinfer::kube
