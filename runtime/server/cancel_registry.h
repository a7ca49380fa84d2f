// CancelRegistry: running generations by the id their caller gave them (x-kinfer-request-id),
// so that a caller can stop a generation with POST /cancel while keeping its connection open (a
// proxy whose own client left, say, or one that pools its upstream connections). A client that
// closes its connection needs none of this: the HTTP layer sees it and cancels the generation.
//
// Contract:
//  * Register(id, stream) keeps a weak reference under `id` until the returned handle is
//    destroyed; an empty id registers nothing (null handle). Several streams may share an id.
//  * Cancel(id) cancels every live stream under `id` and returns how many (0 for an unknown id
//    or finished streams): idempotent.
//
// Thread-safe. The registry must outlive every handle.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kinfer {

class RequestStream;

class CancelRegistry {
 public:
  std::shared_ptr<void> Register(const std::string& id,
                                 const std::shared_ptr<RequestStream>& stream);
  int Cancel(const std::string& id);
  size_t size() const;  // ids registered

 private:
  void Unregister(const std::string& id, uint64_t key);

  mutable std::mutex mu_;
  uint64_t next_key_ = 0;
  std::unordered_map<std::string, std::vector<std::pair<uint64_t, std::weak_ptr<RequestStream>>>>
      entries_;
};

}  // namespace kinfer
