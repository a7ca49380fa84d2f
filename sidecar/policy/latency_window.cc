#include "sidecar/policy/latency_window.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kinfer {

namespace {

// Floor division for bucket numbers (the epoch of steady_clock is unspecified; be safe below 0).
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Status LatencyWindowConfig::Validate() const {
  if (bucket_width <= Duration::zero()) return InvalidArgument("bucket_width: must be > 0");
  if (window <= Duration::zero() || window % bucket_width != Duration::zero()) {
    return InvalidArgument("window: must be a positive whole multiple of bucket_width");
  }
  const int64_t buckets = window / bucket_width;
  if (buckets > kMaxBuckets) {
    return InvalidArgument("window: at most " + std::to_string(kMaxBuckets) + " buckets, got " +
                           std::to_string(buckets));
  }
  if (!(relative_accuracy > 0.0 && relative_accuracy <= 0.5)) {
    return InvalidArgument("relative_accuracy: must be in (0, 0.5]");
  }
  if (!(min_value > 0.0) || !std::isfinite(min_value)) {
    return InvalidArgument("min_value: must be finite and > 0");
  }
  if (!(max_value > min_value) || !std::isfinite(max_value)) {
    return InvalidArgument("max_value: must be finite and > min_value");
  }
  const double g = (1.0 + relative_accuracy) / (1.0 - relative_accuracy);
  const double bins = std::ceil(std::log(max_value / min_value) / std::log(g)) + 1.0;
  if (bins > static_cast<double>(kMaxBins)) {
    return InvalidArgument("relative_accuracy: needs more than " + std::to_string(kMaxBins) +
                           " bins for [min_value, max_value]");
  }
  return Status::Ok();
}

LatencyWindow::LatencyWindow(const LatencyWindowConfig& config)
    : config_(config),
      log_gamma_(std::log((1.0 + config.relative_accuracy) / (1.0 - config.relative_accuracy))),
      num_bins_(static_cast<int>(
          std::ceil(std::log(config.max_value / config.min_value) / log_gamma_) + 1.0)),
      width_ticks_(config.bucket_width.count()),
      buckets_(static_cast<size_t>(config.window / config.bucket_width)),
      totals_(static_cast<size_t>(num_bins_), 0) {
  for (Bucket& b : buckets_) b.bins.assign(static_cast<size_t>(num_bins_), 0);
}

StatusOr<LatencyWindow> LatencyWindow::Create(const LatencyWindowConfig& config) {
  KINFER_RETURN_IF_ERROR(config.Validate());
  return LatencyWindow(config);
}

double LatencyWindow::UpperEdge(int bin) const {
  return config_.min_value * std::exp(static_cast<double>(bin) * log_gamma_);
}

double LatencyWindow::Representative(int bin) const {
  if (bin == 0) return config_.min_value;
  const double g = std::exp(log_gamma_);
  return 2.0 * UpperEdge(bin) / (1.0 + g);
}

int LatencyWindow::BinOf(double v) const {
  if (v <= config_.min_value) return 0;
  int bin = static_cast<int>(std::ceil(std::log(v / config_.min_value) / log_gamma_));
  bin = std::clamp(bin, 1, num_bins_ - 1);
  // Correct log() rounding so that v really lies in (UpperEdge(bin - 1), UpperEdge(bin)], the
  // interval Representative() assumes.
  while (bin > 1 && v <= UpperEdge(bin - 1)) --bin;
  while (bin < num_bins_ - 1 && v > UpperEdge(bin)) ++bin;
  return bin;
}

LatencyWindow::Bucket& LatencyWindow::BucketAt(int64_t number) {
  const auto size = static_cast<int64_t>(buckets_.size());
  return buckets_[static_cast<size_t>(number - FloorDiv(number, size) * size)];
}

void LatencyWindow::Clear() {
  for (Bucket& b : buckets_) {
    if (b.count == 0) continue;
    std::fill(b.bins.begin(), b.bins.end(), 0);
    b.count = 0;
  }
  std::fill(totals_.begin(), totals_.end(), 0);
  total_count_ = 0;
}

void LatencyWindow::Advance(TimePoint now) {
  const int64_t bucket = FloorDiv(now.time_since_epoch().count(), width_ticks_);
  const auto size = static_cast<int64_t>(buckets_.size());
  if (!started_) {
    started_ = true;
    current_bucket_ = bucket;
    return;
  }
  if (bucket <= current_bucket_) return;   // same bucket, or time ran backwards (clamped)
  if (bucket - current_bucket_ >= size) {  // idle for a whole window
    Clear();
    current_bucket_ = bucket;
    return;
  }
  while (current_bucket_ < bucket) {
    ++current_bucket_;
    Bucket& b = BucketAt(current_bucket_);
    if (b.count == 0) continue;
    for (int i = 0; i < num_bins_; ++i) {
      totals_[static_cast<size_t>(i)] -= b.bins[static_cast<size_t>(i)];
    }
    std::fill(b.bins.begin(), b.bins.end(), 0);
    total_count_ -= b.count;
    b.count = 0;
  }
}

void LatencyWindow::Record(double seconds, TimePoint now) {
  Advance(now);
  if (!std::isfinite(seconds) || seconds < 0.0) {
    ++dropped_;
    return;
  }
  Bucket& b = BucketAt(current_bucket_);
  const auto bin = static_cast<size_t>(BinOf(std::min(seconds, config_.max_value)));
  ++b.bins[bin];
  ++b.count;
  ++totals_[bin];
  ++total_count_;
}

std::optional<double> LatencyWindow::QuantileOfTotals(double q) const {
  if (total_count_ == 0) return std::nullopt;
  if (std::isnan(q)) q = 0.0;
  q = std::clamp(q, 0.0, 1.0);
  // Nearest rank: the smallest sample with at least ceil(q * n) samples at or below it.
  auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total_count_)));
  rank = std::clamp<uint64_t>(rank, 1, total_count_);
  uint64_t seen = 0;
  for (int i = 0; i < num_bins_; ++i) {
    seen += totals_[static_cast<size_t>(i)];
    if (seen >= rank) return Representative(i);
  }
  return Representative(num_bins_ - 1);  // unreachable: totals_ sum to total_count_
}

std::optional<double> LatencyWindow::Quantile(double q, TimePoint now) {
  Advance(now);
  return QuantileOfTotals(q);
}

uint64_t LatencyWindow::Count(TimePoint now) {
  Advance(now);
  return total_count_;
}

LatencyWindow::Summary LatencyWindow::Summarize(TimePoint now) {
  Advance(now);
  return {total_count_, QuantileOfTotals(0.50), QuantileOfTotals(0.95), QuantileOfTotals(0.99)};
}

}  // namespace kinfer
