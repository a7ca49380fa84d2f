// List+watch and an informer-style cache (client-go's Reflector + Store, made small).
//
// Informer runs one loop on its own thread:
//   list (resourceVersion R)  ->  Store::Replace, handler gets the differences
//   watch from R (allowWatchBookmarks, timeoutSeconds), reading the chunked stream line by line:
//     ADDED/MODIFIED/DELETED -> Store::Apply, handler, R = the object's resourceVersion
//     BOOKMARK               -> R = its resourceVersion (nothing delivered)
//     ERROR (410 Expired, 504 too large, ...) -> a fresh list (after a backoff when the watch
//                                                 delivered nothing first)
//   clean end of stream (timeoutSeconds)  -> watch again from R at once (after a backoff only
//                                            when it came within 1 s with nothing delivered)
//   broken stream or failed request       -> exponential backoff, then watch again from R
//                                            (a 410 answer there leads to a fresh list)
// so the store converges on the server's state after compaction, dropped streams and restarts.
// Backoff starts at initial_backoff, doubles to max_backoff and resets once a watch delivers
// (never on a successful list: with every watch answered 410, lists are paced by the backoff).
//
// Thread safety: Store is thread-safe (one mutex). Informer's handler runs on the informer's
// thread, outside the store's lock, in event order; Start/Stop/WaitForSync/stats may be called
// from any thread. The Client must outlive the Informer.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/kube/client.h"
#include "operator/kube/failure_log.h"

namespace kinfer::kube {

enum class EventType { kAdded, kModified, kDeleted };
std::string_view EventTypeName(EventType t);

struct WatchEvent {
  EventType type;
  json object;
};

// Objects by "namespace/name" ("name" for cluster-scoped ones). Each is kept packed as
// MessagePack (about a third of a parsed nlohmann::json's memory: the operator caches every
// Deployment, Service, ConfigMap and PDB it owns) and parsed again on Get and List.
class Store {
 public:
  static std::string KeyOf(const json& object);

  void Apply(const WatchEvent& event);
  // Makes the store hold exactly `items`; returns the events that bring a reader of the old
  // contents up to date: ADDED (new), MODIFIED (resourceVersion changed), DELETED (gone).
  std::vector<WatchEvent> Replace(const std::vector<json>& items);

  std::optional<json> Get(const std::string& ns, const std::string& name) const;
  // All objects (ns empty) or those of one namespace, sorted by key.
  std::vector<json> List(const std::string& ns = {}) const;
  size_t Size() const;

 private:
  struct Packed {
    std::string resource_version;
    std::vector<uint8_t> bytes;  // MessagePack
  };
  static Packed Pack(const json& object);
  static json Unpack(const Packed& packed);

  mutable std::mutex mu_;
  std::map<std::string, Packed> objects_;  // protected by mu_
};

struct WatchOptions {
  std::string ns;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{30000};
  int timeout_seconds = 300;  // server-side end of each watch
  // Inactivity on the stream: past timeout_seconds, so that the server ends a quiet watch first.
  // An API server need not send bookmarks (none without its watch cache): a shorter timeout cut
  // every quiet watch as a stream error, and the backoff grew to 30 s between watches.
  std::chrono::milliseconds stream_timeout{330000};
  // Sleeps for a backoff; default: waits, waking early on Stop. Tests inject one to record.
  std::function<void(std::chrono::milliseconds)> sleeper;
  // Applied to every listed or watched object before it is stored and delivered (client-go's
  // SetTransform): drop what the reader never needs to keep the cache small. It must keep
  // metadata.namespace, name and resourceVersion.
  std::function<void(json*)> transform;
};

struct WatchStats {
  int64_t lists = 0;          // successful lists
  int64_t relists = 0;        // lists after the first (410 Expired, ERROR events)
  int64_t watches = 0;        // watch streams opened with HTTP 200
  int64_t stream_errors = 0;  // broken streams and failed requests
  int64_t events = 0;         // ADDED/MODIFIED/DELETED received from streams
  int64_t bookmarks = 0;
};

class Informer {
 public:
  using Handler = std::function<void(const WatchEvent&)>;

  Informer(const Client* client, ResourceType type, WatchOptions options, Handler handler);
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  // Starts the loop thread. REQUIRES: not started.
  void Start();
  // Ends the loop (waits for the thread; at most about one read of the stream).
  void Stop();
  // True once the first list has been stored; false on timeout.
  bool WaitForSync(std::chrono::milliseconds timeout);

  const Store& store() const { return store_; }
  std::string resource_version() const;
  WatchStats stats() const;

 private:
  void Run();
  // One watch stream from rv_; returns when it ends. Sets need_list_ on ERROR events / 410.
  // Returns true when the stream delivered anything (to reset the backoff).
  bool WatchOnce();
  bool ListOnce();
  void Backoff();
  // Warns about a failed list or watch request with the server's answer: at once, then every
  // 30 s while the same failure lasts (RBAC without list/watch would otherwise be silent).
  void LogFailure(const char* what, const Status& status);
  void Deliver(const WatchEvent& e);
  std::string WatchPath() const;

  const Client* client_;
  const ResourceType type_;
  const WatchOptions options_;
  const Handler handler_;
  Store store_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  pplx::cancellation_token_source cancel_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  // State below is protected by mu_ (written only by the loop thread).
  std::string rv_;
  bool synced_ = false;
  WatchStats stats_;

  // Loop-thread only.
  bool need_list_ = true;
  std::chrono::milliseconds backoff_{0};
  FailureLog failures_;  // keys "list" and "watch"
};

}  // namespace kinfer::kube
