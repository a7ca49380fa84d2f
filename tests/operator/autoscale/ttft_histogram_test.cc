// Tests for TtftHistogram and HistogramQuantile: quantiles against values computed by hand with
// Prometheus' histogram_quantile rules, and merging histograms whose edges differ.
#include "operator/autoscale/ttft_histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace kinfer::autoscale {
namespace {

// Edges 1, 2, 4 s; 10 observations in (0,1], 20 in (1,2], 10 in (2,4], none above.
const std::vector<double> kEdges = {1, 2, 4};
const std::vector<double> kCounts = {10, 20, 10, 0};

TEST(HistogramQuantileTest, InterpolatesLinearlyInsideTheBucket) {
  // rank = q * 40; cumulative counts 10, 30, 40, 40.
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.5, kEdges, kCounts), 1.5);    // rank 20: 1 + 1 * 10/20
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.99, kEdges, kCounts), 3.92);  // rank 39.6: 2 + 2 * 9.6/10
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.25, kEdges, kCounts), 1.0);   // rank 10: top of (0,1]
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.1, kEdges, kCounts), 0.4);    // rank 4: 0 + 1 * 4/10
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.75, kEdges, kCounts), 2.0);   // rank 30: top of (1,2]
}

TEST(HistogramQuantileTest, ClampsQAndAnswersTheFirstNonEmptyBucketForZero) {
  EXPECT_DOUBLE_EQ(*HistogramQuantile(1.5, kEdges, kCounts), 4.0);  // as q = 1
  EXPECT_DOUBLE_EQ(*HistogramQuantile(1.0, kEdges, kCounts), 4.0);
  const std::vector<double> late = {0, 20, 10, 0};
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.0, kEdges, late), 1.0);   // lower edge of (1,2]
  EXPECT_DOUBLE_EQ(*HistogramQuantile(-1.0, kEdges, late), 1.0);  // as q = 0
}

TEST(HistogramQuantileTest, RankInInfBucketAnswersTheHighestFiniteEdge) {
  // 98 of 100 observations above 2 s: the P99 is "more than 2 s", answered as 2 (a lower bound).
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.99, {1, 2}, {1, 1, 98}), 2.0);
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.01, {1, 2}, {1, 1, 98}), 1.0);
}

TEST(HistogramQuantileTest, FirstEdgeAtOrBelowZeroAnswersTheEdge) {
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.25, {0, 1}, {5, 5, 0}), 0.0);
  EXPECT_DOUBLE_EQ(*HistogramQuantile(0.75, {0, 1}, {5, 5, 0}), 0.5);  // rank 7.5 in (0,1]
}

TEST(HistogramQuantileTest, NoAnswerWithoutDataOrForMalformedInput) {
  EXPECT_FALSE(HistogramQuantile(0.5, kEdges, {0, 0, 0, 0}));
  EXPECT_FALSE(HistogramQuantile(0.5, {}, {5}));            // only +Inf: nothing finite
  EXPECT_FALSE(HistogramQuantile(0.5, kEdges, {1, 2, 3}));  // one count short
  EXPECT_FALSE(HistogramQuantile(0.5, {2, 1}, {1, 1, 1}));  // edges not increasing
  EXPECT_FALSE(HistogramQuantile(std::nan(""), kEdges, kCounts));
  EXPECT_FALSE(HistogramQuantile(0.5, {1, std::numeric_limits<double>::infinity()}, {1, 1, 1}));
}

TEST(TtftHistogramTest, SameEdgesAddCountByCount) {
  TtftHistogram h;
  EXPECT_TRUE(h.empty());
  EXPECT_FALSE(h.Quantile(0.99));
  ASSERT_TRUE(h.Add(kEdges, std::vector<uint64_t>{10, 20, 10, 0}));
  ASSERT_TRUE(h.Add(kEdges, std::vector<uint64_t>{10, 20, 10, 0}));
  EXPECT_EQ(h.upper_bounds(), kEdges);
  EXPECT_EQ(h.counts(), (std::vector<double>{20, 40, 20, 0}));
  EXPECT_DOUBLE_EQ(h.total(), 80);
  // Doubling every count leaves the quantiles where they were.
  EXPECT_DOUBLE_EQ(*h.Quantile(0.99), 3.92);
  EXPECT_DOUBLE_EQ(*h.Quantile(0.5), 1.5);
}

TEST(TtftHistogramTest, DifferentEdgesMergeOntoTheUnionInProportionToWidth) {
  // A: edges 1, 2 with 4 in (0,1], 4 in (1,2], 2 above.
  // B: edges 1.5, 2, 3 with 3 in (0,1.5], 3 in (1.5,2], 3 in (2,3], 1 above.
  // Union 1, 1.5, 2, 3. A's (1,2] splits 2 + 2 over (1,1.5] and (1.5,2]; B's (0,1.5] splits
  // 2 + 1 over (0,1] and (1,1.5]. Merged: 6, 3, 5, 3 and 3 above.
  const std::vector<double> a_edges = {1, 2};
  const std::vector<uint64_t> a_counts = {4, 4, 2};
  const std::vector<double> b_edges = {1.5, 2, 3};
  const std::vector<uint64_t> b_counts = {3, 3, 3, 1};
  TtftHistogram ab;
  ASSERT_TRUE(ab.Add(a_edges, a_counts));
  ASSERT_TRUE(ab.Add(b_edges, b_counts));
  const std::vector<double> union_edges = {1, 1.5, 2, 3};
  EXPECT_EQ(ab.upper_bounds(), union_edges);
  const std::vector<double> expected = {6, 3, 5, 3, 3};
  ASSERT_EQ(ab.counts().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(ab.counts()[i], expected[i], 1e-12);
  EXPECT_DOUBLE_EQ(ab.total(), 20);
  // Cumulative 6, 9, 14, 17, 20.
  EXPECT_NEAR(*ab.Quantile(0.5), 1.6, 1e-12);          // rank 10: 1.5 + 0.5 * 1/5
  EXPECT_NEAR(*ab.Quantile(0.8), 2 + 2.0 / 3, 1e-12);  // rank 16: 2 + 1 * 2/3
  EXPECT_DOUBLE_EQ(*ab.Quantile(0.9), 3.0);            // rank 18: above 3

  // The order of the merge does not matter.
  TtftHistogram ba;
  ASSERT_TRUE(ba.Add(b_edges, b_counts));
  ASSERT_TRUE(ba.Add(a_edges, a_counts));
  EXPECT_EQ(ba.upper_bounds(), union_edges);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(ba.counts()[i], expected[i], 1e-12);

  // Merging merged histograms too.
  TtftHistogram all;
  all.Add(ab);
  all.Add(ba);
  EXPECT_DOUBLE_EQ(all.total(), 40);
  EXPECT_NEAR(*all.Quantile(0.5), 1.6, 1e-12);
}

TEST(TtftHistogramTest, MalformedInputIsRefusedAndChangesNothing) {
  TtftHistogram h;
  ASSERT_TRUE(h.Add(kEdges, std::vector<uint64_t>{10, 20, 10, 0}));
  EXPECT_FALSE(h.Add({2, 1}, std::vector<uint64_t>{1, 1, 1}));
  EXPECT_FALSE(h.Add(kEdges, std::vector<uint64_t>{1, 1}));
  EXPECT_FALSE(h.Add({1, std::nan("")}, std::vector<uint64_t>{1, 1, 1}));
  EXPECT_FALSE(h.Add({1, 2}, std::vector<double>{1, -1, 1}));
  EXPECT_EQ(h.upper_bounds(), kEdges);
  EXPECT_DOUBLE_EQ(h.total(), 40);
  // A pod with no requests (no edges, no counts) or all zeros is fine and adds nothing.
  EXPECT_TRUE(h.Add({}, std::vector<uint64_t>{}));
  EXPECT_TRUE(h.Add({0.5, 5}, std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(h.upper_bounds(), kEdges);
  EXPECT_DOUBLE_EQ(h.total(), 40);
}

}  // namespace
}  // namespace kinfer::autoscale
