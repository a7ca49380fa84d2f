// Events on InferenceServices (core/v1 Event), aggregated as client-go's EventCorrelator does:
// the first occurrence of (object, type, reason, message) creates an Event named
// "<object>.<hex nanoseconds>"; a repeat within the aggregation window patches that Event's
// count and lastTimestamp instead of creating another, so a condition that persists (an invalid
// spec reconciled again, a failing API call) costs one small patch, never a flood of objects.
//
// EventCorrelator is the pure half (no I/O, time passed in); EventRecorder writes through the
// Client. Recording never fails its caller: a failed write is logged and dropped (Events are
// best effort, as in Kubernetes).
//
// Thread safety: EventCorrelator is not thread-safe; EventRecorder is (one mutex around its
// correlator; the HTTP calls run outside it).
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/kube/client.h"

namespace kinfer::controller {

using SteadyTime = std::chrono::steady_clock::time_point;

class EventCorrelator {
 public:
  struct Options {
    size_t max_entries = 4096;         // least recently seen keys are forgotten
    std::chrono::seconds window{600};  // a repeat after this starts a new Event
  };
  EventCorrelator() : EventCorrelator(Options{}) {}
  explicit EventCorrelator(Options options) : options_(options) {}

  struct Decision {
    bool create = true;  // true: create an Event named `name`; false: patch `name`'s count
    std::string name;
    int count = 1;
  };
  // `key` identifies (object uid, type, reason, message); `fresh_name` is used when a new Event
  // is to be created.
  Decision Observe(const std::string& key, const std::string& fresh_name, SteadyTime now);
  // The write for `key` failed (or the Event is gone): the next occurrence creates a new one.
  void Forget(const std::string& key);
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    int count = 0;
    SteadyTime last;
    std::list<std::string>::iterator lru;
  };
  Options options_;
  std::map<std::string, Entry> entries_;
  std::list<std::string> lru_;  // front = most recently seen
};

// "Normal" or "Warning", as core/v1 Event.type.
inline constexpr char kEventNormal[] = "Normal";
inline constexpr char kEventWarning[] = "Warning";

class EventRecorder {
 public:
  // `component` goes to source.component and reportingComponent; `instance` (the operator's
  // identity) to source.host and reportingInstance. `client` may be null (recording disabled).
  EventRecorder(const kube::Client* client, std::string component, std::string instance);

  // Records an Event about `object` (an InferenceService as read: apiVersion, kind, metadata).
  void Record(const nlohmann::json& object, const std::string& type, const std::string& reason,
              const std::string& message);

  int64_t written() const;  // creates and patches that succeeded
  int64_t failed() const;

 private:
  const kube::Client* client_;
  const std::string component_;
  const std::string instance_;
  mutable std::mutex mu_;
  EventCorrelator correlator_;  // protected by mu_
  int64_t written_ = 0;         // protected by mu_
  int64_t failed_ = 0;          // protected by mu_
};

}  // namespace kinfer::controller
