// Tests of PodSampler with hand-built sidecar pages: gauges summed over classes, TTFT deltas,
// counter resets, failed scrapes, and pods that come and go.
#include "operator/autoscale/pod_sampler.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kinfer::autoscale {
namespace {

using Counts = std::vector<uint64_t>;

// A sidecar page with edges 0.1, 0.5, 1 and two classes; `high` and `low` are cumulative bucket
// counts for 0.1, 0.5, 1, +Inf.
std::string Page(double depth_high, double depth_low, double in_flight, const Counts& high,
                 const Counts& low) {
  const char* les[] = {"0.1", "0.5", "1", "+Inf"};
  std::string p = "# TYPE kinfer_sidecar_queue_depth gauge\n";
  p += "kinfer_sidecar_queue_depth{class=\"high\"} " + std::to_string(depth_high) + "\n";
  p += "kinfer_sidecar_queue_depth{class=\"low\"} " + std::to_string(depth_low) + "\n";
  p += "# TYPE kinfer_sidecar_in_flight gauge\nkinfer_sidecar_in_flight " +
       std::to_string(in_flight) + "\n";
  p += "# TYPE kinfer_sidecar_time_to_first_token_seconds histogram\n";
  for (auto [name, counts] : {std::pair{"high", &high}, std::pair{"low", &low}}) {
    for (size_t i = 0; i < 4; ++i) {
      p += std::string("kinfer_sidecar_time_to_first_token_seconds_bucket{class=\"") + name +
           "\",le=\"" + les[i] + "\"} " + std::to_string((*counts)[i]) + "\n";
    }
    p += std::string("kinfer_sidecar_time_to_first_token_seconds_count{class=\"") + name + "\"} " +
         std::to_string(counts->back()) + "\n";
  }
  return p;
}

PodScrape Ok(const std::string& pod, std::string body) {
  return PodScrape{pod, true, Status(), std::move(body)};
}
PodScrape Failed(const std::string& pod) {
  return PodScrape{pod, true, Unavailable("timeout"), ""};
}

const std::vector<double> kEdges = {0.1, 0.5, 1};

TEST(PodSamplerTest, FirstScrapeIsTheBaselineAndGaugesAreSummed) {
  PodSampler sampler;
  auto samples = sampler.Sample({Ok("a", Page(2, 3, 4, {1, 2, 3, 4}, {0, 0, 0, 1}))});
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].pod, "a");
  EXPECT_TRUE(samples[0].ready);
  EXPECT_TRUE(samples[0].has_metrics);
  EXPECT_EQ(samples[0].queue_depth, 5);
  EXPECT_EQ(samples[0].in_flight, 4);
  EXPECT_TRUE(samples[0].ttft_counts.empty());
  EXPECT_TRUE(samples[0].ttft_upper_bounds.empty());
}

TEST(PodSamplerTest, DeltasAreNonCumulativeAndSummedOverClasses) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", Page(0, 0, 0, {1, 2, 3, 4}, {0, 0, 0, 1}))});
  // high: +1 in (0.1,0.5], +2 in +Inf; low: +3 in <=0.1.
  auto s = sampler.Sample({Ok("a", Page(0, 0, 1, {1, 3, 4, 7}, {3, 3, 3, 4}))});
  EXPECT_EQ(s[0].ttft_upper_bounds, kEdges);
  EXPECT_EQ(s[0].ttft_counts, (Counts{3, 1, 0, 2}));
  // No traffic: an empty histogram.
  s = sampler.Sample({Ok("a", Page(0, 0, 0, {1, 3, 4, 7}, {3, 3, 3, 4}))});
  EXPECT_TRUE(s[0].has_metrics);
  EXPECT_TRUE(s[0].ttft_counts.empty());
}

TEST(PodSamplerTest, CounterResetTakesTheNewCountsAsTheDelta) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", Page(0, 0, 0, {10, 20, 30, 40}, {0, 0, 0, 0}))});
  auto s = sampler.Sample({Ok("a", Page(0, 0, 0, {1, 1, 2, 2}, {0, 0, 0, 1}))});
  EXPECT_EQ(s[0].ttft_counts, (Counts{1, 0, 1, 1}));
  s = sampler.Sample({Ok("a", Page(0, 0, 0, {2, 2, 3, 3}, {0, 0, 0, 1}))});
  EXPECT_EQ(s[0].ttft_counts, (Counts{1, 0, 0, 0}));
}

TEST(PodSamplerTest, ChangedEdgesCountAsAReset) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", Page(0, 0, 0, {1, 1, 1, 1}, {0, 0, 0, 0}))});
  std::string other =
      "kinfer_sidecar_in_flight 0\n"
      "kinfer_sidecar_time_to_first_token_seconds_bucket{class=\"high\",le=\"0.2\"} 2\n"
      "kinfer_sidecar_time_to_first_token_seconds_bucket{class=\"high\",le=\"+Inf\"} 3\n";
  auto s = sampler.Sample({Ok("a", other)});
  EXPECT_EQ(s[0].ttft_upper_bounds, (std::vector<double>{0.2}));
  EXPECT_EQ(s[0].ttft_counts, (Counts{2, 1}));
}

// The autoscaler fills a silent pod's share in (or freezes the tick): what the pod observed
// meanwhile must not arrive on top when it answers again. Its next page is a new baseline.
TEST(PodSamplerTest, AFailedScrapeStartsANewBaselineSoNothingIsCountedTwice) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", Page(0, 0, 0, {0, 0, 0, 0}, {0, 0, 0, 0}))});
  auto s = sampler.Sample({Failed("a")});
  EXPECT_FALSE(s[0].has_metrics);
  EXPECT_TRUE(s[0].ready);
  s = sampler.Sample({Ok("a", Page(0, 0, 0, {2, 2, 2, 2}, {0, 0, 1, 1}))});
  EXPECT_TRUE(s[0].has_metrics);
  EXPECT_TRUE(s[0].ttft_counts.empty());  // the baseline: the missed interval is not delivered
  s = sampler.Sample({Ok("a", Page(0, 0, 0, {3, 3, 3, 3}, {0, 0, 1, 1}))});
  EXPECT_EQ(s[0].ttft_counts, (Counts{1, 0, 0, 0}));
  for (const char* bad : {"not a page {", "some_other_metric 1\n"}) {  // not a sidecar's page
    s = sampler.Sample({Ok("a", bad)});
    EXPECT_FALSE(s[0].has_metrics) << bad;
    s = sampler.Sample({Ok("a", Page(0, 0, 0, {9, 9, 9, 9}, {0, 0, 1, 1}))});
    EXPECT_TRUE(s[0].ttft_counts.empty()) << bad;
  }
}

TEST(PodSamplerTest, MalformedHistogramKeepsGaugesAndBaseline) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", Page(0, 0, 0, {1, 1, 1, 1}, {0, 0, 0, 0}))});
  // Cumulative counts decreasing with le.
  auto s = sampler.Sample({Ok("a", Page(1, 1, 2, {5, 1, 1, 1}, {0, 0, 0, 0}))});
  EXPECT_TRUE(s[0].has_metrics);
  EXPECT_EQ(s[0].queue_depth, 2);
  EXPECT_TRUE(s[0].ttft_counts.empty());
  s = sampler.Sample({Ok("a", Page(0, 0, 0, {1, 2, 2, 2}, {0, 0, 0, 0}))});
  EXPECT_EQ(s[0].ttft_counts, (Counts{0, 1, 0, 0}));
}

TEST(PodSamplerTest, PodsComeAndGo) {
  PodSampler sampler;
  std::string zero = Page(0, 0, 0, {0, 0, 0, 0}, {0, 0, 0, 0});
  std::string one = Page(0, 0, 0, {1, 1, 1, 1}, {0, 0, 0, 0});
  (void)sampler.Sample({Ok("a", zero), Ok("b", zero)});
  EXPECT_EQ(sampler.tracked_pods(), 2u);
  auto s = sampler.Sample({Ok("a", one)});  // b deleted
  EXPECT_EQ(sampler.tracked_pods(), 1u);
  EXPECT_EQ(s[0].ttft_counts, (Counts{1, 0, 0, 0}));
  s = sampler.Sample({Ok("a", one), Ok("b", one), Ok("c", one)});  // b back, c new: baselines
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[1].pod, "b");
  EXPECT_TRUE(s[0].ttft_counts.empty());
  EXPECT_TRUE(s[1].ttft_counts.empty());
  EXPECT_TRUE(s[2].ttft_counts.empty());
  s = sampler.Sample(
      {Ok("a", one), Ok("b", one), Ok("c", Page(0, 0, 0, {1, 1, 1, 3}, {0, 0, 0, 0}))});
  EXPECT_TRUE(s[1].ttft_counts.empty());
  EXPECT_EQ(s[2].ttft_counts, (Counts{0, 0, 0, 2}));
}

TEST(PodSamplerTest, HistogramAppearingLaterCountsWhole) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", "kinfer_sidecar_in_flight 0\n")});
  auto s = sampler.Sample({Ok("a", Page(0, 0, 0, {1, 1, 2, 2}, {0, 0, 0, 0}))});
  EXPECT_EQ(s[0].ttft_counts, (Counts{1, 0, 1, 0}));
}

// A histogram of the +Inf bucket alone after a page without one: counted whole, not a crash (the
// empty baseline and it have the same finite edges, none, and its counts were indexed past the
// baseline's empty ones). Any pod with the service's label could send such a page.
TEST(PodSamplerTest, AnInfOnlyHistogramAfterAnEmptyBaselineCountsWhole) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", "kinfer_sidecar_in_flight 1\n")});
  auto s = sampler.Sample({Ok("a", "kinfer_sidecar_in_flight 1\n"
                                   "kinfer_sidecar_time_to_first_token_seconds_bucket"
                                   "{class=\"x\",le=\"+Inf\"} 5\n")});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].ttft_counts, (Counts{5}));
  EXPECT_TRUE(s[0].ttft_upper_bounds.empty());
}

// A page that lacks the series once, with a real baseline kept, does not make the next page
// deliver the sidecar's lifetime counts: the baseline stays.
TEST(PodSamplerTest, APageWithoutTheSeriesKeepsAnExistingBaseline) {
  PodSampler sampler;
  (void)sampler.Sample({Ok("a", Page(0, 0, 0, {100, 100, 100, 100}, {0, 0, 0, 0}))});
  (void)sampler.Sample({Ok("a", "kinfer_sidecar_in_flight 0\n")});
  auto s = sampler.Sample({Ok("a", Page(0, 0, 0, {101, 101, 101, 102}, {0, 0, 0, 0}))});
  EXPECT_EQ(s[0].ttft_counts, (Counts{1, 0, 0, 1}));
}

TEST(ExtractHistogramTest, RefusesMalformedSeries) {
  auto parse = [](const char* text) {
    StatusOr<PromPage> page = ParsePrometheusText(text);
    EXPECT_TRUE(page.ok());
    return ExtractHistogram(*page, "h").status().code();
  };
  EXPECT_EQ(parse("x 1\n"), StatusCode::kNotFound);
  EXPECT_EQ(parse("h_bucket{le=\"1\"} 1\n"), StatusCode::kInvalidArgument);  // no +Inf
  EXPECT_EQ(parse("h_bucket{le=\"x\"} 1\n"), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse("h_bucket{le=\"+Inf\"} -1\n"), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse("h_bucket{le=\"+Inf\"} NaN\n"), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse("h_bucket 1\n"), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse("h_bucket{a=\"1\",le=\"1\"} 1\nh_bucket{a=\"1\",le=\"+Inf\"} 1\n"
                  "h_bucket{a=\"2\",le=\"2\"} 1\nh_bucket{a=\"2\",le=\"+Inf\"} 1\n"),
            StatusCode::kInvalidArgument);
  StatusOr<PromPage> page =
      ParsePrometheusText("h_bucket{le=\"1.0\"} 2\nh_bucket{le=\"+Inf\"} 5\n");
  StatusOr<CumulativeHistogram> h = ExtractHistogram(*page, "h");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->upper_bounds, (std::vector<double>{1.0}));
  EXPECT_EQ(h->counts, (Counts{2, 3}));
}

}  // namespace
}  // namespace kinfer::autoscale
