#include "tests/sidecar/fake_upstream/fake_state.h"

#include <algorithm>
#include <utility>

namespace kinfer::fake {

FakeState::FakeState(GlobalKnobs defaults, std::vector<std::string> models)
    : defaults_(defaults), models_(std::move(models)), knobs_(defaults) {}

GlobalKnobs FakeState::Knobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return knobs_;
}

Status FakeState::MergeControl(const nlohmann::json& body) {
  std::vector<std::function<void()>> grants;
  {
    std::lock_guard<std::mutex> lock(mu_);
    KINFER_RETURN_IF_ERROR(MergeControlJson(body, knobs_));
    grants = AdmitLocked();
  }
  for (auto& g : grants) g();
  return Status::Ok();
}

void FakeState::Reset() {
  std::vector<std::function<void()>> grants;
  {
    std::lock_guard<std::mutex> lock(mu_);
    knobs_ = defaults_;
    requests_ = completed_ = cancelled_ = aborted_ = 0;
    by_path_.clear();
    by_status_.clear();
    max_in_flight_ = in_flight_;
    last_request_ = nullptr;
    grants = AdmitLocked();
  }
  for (auto& g : grants) g();
}

bool FakeState::TakeFailFirst() {
  std::lock_guard<std::mutex> lock(mu_);
  if (knobs_.fail_first <= 0) return false;
  --knobs_.fail_first;
  return true;
}

bool FakeState::HasModel(std::string_view name) const {
  return std::find(models_.begin(), models_.end(), name) != models_.end();
}

std::string FakeState::PathKey(std::string_view path) {
  static constexpr std::string_view kKnown[] = {
      "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/ready", "/metrics"};
  for (std::string_view k : kKnown) {
    if (path == k) return std::string(k);
  }
  return "other";
}

uint64_t FakeState::OnRequestStart(std::string_view path) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_;
  ++by_path_[PathKey(path)];
  ++in_flight_;
  max_in_flight_ = std::max(max_in_flight_, in_flight_);
  return ++next_id_;
}

void FakeState::OnRequestEnd(Outcome outcome, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_flight_ > 0) --in_flight_;
  switch (outcome) {
    case Outcome::kCompleted:
      ++completed_;
      ++by_status_[status];
      break;
    case Outcome::kCancelled:
      ++cancelled_;
      break;
    case Outcome::kAborted:
      ++aborted_;
      break;
  }
}

void FakeState::SetLastRequest(nlohmann::json request) {
  std::lock_guard<std::mutex> lock(mu_);
  last_request_ = std::move(request);
}

nlohmann::json FakeState::StatsJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json by_status = nlohmann::json::object();
  for (const auto& [code, n] : by_status_) by_status[std::to_string(code)] = n;
  return {
      {"requests", requests_},
      {"by_path", by_path_},
      {"by_status", std::move(by_status)},
      {"in_flight", in_flight_},
      {"max_in_flight", max_in_flight_},
      {"waiting", waiting_},
      {"in_service", in_service_},
      {"completed", completed_},
      {"cancelled", cancelled_},
      {"aborted", aborted_},
      {"capacity", knobs_.capacity},
      {"fail_first_left", knobs_.fail_first},
      {"last_request", last_request_},
  };
}

std::string FakeState::MetricsText() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out += "# HELP fake_upstream_requests_total Requests received (all paths but /control).\n";
  out += "# TYPE fake_upstream_requests_total counter\n";
  out += "fake_upstream_requests_total " + std::to_string(requests_) + "\n";
  out += "# HELP fake_upstream_in_flight Requests being served, including those waiting.\n";
  out += "# TYPE fake_upstream_in_flight gauge\n";
  out += "fake_upstream_in_flight " + std::to_string(in_flight_) + "\n";
  return out;
}

bool FakeState::Acquire(const std::shared_ptr<CapacityWaiter>& waiter) {
  std::lock_guard<std::mutex> lock(mu_);
  if (knobs_.capacity == 0 ||
      (waiting_ == 0 && in_service_ < static_cast<uint64_t>(knobs_.capacity))) {
    ++in_service_;
    return true;
  }
  waiter->state = CapacityWaiter::State::kQueued;
  waiters_.push_back(waiter);
  ++waiting_;
  return false;
}

void FakeState::Release() {
  std::vector<std::function<void()>> grants;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (in_service_ > 0) --in_service_;
    grants = AdmitLocked();
  }
  for (auto& g : grants) g();
}

void FakeState::Abandon(const std::shared_ptr<CapacityWaiter>& waiter) {
  bool release = false;
  std::function<void()> dropped;  // destroyed after unlocking: it may own the last session ref
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiter->state == CapacityWaiter::State::kQueued) {
      waiter->state = CapacityWaiter::State::kAbandoned;
      dropped = std::move(waiter->grant);
      --waiting_;
      // Keep the queue bounded by the live waiters when many give up behind a stuck head.
      if (waiters_.size() > 2 * waiting_ + 64) {
        std::erase_if(waiters_, [](const std::shared_ptr<CapacityWaiter>& w) {
          return w->state == CapacityWaiter::State::kAbandoned;
        });
      }
    } else if (waiter->state == CapacityWaiter::State::kGranted) {
      waiter->state = CapacityWaiter::State::kAbandoned;
      release = true;
    }
  }
  if (release) Release();
}

std::vector<std::function<void()>> FakeState::AdmitLocked() {
  std::vector<std::function<void()>> grants;
  while (!waiters_.empty()) {
    if (waiters_.front()->state == CapacityWaiter::State::kAbandoned) {
      waiters_.pop_front();
      continue;
    }
    if (knobs_.capacity != 0 && in_service_ >= static_cast<uint64_t>(knobs_.capacity)) break;
    std::shared_ptr<CapacityWaiter> w = std::move(waiters_.front());
    waiters_.pop_front();
    w->state = CapacityWaiter::State::kGranted;
    --waiting_;
    ++in_service_;
    grants.push_back(std::move(w->grant));
  }
  return grants;
}

}  // namespace kinfer::fake
