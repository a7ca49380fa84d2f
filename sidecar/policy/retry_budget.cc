#include "sidecar/policy/retry_budget.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <ratio>
#include <string>

namespace kinfer {
namespace {

// The window is checked to tile into whole nanoseconds; the clock must resolve them.
static_assert(std::ratio_less_equal_v<RetryBudget::Clock::period, std::nano>,
              "RetryBudget needs a steady_clock of nanosecond resolution or finer");

int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// ceil(per_second * window_seconds), in integers (0.1 s * 30/s must be 3, not 4), saturated.
uint64_t FloorRetries(int per_second, std::chrono::nanoseconds window) {
  constexpr uint64_t kNanosPerSecond = 1'000'000'000;
  const auto rate = static_cast<uint64_t>(per_second);
  const auto ns = static_cast<uint64_t>(window.count());  // Validate: > 0
  const uint64_t whole_seconds = ns / kNanosPerSecond;
  const uint64_t rest_ns = ns % kNanosPerSecond;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (rate != 0 && whole_seconds > (kMax - rate) / rate) return kMax;
  // rate * rest_ns < 2^31 * 10^9 fits; the sum cannot overflow after the check above.
  return rate * whole_seconds + (rate * rest_ns + kNanosPerSecond - 1) / kNanosPerSecond;
}

}  // namespace

Status RetryBudgetConfig::Validate() const {
  if (!(budget_percent >= 0.0 && budget_percent <= 100.0)) {
    return InvalidArgument("budget_percent must be in [0, 100]");
  }
  if (min_retries_per_second < 0) return InvalidArgument("min_retries_per_second must be >= 0");
  if (window <= std::chrono::nanoseconds::zero() || window.count() % kNumBuckets != 0) {
    return InvalidArgument("window must be > 0 and a whole multiple of " +
                           std::to_string(kNumBuckets) + " ns");
  }
  return Status::Ok();
}

RetryBudget::RetryBudget(const RetryBudgetConfig& config)
    : config_(config),
      width_ticks_(std::chrono::duration_cast<Clock::duration>(config.window /
                                                               RetryBudgetConfig::kNumBuckets)
                       .count()),
      floor_retries_(FloorRetries(config.min_retries_per_second, config.window)) {
  assert(config_.Validate().ok());
  width_ticks_ = std::max<int64_t>(width_ticks_, 1);  // only reachable with an invalid config
}

StatusOr<RetryBudget> RetryBudget::Create(const RetryBudgetConfig& config) {
  KINFER_RETURN_IF_ERROR(config.Validate());
  return RetryBudget(config);
}

RetryBudget::Bucket& RetryBudget::Current() {
  const auto size = static_cast<int64_t>(buckets_.size());
  return buckets_[static_cast<size_t>(((current_bucket_ % size) + size) % size)];
}

void RetryBudget::Advance(TimePoint now) {
  const int64_t bucket = FloorDiv(now.time_since_epoch().count(), width_ticks_);
  if (!started_) {
    started_ = true;
    current_bucket_ = bucket;
    return;
  }
  if (bucket <= current_bucket_) return;  // same bucket, or time ran backwards (clamped)
  if (bucket - current_bucket_ >= static_cast<int64_t>(buckets_.size())) {
    // Idle for a whole window: everything has aged out.
    buckets_.fill(Bucket{});
    window_requests_ = 0;
    window_retries_ = 0;
    current_bucket_ = bucket;
    return;
  }
  while (current_bucket_ < bucket) {
    ++current_bucket_;
    Bucket& b = Current();  // the oldest bucket, reused as the newest
    window_requests_ -= b.requests;
    window_retries_ -= b.retries;
    b = Bucket{};
  }
}

uint64_t RetryBudget::CapOfWindow() const {
  // The 1e-9 absorbs rounding in the product (e.g. 0.1 % of 1000 requests is exactly 1 retry).
  const double budget =
      std::floor(config_.budget_percent * static_cast<double>(window_requests_) / 100.0 + 1e-9);
  return std::max(static_cast<uint64_t>(budget), floor_retries_);
}

void RetryBudget::OnRequest(TimePoint now) {
  Advance(now);
  ++Current().requests;
  ++window_requests_;
  ++stats_.requests;
}

bool RetryBudget::TryRetry(TimePoint now) {
  Advance(now);
  if (window_retries_ >= CapOfWindow()) {
    ++stats_.retries_denied;
    return false;
  }
  ++Current().retries;
  ++window_retries_;
  ++stats_.retries_allowed;
  return true;
}

uint64_t RetryBudget::RequestsInWindow(TimePoint now) {
  Advance(now);
  return window_requests_;
}

uint64_t RetryBudget::RetriesInWindow(TimePoint now) {
  Advance(now);
  return window_retries_;
}

uint64_t RetryBudget::Cap(TimePoint now) {
  Advance(now);
  return CapOfWindow();
}

}  // namespace kinfer
