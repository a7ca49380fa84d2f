#include "runtime/server/cancel_registry.h"

#include <algorithm>
#include <functional>

#include "runtime/engine/engine.h"

namespace kinfer {

namespace {

// Unregisters its entry when the last holder lets go.
struct Registration {
  std::function<void()> unregister;
  ~Registration() { unregister(); }
};

}  // namespace

std::shared_ptr<void> CancelRegistry::Register(const std::string& id,
                                               const std::shared_ptr<RequestStream>& stream) {
  if (id.empty() || !stream) return nullptr;
  uint64_t key = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    key = next_key_++;
    entries_[id].emplace_back(key, stream);
  }
  auto r = std::make_shared<Registration>();
  r->unregister = [this, id, key] { Unregister(id, key); };
  return r;
}

int CancelRegistry::Cancel(const std::string& id) {
  std::vector<std::shared_ptr<RequestStream>> live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return 0;
    for (const auto& [key, weak] : it->second) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  for (const auto& s : live) s->Cancel();
  return static_cast<int>(live.size());
}

size_t CancelRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void CancelRegistry::Unregister(const std::string& id, uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  auto& v = it->second;
  v.erase(std::remove_if(v.begin(), v.end(), [key](const auto& e) { return e.first == key; }),
          v.end());
  if (v.empty()) entries_.erase(it);
}

}  // namespace kinfer
