#include "operator/kube/leader_election.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>
#include <utility>

namespace kinfer::kube {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

std::string StringAt(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int64_t IntAt(const json& obj, const char* key) {
  if (!obj.is_object()) return 0;
  auto it = obj.find(key);
  return it != obj.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
}

const json& Member(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it != obj.end() ? *it : kNull;
}

}  // namespace

Status ValidateLeaderElectionConfig(const LeaderElectionConfig& c) {
  if (c.lease_namespace.empty())
    return InvalidArgument("leader election: lease_namespace is empty");
  if (c.lease_name.empty()) return InvalidArgument("leader election: lease_name is empty");
  if (c.identity.empty()) return InvalidArgument("leader election: identity is empty");
  if (c.retry_period <= milliseconds::zero()) {
    return InvalidArgument("leader election: retry_period must be positive");
  }
  if (c.jitter_factor < 0) return InvalidArgument("leader election: jitter_factor is negative");
  if (static_cast<double>(c.renew_deadline.count()) <=
      c.jitter_factor * static_cast<double>(c.retry_period.count())) {
    return InvalidArgument(
        "leader election: renew_deadline must be greater than retry_period * jitter_factor");
  }
  if (c.lease_duration <= c.renew_deadline) {
    return InvalidArgument("leader election: lease_duration must be greater than renew_deadline");
  }
  return Status::Ok();
}

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  int64_t secs = us / 1000000;
  int64_t frac = us % 1000000;
  if (frac < 0) {
    frac += 1000000;
    --secs;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<long long>(frac));
  return buf;
}

// ---- LeaderElectionCore ------------------------------------------------------------------------

LeaderElectionCore::LeaderElectionCore(LeaderElectionConfig config) : config_(std::move(config)) {}

bool LeaderElectionCore::Record::operator==(const Record& o) const {
  return holder == o.holder && duration_seconds == o.duration_seconds &&
         acquire_time == o.acquire_time && renew_time == o.renew_time &&
         transitions == o.transitions && resource_version == o.resource_version;
}

LeaderElectionCore::Record LeaderElectionCore::RecordOf(const json& lease) {
  const json& spec = Member(lease, "spec");
  Record r;
  r.holder = StringAt(spec, "holderIdentity");
  r.duration_seconds = IntAt(spec, "leaseDurationSeconds");
  r.acquire_time = StringAt(spec, "acquireTime");
  r.renew_time = StringAt(spec, "renewTime");
  r.transitions = IntAt(spec, "leaseTransitions");
  r.resource_version = StringAt(Member(lease, "metadata"), "resourceVersion");
  return r;
}

int64_t LeaderElectionCore::lease_duration_seconds() const {
  int64_t ms = config_.lease_duration.count();
  int64_t s = (ms + 999) / 1000;
  return s < 1 ? 1 : s;
}

void LeaderElectionCore::Observe(const json& lease, Clock::time_point now) {
  Record r = RecordOf(lease);
  if (!has_observed_ || !(r == observed_)) {
    observed_ = std::move(r);
    observed_time_ = now;
    has_observed_ = true;
  }
  last_lease_ = lease;
}

bool LeaderElectionCore::ObservedValid(Clock::time_point now) const {
  std::chrono::nanoseconds duration = config_.lease_duration;
  if (observed_.duration_seconds > 0) duration = std::chrono::seconds(observed_.duration_seconds);
  return observed_time_ + duration > now;
}

json LeaderElectionCore::Body(const std::optional<json>& base, bool renewing,
                              WallClock::time_point wall) const {
  json lease = base.has_value() && base->is_object() ? *base : json::object();
  lease["apiVersion"] = "coordination.k8s.io/v1";
  lease["kind"] = "Lease";
  if (!lease["metadata"].is_object()) lease["metadata"] = json::object();
  lease["metadata"]["name"] = config_.lease_name;
  lease["metadata"]["namespace"] = config_.lease_namespace;
  if (!lease["spec"].is_object()) lease["spec"] = json::object();
  json& spec = lease["spec"];
  Record old = base.has_value() ? RecordOf(*base) : Record{};
  std::string now = FormatMicroTime(wall);
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] = lease_duration_seconds();
  spec["renewTime"] = now;
  if (renewing) {
    spec["acquireTime"] = old.acquire_time.empty() ? now : old.acquire_time;
    spec["leaseTransitions"] = old.transitions;
  } else {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = base.has_value() ? old.transitions + 1 : 0;
  }
  return lease;
}

LeaderElectionCore::Plan LeaderElectionCore::Decide(const std::optional<json>& lease,
                                                    Clock::time_point now,
                                                    WallClock::time_point wall) {
  Plan plan;
  attempt_start_ = now;
  if (lease.has_value()) Observe(*lease, now);
  if (leading_) {
    // The Lease gone or naming someone else: it was taken (or released, or deleted) behind our
    // back. Stop at once rather than fight for it.
    if (!lease.has_value() || observed_.holder != config_.identity) {
      leading_ = false;
      return plan;
    }
    if (!Tick(now)) return plan;
    plan.action = Plan::Action::kUpdate;
    plan.body = Body(lease, /*renewing=*/true, wall);
    plan.leading = true;
    return plan;
  }
  if (!lease.has_value()) {
    plan.action = Plan::Action::kCreate;
    plan.body = Body(std::nullopt, /*renewing=*/false, wall);
    return plan;
  }
  bool ours = observed_.holder == config_.identity;  // our own record from before (client-go)
  if (!observed_.holder.empty() && !ours && ObservedValid(now)) return plan;  // held by another
  plan.action = Plan::Action::kUpdate;
  plan.body = Body(lease, /*renewing=*/ours, wall);
  return plan;
}

void LeaderElectionCore::OnReadFailed(Clock::time_point now) { Tick(now); }

void LeaderElectionCore::OnWriteResult(const std::optional<json>& stored, Clock::time_point now) {
  if (!stored.has_value()) {
    Tick(now);
    return;
  }
  Observe(*stored, attempt_start_);
  leading_ = true;
  last_renew_ = attempt_start_;
}

bool LeaderElectionCore::Tick(Clock::time_point now) {
  if (leading_ && now - last_renew_ >= config_.renew_deadline) leading_ = false;
  return leading_;
}

bool LeaderElectionCore::IsLeader(Clock::time_point now) const {
  return leading_ && now - last_renew_ < config_.renew_deadline;
}

std::optional<json> LeaderElectionCore::ReleaseBody(WallClock::time_point wall) const {
  if (!leading_) return std::nullopt;
  json lease = last_lease_;
  json& spec = lease["spec"];
  std::string now = FormatMicroTime(wall);
  spec["holderIdentity"] = "";
  spec["leaseDurationSeconds"] = 1;
  spec["acquireTime"] = now;
  spec["renewTime"] = now;
  spec["leaseTransitions"] = observed_.transitions;
  return lease;
}

void LeaderElectionCore::OnReleased(const json& stored, Clock::time_point now) {
  Observe(stored, now);
  leading_ = false;
}

// ---- LeaderElector -----------------------------------------------------------------------------

LeaderElector::LeaderElector(const Client* client, LeaderElectionConfig config,
                             std::function<void()> on_started_leading,
                             std::function<void()> on_stopped_leading)
    : config_(std::move(config)),
      client_(client),
      on_started_leading_(std::move(on_started_leading)),
      on_stopped_leading_(std::move(on_stopped_leading)),
      rng_(std::random_device{}()),
      core_(config_) {
  // Bound each request so that a leader whose renewals hang notices before the others can see
  // its record expire: renew_deadline plus one attempt (a read and a write) fits in the lease.
  milliseconds lease(core_.lease_duration_seconds() * 1000);
  milliseconds timeout = (lease - config_.renew_deadline) / 2;
  if (timeout < milliseconds(50)) timeout = milliseconds(50);
  ClientOptions options;
  options.request_timeout = timeout;
  if (client_ != nullptr) {
    StatusOr<std::unique_ptr<Client>> own = Client::Create(client_->config(), options);
    if (own.ok()) own_client_ = std::move(own).value();
  }
}

LeaderElector::~LeaderElector() {
  Stop(true);
  if (thread_.joinable()) thread_.join();  // Stop was called from a callback
}

void LeaderElector::Start() {
  std::lock_guard<std::mutex> l(mu_);
  if (started_ || stop_) return;
  started_ = true;
  // Made under mu_: Run takes mu_ first, so thread_ is set before any callback can call Stop.
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop(bool release) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stop_) release_on_stop_ = release;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool LeaderElector::IsLeader() const {
  std::lock_guard<std::mutex> l(mu_);
  return core_.IsLeader(LeaderElectionCore::Clock::now());
}

std::string LeaderElector::observed_holder() const {
  std::lock_guard<std::mutex> l(mu_);
  return core_.observed_holder();
}

const Client* LeaderElector::client() const {
  return own_client_ != nullptr ? own_client_.get() : client_;
}

void LeaderElector::LogFailure(const char* doing, const Status& status) {
  // Every retry fails alike while the cause lasts (RBAC, a missing namespace): the first failure
  // and each new message are logged at once, a lasting one again every 30 s.
  const std::string message = status.ToString();
  const auto now = std::chrono::steady_clock::now();
  if (message == last_failure_ && now - last_failure_logged_ < std::chrono::seconds(30)) return;
  last_failure_ = message;
  last_failure_logged_ = now;
  spdlog::warn("leader election: {} the Lease {}/{} failed: {}", doing, config_.lease_namespace,
               config_.lease_name, message);
}

bool LeaderElector::Attempt() {
  using Clock = LeaderElectionCore::Clock;
  Clock::time_point now = Clock::now();
  LeaderElectionCore::WallClock::time_point wall = LeaderElectionCore::WallClock::now();
  bool was;
  bool lost_before = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    was = core_.leading();
    lost_before = was && !core_.Tick(now);
  }
  if (!lost_before) {
    StatusOr<json> read =
        client()->Get(resources::kLeases, config_.lease_namespace, config_.lease_name);
    LeaderElectionCore::Plan plan;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (read.ok()) {
        plan = core_.Decide(*read, now, wall);
      } else if (IsNotFound(read.status())) {
        plan = core_.Decide(std::nullopt, now, wall);
      } else {
        core_.OnReadFailed(Clock::now());
      }
    }
    if (!read.ok() && !IsNotFound(read.status())) LogFailure("reading", read.status());
    if (plan.action != LeaderElectionCore::Plan::Action::kNone) {
      StatusOr<json> written =
          plan.action == LeaderElectionCore::Plan::Action::kCreate
              ? client()->Create(resources::kLeases, config_.lease_namespace, plan.body)
              : client()->Update(resources::kLeases, config_.lease_namespace, plan.body);
      // Another candidate writing first (a conflict) is the election working, not a failure.
      if (!written.ok() && !IsConflict(written.status()) && !IsAlreadyExists(written.status())) {
        LogFailure(plan.action == LeaderElectionCore::Plan::Action::kCreate ? "creating" : "updating",
                   written.status());
      }
      std::lock_guard<std::mutex> l(mu_);
      core_.OnWriteResult(written.ok() ? std::optional<json>(*written) : std::nullopt,
                          Clock::now());
    }
  }
  bool is;
  {
    std::lock_guard<std::mutex> l(mu_);
    is = core_.leading();
  }
  if (!was && is && on_started_leading_) on_started_leading_();
  if (was && !is) {
    if (on_stopped_leading_) on_stopped_leading_();
    return false;
  }
  return true;
}

milliseconds LeaderElector::NextWait() {
  using Clock = LeaderElectionCore::Clock;
  std::lock_guard<std::mutex> l(mu_);
  if (core_.leading()) {
    // Renew every retry_period, but wake at the renew deadline to give up on time.
    auto left = std::chrono::duration_cast<milliseconds>(core_.renew_deadline_at() - Clock::now());
    milliseconds wait = config_.retry_period;
    if (left < wait) wait = left < milliseconds::zero() ? milliseconds::zero() : left;
    return wait;
  }
  std::uniform_real_distribution<double> jitter(0.0, config_.jitter_factor);
  return milliseconds(static_cast<int64_t>(static_cast<double>(config_.retry_period.count()) *
                                           (1.0 + jitter(rng_))));
}

void LeaderElector::Run() {
  while (true) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) break;
    }
    if (!Attempt()) return;  // leadership lost: on_stopped_leading ran; the elector is done
    milliseconds wait = NextWait();
    std::unique_lock<std::mutex> l(mu_);
    if (cv_.wait_for(l, wait, [this] { return stop_; })) break;
  }
  std::optional<json> body;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (release_on_stop_) body = core_.ReleaseBody(LeaderElectionCore::WallClock::now());
  }
  StatusOr<json> released =
      body.has_value() ? client()->Update(resources::kLeases, config_.lease_namespace, *body)
                       : StatusOr<json>(Cancelled("not released"));
  std::lock_guard<std::mutex> l(mu_);
  if (released.ok()) core_.OnReleased(*released, LeaderElectionCore::Clock::now());
  core_.Resign();  // stopped: no longer renewing, so no longer leading
}

}  // namespace kinfer::kube
