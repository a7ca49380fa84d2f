#include "operator/controller/event_recorder.h"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "operator/reconcile/object_diff.h"
#include "operator/reconcile/status.h"

namespace kinfer::controller {

using nlohmann::json;

EventCorrelator::Decision EventCorrelator::Observe(const std::string& key,
                                                   const std::string& fresh_name, SteadyTime now) {
  auto it = entries_.find(key);
  if (it != entries_.end() && now - it->second.last <= options_.window) {
    Entry& e = it->second;
    ++e.count;
    e.last = now;
    lru_.splice(lru_.begin(), lru_, e.lru);
    return {false, e.name, e.count};
  }
  if (it != entries_.end()) {
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  while (!lru_.empty() && entries_.size() >= options_.max_entries) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  entries_[key] = Entry{fresh_name, 1, now, lru_.begin()};
  return {true, fresh_name, 1};
}

void EventCorrelator::Forget(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

EventRecorder::EventRecorder(const kube::Client* client, std::string component,
                             std::string instance)
    : client_(client), component_(std::move(component)), instance_(std::move(instance)) {}

namespace {

std::string Str(const json& object, std::initializer_list<std::string_view> path) {
  const json& v = reconcile::At(object, path);
  return v.is_string() ? v.get<std::string>() : std::string();
}

// Event messages are capped as the API server caps them (1 KiB in events.k8s.io; core/v1 takes
// more, but a wall of text helps nobody in `kubectl describe`).
std::string Clip(const std::string& message) {
  constexpr size_t kMax = 1024;
  if (message.size() <= kMax) return message;
  return message.substr(0, kMax - 3) + "...";
}

}  // namespace

void EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  if (client_ == nullptr) return;
  const std::string ns = Str(object, {"metadata", "namespace"});
  const std::string name = Str(object, {"metadata", "name"});
  const std::string uid = Str(object, {"metadata", "uid"});
  if (ns.empty() || name.empty()) return;
  const std::string text = Clip(message);
  const auto wall = std::chrono::system_clock::now();
  const std::string now = reconcile::FormatRfc3339(wall);
  char suffix[24];
  std::snprintf(
      suffix, sizeof suffix, ".%llx",
      static_cast<unsigned long long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count()));
  const std::string key =
      ns + "/" + name + "/" + uid + "\x1f" + type + "\x1f" + reason + "\x1f" + text;
  EventCorrelator::Decision d;
  {
    std::lock_guard<std::mutex> l(mu_);
    d = correlator_.Observe(key, name + suffix, std::chrono::steady_clock::now());
  }
  Status st;
  if (!d.create) {
    StatusOr<json> r = client_->MergePatch(kube::resources::kEvents, ns, d.name,
                                           {{"count", d.count}, {"lastTimestamp", now}});
    st = r.status();
    if (!st.ok() && kube::IsNotFound(st)) d.create = true;  // expired (events have a TTL)
  }
  if (d.create) {
    json ev = {
        {"apiVersion", "v1"},
        {"kind", "Event"},
        {"metadata", {{"name", d.name}, {"namespace", ns}}},
        {"involvedObject",
         {{"apiVersion", Str(object, {"apiVersion"})},
          {"kind", Str(object, {"kind"})},
          {"name", name},
          {"namespace", ns},
          {"uid", uid},
          {"resourceVersion", Str(object, {"metadata", "resourceVersion"})}}},
        {"type", type},
        {"reason", reason},
        {"message", text},
        {"count", d.count},
        {"firstTimestamp", now},
        {"lastTimestamp", now},
        {"source", {{"component", component_}, {"host", instance_}}},
        {"reportingComponent", component_},
        {"reportingInstance", instance_},
    };
    st = client_->Create(kube::resources::kEvents, ns, ev).status();
  }
  std::lock_guard<std::mutex> l(mu_);
  if (st.ok()) {
    ++written_;
  } else {
    ++failed_;
    correlator_.Forget(key);
    spdlog::debug("event {} on {}/{} not recorded: {}", reason, ns, name, st.ToString());
  }
}

int64_t EventRecorder::written() const {
  std::lock_guard<std::mutex> l(mu_);
  return written_;
}

int64_t EventRecorder::failed() const {
  std::lock_guard<std::mutex> l(mu_);
  return failed_;
}

}  // namespace kinfer::controller
