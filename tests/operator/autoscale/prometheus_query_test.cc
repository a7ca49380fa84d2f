// Tests of the Prometheus-server metrics source: the PromQL, the query URL, the /api/v1/query
// answer parser, and the PodSamples built from the answers. No live Prometheus.
#include "operator/autoscale/prometheus_query.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kinfer::autoscale {
namespace {

TEST(PrometheusQueryTest, BuildsThePromQl) {
  std::string sel = PromSelector({{"namespace", "ml"}, {"kinfer_service", "ch\"at"}});
  EXPECT_EQ(sel, "namespace=\"ml\",kinfer_service=\"ch\\\"at\"");
  EXPECT_EQ(QueueDepthByPodQuery(""), "sum by (pod) (kinfer_sidecar_queue_depth{})");
  EXPECT_EQ(InFlightByPodQuery("a=\"b\""), "sum by (pod) (kinfer_sidecar_in_flight{a=\"b\"})");
  EXPECT_EQ(TtftQuantileQuery(0.99, "", "1m"),
            "histogram_quantile(0.99, sum by (le) "
            "(rate(kinfer_sidecar_time_to_first_token_seconds_bucket{}[1m])))");
  EXPECT_EQ(TtftBucketIncreaseByPodQuery("a=\"b\"", "2s"),
            "sum by (pod, le) "
            "(increase(kinfer_sidecar_time_to_first_token_seconds_bucket{a=\"b\"}[2s]))");
}

TEST(PrometheusQueryTest, EncodesTheUrl) {
  EXPECT_EQ(PrometheusQueryUrl("http://prom:9090/", "sum by (pod) (x{a=\"b\"})"),
            "http://prom:9090/api/v1/query?query=sum%20by%20%28pod%29%20%28x%7Ba%3D%22b%22%7D%29");
}

TEST(PrometheusQueryTest, ParsesVectorAndScalarAnswers) {
  auto v = ParsePrometheusQueryResponse(R"({"status":"success","data":{"resultType":"vector",
      "result":[{"metric":{"pod":"a"},"value":[1700000000.5,"3"]},
                {"metric":{"pod":"b","le":"+Inf"},"value":[1700000000.5,"NaN"]},
                {"metric":{},"value":[1,"+Inf"]}]}})");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->size(), 3u);
  EXPECT_EQ((*v)[0].labels.at("pod"), "a");
  EXPECT_EQ((*v)[0].value, 3);
  EXPECT_EQ((*v)[0].timestamp_s, 1700000000.5);
  EXPECT_TRUE(std::isnan((*v)[1].value));
  EXPECT_TRUE(std::isinf((*v)[2].value));
  auto s = ParsePrometheusQueryResponse(
      R"({"status":"success","data":{"resultType":"scalar","result":[5,"0.25"]}})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->at(0).value, 0.25);
  auto empty = ParsePrometheusQueryResponse(
      R"({"status":"success","data":{"resultType":"vector","result":[]}})");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(PrometheusQueryTest, RefusesErrorsAndMalformedAnswers) {
  auto error = ParsePrometheusQueryResponse(
      R"({"status":"error","errorType":"bad_data","error":"parse error at char 3"})");
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(error.status().message().find("bad_data"), std::string::npos);
  // Fields of other types (a proxy's answer) are no throw: json::value() took the operator down.
  for (const char* odd : {R"({"status":"error","errorType":5,"error":null})",
                          R"({"status":"error","errorType":{},"error":[1]})"}) {
    auto r = ParsePrometheusQueryResponse(odd);
    ASSERT_FALSE(r.ok()) << odd;
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << odd;
    EXPECT_NE(r.status().message().find("unknown"), std::string::npos) << r.status().ToString();
  }
  for (
      const char* bad : {
          "",
          "nope",
          "[]",
          R"({"status":1})",
          R"({"status":"success"})",
          R"({"status":"success","data":{"resultType":"matrix","result":[]}})",
          R"({"status":"success","data":{"resultType":"vector","result":{}}})",
          R"({"status":"success","data":{"resultType":"vector","result":[1]}})",
          R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}})",
          R"({"status":"success","data":{"resultType":"vector","result":[{"value":[1,2]}]}})",
          R"({"status":"success","data":{"resultType":"vector","result":[{"value":[1,"x"]}]}})",
          R"({"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"1"]}]}})",
          R"({"status":"success","data":{"resultType":"scalar","result":"1"}})",
      }) {
    auto r = ParsePrometheusQueryResponse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

PromQueryValue V(std::map<std::string, std::string> labels, double value) {
  return PromQueryValue{std::move(labels), value, 0};
}

TEST(PrometheusQueryTest, BuildsPodSamplesFromTheAnswers) {
  std::vector<PromQueryValue> depth = {V({{"pod", "a"}}, 3), V({{"pod", "c"}}, 9)};
  std::vector<PromQueryValue> flight = {V({{"pod", "a"}}, 2), V({{"pod", "b"}}, 1)};
  std::vector<PromQueryValue> buckets = {V({{"pod", "a"}, {"le", "0.5"}}, 1.9),
                                         V({{"pod", "a"}, {"le", "0.1"}}, 1.1),
                                         V({{"pod", "a"}, {"le", "+Inf"}}, 4.2),
                                         V({{"pod", "b"}, {"le", "0.1"}}, 1),  // no +Inf: malformed
                                         V({{"pod", "b"}, {"le", "+Inf"}}, NAN)};
  auto s = PodSamplesFromPrometheus({{"a", true}, {"b", true}, {"c", true}, {"d", false}}, depth,
                                    flight, buckets);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_TRUE(s[0].has_metrics);
  EXPECT_EQ(s[0].queue_depth, 3);
  EXPECT_EQ(s[0].in_flight, 2);
  EXPECT_EQ(s[0].ttft_upper_bounds, (std::vector<double>{0.1, 0.5}));
  EXPECT_EQ(s[0].ttft_counts, (std::vector<uint64_t>{1, 1, 2}));
  EXPECT_TRUE(s[1].has_metrics);
  EXPECT_EQ(s[1].queue_depth, 0);
  EXPECT_TRUE(s[1].ttft_counts.empty());
  EXPECT_FALSE(s[2].has_metrics);  // no in-flight series: Prometheus has no recent scrape
  EXPECT_FALSE(s[3].has_metrics);
  EXPECT_FALSE(s[3].ready);
}

// The TTFT ranges asked tile the time that passed, whatever the ticks: 2 s ticks over a 3 s panic
// window asked [3s] every 4 s before (45 s of 60 counted), and [1s] every 2 s at a 0.6 s window.
TEST(PrometheusQueryTest, TtftRangesFollowOneAnotherWhateverTheTicks) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  const TimePoint t0{};
  struct Case {
    Duration panic, tick;
  };
  for (const Case& c : {Case{seconds(3), seconds(2)}, Case{milliseconds(600), seconds(2)},
                        Case{seconds(6), seconds(4)}, Case{seconds(5), seconds(6)},
                        Case{seconds(6), milliseconds(2500)}}) {
    std::optional<TimePoint> covered;
    int64_t asked_s = 0;
    TimePoint first{};
    for (TimePoint now = t0; now <= t0 + seconds(600); now += c.tick) {
      const TtftQueryPlan plan = PlanTtftQuery(covered, now, c.panic, seconds(60));
      if (!plan.ask) continue;
      if (!covered) {
        first = now;
      } else {
        asked_s += plan.range_s;
      }
      EXPECT_GE(plan.range_s, 1);
      EXPECT_LE(plan.covered_to, now);
      covered = plan.covered_to;
    }
    // After the first query, the ranges add up to the time that passed since, less at most what
    // the next query will ask (a panic window, a tick and the carried fraction of a second).
    const double elapsed = std::chrono::duration<double>(t0 + seconds(600) - first).count();
    const double slack = std::chrono::duration<double>(c.panic + c.tick).count() + 1.0;
    EXPECT_LE(static_cast<double>(asked_s), elapsed)
        << "panic " << c.panic.count() << " tick " << c.tick.count();
    EXPECT_GE(static_cast<double>(asked_s), elapsed - slack)
        << "panic " << c.panic.count() << " tick " << c.tick.count();
  }
  // A gap longer than the stable window starts anew: one panic window up to now.
  const TtftQueryPlan fresh = PlanTtftQuery(t0, t0 + seconds(300), seconds(6), seconds(60));
  EXPECT_TRUE(fresh.ask);
  EXPECT_EQ(fresh.range_s, 6);
  EXPECT_EQ(fresh.covered_to, t0 + seconds(300));
}

}  // namespace
}  // namespace kinfer::autoscale
