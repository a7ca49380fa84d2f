#include "operator/kube/watch.h"

#include <cpprest/containerstream.h>
#include <cpprest/uri.h>
#include <spdlog/spdlog.h>

namespace kinfer::kube {
namespace {

std::string RvOf(const json& object) {
  return object.value("/metadata/resourceVersion"_json_pointer, std::string());
}

}  // namespace

std::string_view EventTypeName(EventType t) {
  switch (t) {
    case EventType::kAdded:
      return "ADDED";
    case EventType::kModified:
      return "MODIFIED";
    case EventType::kDeleted:
      return "DELETED";
  }
  return "?";
}

std::string Store::KeyOf(const json& object) {
  std::string ns = object.value("/metadata/namespace"_json_pointer, std::string());
  std::string name = object.value("/metadata/name"_json_pointer, std::string());
  return ns.empty() ? name : ns + "/" + name;
}

Store::Packed Store::Pack(const json& object) {
  Packed p;
  p.resource_version = RvOf(object);
  p.bytes = json::to_msgpack(object);
  p.bytes.shrink_to_fit();
  return p;
}

json Store::Unpack(const Packed& packed) {
  return json::from_msgpack(packed.bytes, /*strict=*/true, /*allow_exceptions=*/false);
}

void Store::Apply(const WatchEvent& e) {
  std::string key = KeyOf(e.object);
  if (e.type == EventType::kDeleted) {
    std::lock_guard<std::mutex> l(mu_);
    objects_.erase(key);
    return;
  }
  Packed p = Pack(e.object);
  std::lock_guard<std::mutex> l(mu_);
  objects_[key] = std::move(p);
}

std::vector<WatchEvent> Store::Replace(const std::vector<json>& items) {
  std::map<std::string, const json*> fresh;
  for (const json& o : items) fresh[KeyOf(o)] = &o;
  std::map<std::string, Packed> packed;
  for (const auto& [key, o] : fresh) packed[key] = Pack(*o);
  std::vector<WatchEvent> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [key, old] : objects_) {
    if (fresh.count(key) == 0) out.push_back({EventType::kDeleted, Unpack(old)});
  }
  for (const auto& [key, o] : fresh) {
    auto it = objects_.find(key);
    if (it == objects_.end()) {
      out.push_back({EventType::kAdded, *o});
    } else if (it->second.resource_version != packed[key].resource_version) {
      out.push_back({EventType::kModified, *o});
    }
  }
  objects_ = std::move(packed);
  return out;
}

std::optional<json> Store::Get(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = objects_.find(ns.empty() ? name : ns + "/" + name);
  if (it == objects_.end()) return std::nullopt;
  return Unpack(it->second);
}

std::vector<json> Store::List(const std::string& ns) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<json> out;
  for (const auto& [key, o] : objects_) {
    if (ns.empty() || key.rfind(ns + "/", 0) == 0) out.push_back(Unpack(o));
  }
  return out;
}

size_t Store::Size() const {
  std::lock_guard<std::mutex> l(mu_);
  return objects_.size();
}

Informer::Informer(const Client* client, ResourceType type, WatchOptions options, Handler handler)
    : client_(client),
      type_(std::move(type)),
      options_(std::move(options)),
      handler_(std::move(handler)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    // Under mu_: Backoff() checks stop_ under it before it blocks, so the notify cannot fall
    // between its check and its wait (a lost wakeup held Stop for the rest of a 30 s backoff).
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cancel_.cancel();
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [this] { return synced_; });
}

std::string Informer::resource_version() const {
  std::lock_guard<std::mutex> l(mu_);
  return rv_;
}

WatchStats Informer::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void Informer::Deliver(const WatchEvent& e) {
  if (handler_) handler_(e);
}

void Informer::Backoff() {
  backoff_ = backoff_.count() == 0 ? options_.initial_backoff
                                   : std::min(backoff_ * 2, options_.max_backoff);
  if (options_.sleeper) {
    options_.sleeper(backoff_);
    return;
  }
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, backoff_, [this] { return stop_.load(); });
}

void Informer::LogFailure(const char* what, const Status& status) {
  const std::string message = status.ToString();
  if (!failures_.ShouldLog(what, message)) return;
  std::string where = type_.plural + (options_.ns.empty() ? "" : " in " + options_.ns);
  spdlog::warn("informer {}: {} failed (retrying with backoff): {}", where, what, message);
}

bool Informer::ListOnce() {
  ListOptions lo;
  lo.label_selector = options_.label_selector;
  lo.field_selector = options_.field_selector;
  StatusOr<json> list = client_->List(type_, options_.ns, lo);
  if (!list.ok() || !(*list).contains("items") || !(*list)["items"].is_array()) {
    LogFailure("list", list.ok() ? Internal("the list has no items") : list.status());
    return false;
  }
  failures_.Clear("list");
  std::vector<json> items = std::move((*list)["items"]).get<std::vector<json>>();
  if (options_.transform) {
    for (json& item : items) options_.transform(&item);
  }
  std::vector<WatchEvent> diff = store_.Replace(items);
  {
    std::lock_guard<std::mutex> l(mu_);
    rv_ = RvOf(*list);
    if (stats_.lists++ > 0) ++stats_.relists;
    synced_ = true;
  }
  cv_.notify_all();
  for (const WatchEvent& e : diff) Deliver(e);
  return true;
}

std::string Informer::WatchPath() const {
  std::string p = Client::Path(type_, options_.ns);
  p += "?watch=1&allowWatchBookmarks=true";
  p += "&resourceVersion=" + web::uri::encode_data_string(resource_version());
  p += "&timeoutSeconds=" + std::to_string(options_.timeout_seconds);
  if (!options_.label_selector.empty()) {
    p += "&labelSelector=" + web::uri::encode_data_string(options_.label_selector);
  }
  if (!options_.field_selector.empty()) {
    p += "&fieldSelector=" + web::uri::encode_data_string(options_.field_selector);
  }
  return p;
}

bool Informer::WatchOnce() {
  StatusOr<Client::Stream> stream =
      client_->OpenStream(WatchPath(), options_.stream_timeout, cancel_.get_token());
  if (!stream.ok()) {
    LogFailure("watch", stream.status());
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.stream_errors;
    return false;
  }
  web::http::http_response& resp = stream->response;
  if (resp.status_code() != 200) {
    std::string body;
    try {
      body = resp.extract_string(true).get();
    } catch (const std::exception&) {
    }
    Status st = StatusFromHttp(resp.status_code(), body);
    if (IsGone(st)) {
      need_list_ = true;
    } else {
      LogFailure("watch", st);
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.stream_errors;
    }
    return false;
  }
  failures_.Clear("watch");
  {
    std::lock_guard<std::mutex> l(mu_);
    ++stats_.watches;
  }
  bool delivered = false;
  auto body = resp.body();
  try {
    while (!stop_) {
      concurrency::streams::container_buffer<std::string> buf;
      size_t n = body.read_line(buf).get();
      const std::string& line = buf.collection();
      if (n == 0 && line.empty()) {
        if (body.is_eof()) break;  // clean end (timeoutSeconds or server end)
        continue;
      }
      json ev = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!ev.is_object() || !ev.contains("type") || !ev.contains("object")) continue;
      std::string type = ev["type"];
      json& obj = ev["object"];
      if (type == "BOOKMARK") {
        std::lock_guard<std::mutex> l(mu_);
        rv_ = RvOf(obj);
        ++stats_.bookmarks;
        delivered = true;
        continue;
      }
      if (type == "ERROR") {
        // 410 Expired (history compacted), 504 (resourceVersion too large), ...: relist.
        need_list_ = true;
        return delivered;
      }
      WatchEvent e;
      if (type == "ADDED") {
        e.type = EventType::kAdded;
      } else if (type == "MODIFIED") {
        e.type = EventType::kModified;
      } else if (type == "DELETED") {
        e.type = EventType::kDeleted;
      } else {
        continue;
      }
      e.object = std::move(obj);
      if (options_.transform) options_.transform(&e.object);
      store_.Apply(e);
      {
        std::lock_guard<std::mutex> l(mu_);
        rv_ = RvOf(e.object);
        ++stats_.events;
      }
      delivered = true;
      Deliver(e);
    }
    if (!stop_ && !body.is_eof()) throw std::runtime_error("stream ended early");
  } catch (const std::exception&) {
    if (!stop_) {
      std::lock_guard<std::mutex> l(mu_);
      ++stats_.stream_errors;
    }
    return delivered;
  }
  return delivered;
}

void Informer::Run() {
  while (!stop_) {
    if (need_list_) {
      if (!ListOnce()) {
        {
          std::lock_guard<std::mutex> l(mu_);
          ++stats_.stream_errors;
        }
        Backoff();
        continue;
      }
      // The backoff is not reset here: a list that succeeds while every watch is answered
      // 410 (or ends in an ERROR event) would otherwise relist in a tight loop.
      need_list_ = false;
    }
    int64_t errors_before = stats().stream_errors;
    const auto started = std::chrono::steady_clock::now();
    bool delivered = WatchOnce();
    if (stop_) break;
    if (delivered) backoff_ = std::chrono::milliseconds(0);
    if (need_list_) {
      // 410 / ERROR event: relist, after a backoff when this watch delivered nothing
      // (client-go's reflector backs off before relisting too).
      if (!delivered) Backoff();
      continue;
    }
    bool failed = stats().stream_errors > errors_before;
    // A clean end (timeoutSeconds) watches again at once, even with nothing delivered: a quiet
    // namespace is no failure. Only one that ended within a second with nothing delivered backs
    // off (as client-go's "very short watch").
    bool very_short = !delivered && std::chrono::steady_clock::now() - started < std::chrono::seconds(1);
    if (failed || very_short) Backoff();
  }
}

}  // namespace kinfer::kube
