// Tests for LatencyWindow: quantiles are checked against the nearest-rank quantile of a sorted
// reference within the stated relative error; roll-off and idle gaps run on fabricated time.
#include "sidecar/policy/latency_window.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace kinfer {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;
using TimePoint = LatencyWindow::TimePoint;

// t0 + offset: an arbitrary, non-zero origin aligned to whole seconds.
TimePoint At(std::chrono::nanoseconds offset) { return TimePoint{} + seconds(5000) + offset; }

// Nearest-rank quantile: the sample of rank max(1, ceil(q * n)) in sorted order.
double Reference(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto n = static_cast<double>(v.size());
  auto rank = static_cast<size_t>(std::max(1.0, std::ceil(q * n)));
  return v[std::min(rank, v.size()) - 1];
}

const std::vector<double> kQs = {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0};

void ExpectWithinError(LatencyWindow& w, const std::vector<double>& samples, TimePoint now) {
  ASSERT_EQ(w.Count(now), samples.size());
  const double a = w.relative_accuracy();
  for (double q : kQs) {
    const double ref = Reference(samples, q);
    const std::optional<double> got = w.Quantile(q, now);
    ASSERT_TRUE(got.has_value()) << "q=" << q;
    EXPECT_LE(std::abs(*got - ref), a * ref * (1 + 1e-9)) << "q=" << q << " ref=" << ref;
  }
}

TEST(LatencyWindowTest, EmptyWindowHasNoQuantile) {
  LatencyWindow w;
  EXPECT_EQ(w.Count(At(seconds(0))), 0u);
  EXPECT_FALSE(w.Quantile(0.99, At(seconds(0))).has_value());
  const LatencyWindow::Summary s = w.Summarize(At(seconds(0)));
  EXPECT_EQ(s.count, 0u);
  EXPECT_FALSE(s.p50.has_value());
  EXPECT_FALSE(s.p99.has_value());
}

TEST(LatencyWindowTest, QuantilesMatchSortedReferenceWithinRelativeAccuracy) {
  for (double accuracy : {0.01, 0.05}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      LatencyWindowConfig config;
      config.relative_accuracy = accuracy;
      LatencyWindow w(config);
      std::mt19937 rng(seed);
      std::lognormal_distribution<double> ttft(std::log(0.2), 1.0);  // median 200 ms, long tail
      std::vector<double> samples;
      for (int i = 0; i < 5000; ++i) {
        const double v = std::clamp(ttft(rng), config.min_value, config.max_value);
        samples.push_back(v);
        w.Record(v, At(milliseconds(i * 10)));  // spread over 50 s of one 60 s window
      }
      ExpectWithinError(w, samples, At(seconds(50)));
    }
  }
}

TEST(LatencyWindowTest, QuantilesCoverOnlySamplesStillInTheWindow) {
  LatencyWindowConfig config;
  config.window = seconds(10);
  LatencyWindow w(config);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> ttft(0.01, 5.0);
  std::vector<std::pair<int, double>> all;  // (second recorded, value)
  for (int t = 0; t < 30; ++t) {
    for (int i = 0; i < 100; ++i) {
      const double v = ttft(rng) * (t < 20 ? 1.0 : 0.1);  // the last 10 s are 10x faster
      all.emplace_back(t, v);
      w.Record(v, At(seconds(t) + milliseconds(i)));
    }
  }
  std::vector<double> live;
  for (const auto& [t, v] : all) {
    if (t >= 20) live.push_back(v);
  }
  ExpectWithinError(w, live, At(seconds(29) + milliseconds(500)));
}

TEST(LatencyWindowTest, SamplesRollOffAfterTheWindow) {
  LatencyWindowConfig config;
  config.window = seconds(10);
  LatencyWindow w(config);
  w.Record(1.0, At(seconds(0)));
  w.Record(2.0, At(seconds(5)));
  EXPECT_EQ(w.Count(At(seconds(9) + milliseconds(999))), 2u);
  EXPECT_EQ(w.Count(At(seconds(10))), 1u);  // the bucket of second 0 left the window
  EXPECT_NEAR(*w.Quantile(0.0, At(seconds(10))), 2.0, 2.0 * 0.01);
  EXPECT_EQ(w.Count(At(seconds(14) + milliseconds(999))), 1u);
  EXPECT_EQ(w.Count(At(seconds(15))), 0u);
  EXPECT_FALSE(w.Quantile(0.5, At(seconds(15))).has_value());
}

TEST(LatencyWindowTest, LongIdleGapClearsEverything) {
  LatencyWindow w;  // 60 s window
  for (int i = 0; i < 1000; ++i) w.Record(0.5, At(milliseconds(i)));
  EXPECT_EQ(w.Count(At(seconds(59))), 1000u);
  w.Record(3.0, At(seconds(3600)));  // an hour later
  EXPECT_EQ(w.Count(At(seconds(3600))), 1u);
  EXPECT_NEAR(*w.Quantile(0.5, At(seconds(3600))), 3.0, 3.0 * 0.01);
}

TEST(LatencyWindowTest, ConfigurableBucketWidthRollsOffPerBucket) {
  LatencyWindowConfig config;
  config.window = milliseconds(1000);
  config.bucket_width = milliseconds(250);
  LatencyWindow w(config);
  w.Record(0.1, At(milliseconds(0)));
  w.Record(0.2, At(milliseconds(300)));
  EXPECT_EQ(w.Count(At(milliseconds(999))), 2u);
  EXPECT_EQ(w.Count(At(milliseconds(1000))), 1u);
  EXPECT_EQ(w.Count(At(milliseconds(1250))), 0u);
}

TEST(LatencyWindowTest, OutOfRangeValuesAreClampedAndInvalidOnesDropped) {
  LatencyWindow w;  // [1e-4, 1e3]
  const TimePoint now = At(seconds(0));
  w.Record(0.0, now);
  w.Record(1e6, now);
  w.Record(-1.0, now);
  w.Record(std::numeric_limits<double>::quiet_NaN(), now);
  w.Record(std::numeric_limits<double>::infinity(), now);
  EXPECT_EQ(w.Count(now), 2u);
  EXPECT_EQ(w.dropped(), 3u);
  EXPECT_DOUBLE_EQ(*w.Quantile(0.0, now), 1e-4);
  EXPECT_NEAR(*w.Quantile(1.0, now), 1e3, 1e3 * 0.01);
}

TEST(LatencyWindowTest, EarlierNowCountsInTheNewestBucket) {
  LatencyWindowConfig config;
  config.window = seconds(10);
  LatencyWindow w(config);
  w.Record(1.0, At(seconds(20)));
  w.Record(1.0, At(seconds(0)));  // time ran backwards: treated as second 20
  EXPECT_EQ(w.Count(At(seconds(29))), 2u);
  EXPECT_EQ(w.Count(At(seconds(30))), 0u);
}

TEST(LatencyWindowTest, MemoryIsFixedRegardlessOfTraffic) {
  LatencyWindow w;
  const int bins = w.num_bins();
  EXPECT_EQ(bins, 807);  // the figure quoted in the header
  for (int i = 0; i < 200000; ++i) w.Record(0.001 * (i % 5000 + 1), At(microseconds(i * 100)));
  EXPECT_EQ(w.num_bins(), bins);
  EXPECT_EQ(w.Count(At(seconds(19))), 200000u);
}

TEST(LatencyWindowTest, SummaryReportsP50P95P99) {
  LatencyWindow w;
  std::vector<double> samples;
  for (int i = 1; i <= 1000; ++i) {
    samples.push_back(i * 0.001);
    w.Record(i * 0.001, At(seconds(1)));
  }
  const LatencyWindow::Summary s = w.Summarize(At(seconds(2)));
  EXPECT_EQ(s.count, 1000u);
  EXPECT_NEAR(*s.p50, 0.500, 0.500 * 0.01);
  EXPECT_NEAR(*s.p95, 0.950, 0.950 * 0.01);
  EXPECT_NEAR(*s.p99, 0.990, 0.990 * 0.01);
}

TEST(LatencyWindowTest, ConfigValidateRejectsBadFields) {
  EXPECT_TRUE(LatencyWindowConfig{}.Validate().ok());
  LatencyWindowConfig c;
  c.window = milliseconds(1500);  // not a multiple of 1 s
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.bucket_width = seconds(0);
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.relative_accuracy = 0.0;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.max_value = c.min_value;
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.window = seconds(7200);  // 7200 buckets > kMaxBuckets
  EXPECT_FALSE(c.Validate().ok());
  c = {};
  c.relative_accuracy = 1e-6;  // far too many bins
  EXPECT_FALSE(c.Validate().ok());
  EXPECT_FALSE(LatencyWindow::Create(c).ok());
  EXPECT_TRUE(LatencyWindow::Create(LatencyWindowConfig{}).ok());
}

}  // namespace
}  // namespace kinfer
