// LatencyWindow: windowed quantiles (P50/P95/P99 time to first token) over the last `window` of
// samples, for the degrade policy's SLO rule and for `/stats`.
//
// Contract:
//  * Samples are latencies in seconds. Record(v, now) counts v in the bucket holding `now`;
//    buckets are `bucket_width` wide and aligned to multiples of it on the steady clock. A sample
//    is visible while its bucket is one of the newest window / bucket_width buckets, i.e. for
//    between (window - bucket_width) and window after it was recorded.
//  * Each bucket is a fixed log-spaced histogram (DDSketch-style). Bin i > 0 covers
//    (min_value * g^(i-1), min_value * g^i] with g = (1 + a) / (1 - a), a = relative_accuracy,
//    and answers 2 * min_value * g^i / (1 + g). ERROR BOUND: for q in [0, 1], Quantile(q) returns
//    a value within a relative error of `a` of the nearest-rank quantile of the samples in the
//    window (the sample of rank max(1, ceil(q * n)) in sorted order), provided that sample lies in
//    [min_value, max_value]. Samples below min_value (including 0) count as min_value; samples
//    above max_value count as max_value; negative or non-finite samples are dropped (dropped()).
//  * Cost: Record is O(1); each elapsed bucket costs O(bins) to evict, whatever the traffic, and an
//    idle gap of a whole window clears everything in one pass; Quantile is O(bins). Memory is
//    buckets * bins 32-bit counters plus bins 64-bit totals, fixed at construction: about 200 KB
//    for the defaults (60 x 1 s buckets, 1% accuracy, 100 us .. 1000 s => 807 bins).
//
// Thread safety: NOT thread-safe; no threads or clocks inside. The owner (one sidecar worker, or a
// mutex it holds) serialises every call, including the const-looking readers, which roll the
// window forward to `now`.
//
// Time: REQUIRES `now` never decreases across calls. An earlier `now` is treated as the latest one
// seen (its sample goes into the newest bucket).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/status.h"

namespace kinfer {

struct LatencyWindowConfig {
  using Duration = std::chrono::steady_clock::duration;

  // Whole multiple of bucket_width; window / bucket_width in [1, kMaxBuckets].
  Duration window = std::chrono::seconds(60);
  Duration bucket_width = std::chrono::seconds(1);  // > 0
  double relative_accuracy = 0.01;                  // a in (0, 0.5]
  double min_value = 1e-4;                          // seconds, > 0
  double max_value = 1e3;                           // seconds, > min_value
  static constexpr int64_t kMaxBuckets = 3600;
  static constexpr int64_t kMaxBins = 1 << 16;

  // OK, or INVALID_ARGUMENT whose message names the first offending field (including a range and
  // accuracy that would need more than kMaxBins bins).
  [[nodiscard]] Status Validate() const;
};

class LatencyWindow {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  // P50/P95/P99 of one window, for `/stats`. The quantiles are nullopt when count == 0.
  struct Summary {
    uint64_t count = 0;
    std::optional<double> p50;
    std::optional<double> p95;
    std::optional<double> p99;
  };

  // REQUIRES: config.Validate().ok(); see Create(). Starts empty.
  explicit LatencyWindow(const LatencyWindowConfig& config = {});
  static StatusOr<LatencyWindow> Create(const LatencyWindowConfig& config);

  // Counts one latency of `seconds` at `now` (clamped into [min_value, max_value]); a negative,
  // NaN or infinite value is dropped and counted in dropped().
  void Record(double seconds, TimePoint now);

  // The q-quantile of the samples in the window (see the error bound above); q is clamped into
  // [0, 1]. nullopt when the window holds no sample.
  [[nodiscard]] std::optional<double> Quantile(double q, TimePoint now);

  // Samples in the window.
  [[nodiscard]] uint64_t Count(TimePoint now);

  [[nodiscard]] Summary Summarize(TimePoint now);

  [[nodiscard]] uint64_t dropped() const { return dropped_; }
  [[nodiscard]] int num_bins() const { return num_bins_; }
  [[nodiscard]] double relative_accuracy() const { return config_.relative_accuracy; }

 private:
  struct Bucket {
    uint64_t count = 0;
    std::vector<uint32_t> bins;
  };

  void Advance(TimePoint now);  // evicts the buckets that fell out of the window
  void Clear();
  Bucket& BucketAt(int64_t number);  // ring slot of bucket `number`
  int BinOf(double v) const;
  double UpperEdge(int bin) const;       // min_value * g^bin
  double Representative(int bin) const;  // value answered for a sample in `bin`
  [[nodiscard]] std::optional<double> QuantileOfTotals(double q) const;

  LatencyWindowConfig config_;
  double log_gamma_;
  int num_bins_;
  int64_t width_ticks_;
  std::vector<Bucket> buckets_;   // ring indexed by bucket number mod size
  std::vector<uint64_t> totals_;  // sum of buckets_[*].bins
  uint64_t total_count_ = 0;
  bool started_ = false;
  int64_t current_bucket_ = 0;  // number of the newest bucket, when started_
  uint64_t dropped_ = 0;
};

}  // namespace kinfer
