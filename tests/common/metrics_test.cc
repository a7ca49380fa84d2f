#include "common/metrics/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics/text_format.h"

namespace kinfer::metrics {
namespace {

TEST(TextFormatTest, FormatsValuesShortestAndSpecials) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(5), "5");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(120), "120");
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(TextFormatTest, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeHelp("say \"hi\"\\\n"), "say \"hi\"\\\\\\n");
}

TEST(RegistryTest, ExposesCounterGaugeHistogramExactly) {
  Registry reg;
  auto& req = reg.AddCounter("x_requests_total", "Requests by status.", {"status"});
  auto& running = reg.AddGauge("x_running", "Running now.");
  auto& lat = reg.AddHistogram("x_latency_seconds", "Latency.", {0.1, 0.5, 1});
  req.WithLabels({"ok"}).Inc();
  req.WithLabels({"ok"}).Inc(2);
  req.WithLabels({"cancelled"}).Inc();
  running.Get().Set(3);
  lat.Get().Observe(0.05);
  lat.Get().Observe(0.1);  // upper bounds are inclusive
  lat.Get().Observe(0.7);
  lat.Get().Observe(30);

  const std::string want =
      "# HELP x_requests_total Requests by status.\n"
      "# TYPE x_requests_total counter\n"
      "x_requests_total{status=\"cancelled\"} 1\n"
      "x_requests_total{status=\"ok\"} 3\n"
      "# HELP x_running Running now.\n"
      "# TYPE x_running gauge\n"
      "x_running 3\n"
      "# HELP x_latency_seconds Latency.\n"
      "# TYPE x_latency_seconds histogram\n"
      "x_latency_seconds_bucket{le=\"0.1\"} 2\n"
      "x_latency_seconds_bucket{le=\"0.5\"} 2\n"
      "x_latency_seconds_bucket{le=\"1\"} 3\n"
      "x_latency_seconds_bucket{le=\"+Inf\"} 4\n"
      "x_latency_seconds_sum 30.85\n"
      "x_latency_seconds_count 4\n";
  EXPECT_EQ(reg.ExposeText(), want);
}

TEST(RegistryTest, UnlabelledFamiliesExposeZeroBeforeFirstEvent) {
  Registry reg;
  reg.AddCounter("y_total", "Y.");
  reg.AddHistogram("y_seconds", "Y.", {1});
  EXPECT_EQ(reg.ExposeText(),
            "# HELP y_total Y.\n# TYPE y_total counter\ny_total 0\n"
            "# HELP y_seconds Y.\n# TYPE y_seconds histogram\n"
            "y_seconds_bucket{le=\"1\"} 0\ny_seconds_bucket{le=\"+Inf\"} 0\n"
            "y_seconds_sum 0\ny_seconds_count 0\n");
}

TEST(RegistryTest, LabelledHistogramPutsLeLastAndEscapesValues) {
  Registry reg;
  auto& h = reg.AddHistogram("z_seconds", "Z \"quoted\"\nhelp.", {1}, {"path", "code"});
  h.WithLabels({"/a\"b", "2\\00"}).Observe(2);
  EXPECT_EQ(reg.ExposeText(),
            "# HELP z_seconds Z \"quoted\"\\nhelp.\n# TYPE z_seconds histogram\n"
            "z_seconds_bucket{path=\"/a\\\"b\",code=\"2\\\\00\",le=\"1\"} 0\n"
            "z_seconds_bucket{path=\"/a\\\"b\",code=\"2\\\\00\",le=\"+Inf\"} 1\n"
            "z_seconds_sum{path=\"/a\\\"b\",code=\"2\\\\00\"} 2\n"
            "z_seconds_count{path=\"/a\\\"b\",code=\"2\\\\00\"} 1\n");
}

TEST(RegistryTest, CounterIgnoresNegativeIncrements) {
  Registry reg;
  auto& c = reg.AddCounter("c_total", "C.").Get();
  c.Inc(2);
  c.Inc(-5);
  c.Inc(std::nan(""));
  EXPECT_EQ(c.Value(), 2);
}

TEST(RegistryTest, WithLabelsReturnsStableChild) {
  Registry reg;
  auto& fam = reg.AddGauge("g", "G.", {"k"});
  Gauge* first = &fam.WithLabels({"a"});
  for (int i = 0; i < 100; ++i) fam.WithLabels({std::to_string(i) + "b"});
  EXPECT_EQ(first, &fam.WithLabels({"a"}));
}

TEST(RegistryTest, ConcurrentUpdatesAreAllCounted) {
  Registry reg;
  auto& c = reg.AddCounter("n_total", "N.", {"t"});
  auto& h = reg.AddHistogram("h_seconds", "H.", {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        c.WithLabels({t % 2 ? "odd" : "even"}).Inc();
        h.Get().Observe(i % 2 ? 0.25 : 1.0);
        if (i % 1000 == 0) (void)reg.ExposeText();  // scrape while updating
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(c.WithLabels({"odd"}).Value() + c.WithLabels({"even"}).Value(), 40000);
  Histogram::Snapshot s = h.Get().Snap();
  EXPECT_EQ(s.count, 40000u);
  EXPECT_EQ(s.cumulative[0], 20000u);
  EXPECT_EQ(s.cumulative.back(), s.count);
}

TEST(ValidationTest, RejectsBadNamesAndBuckets) {
  EXPECT_TRUE(ValidateMetricName("kinfer_runtime:x_1").ok());
  EXPECT_FALSE(ValidateMetricName("").ok());
  EXPECT_FALSE(ValidateMetricName("1abc").ok());
  EXPECT_FALSE(ValidateMetricName("a-b").ok());
  EXPECT_TRUE(ValidateLabelName("status").ok());
  EXPECT_FALSE(ValidateLabelName("__name").ok());
  EXPECT_FALSE(ValidateLabelName("a:b").ok());
  EXPECT_TRUE(ValidateBuckets({0.1, 1}).ok());
  EXPECT_FALSE(ValidateBuckets({}).ok());
  EXPECT_FALSE(ValidateBuckets({1, 1}).ok());
  EXPECT_FALSE(ValidateBuckets({1, 1.0 / 0.0}).ok());
}

TEST(ValidationDeathTest, RegistrationErrorsAbort) {
  EXPECT_DEATH(
      {
        Registry r;
        r.AddCounter("requests", "no _total");
      },
      "must end in _total");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("g", "G.");
        r.AddGauge("g", "again");
      },
      "duplicate");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddHistogram("h", "H.", {1}, {"le"});
      },
      "le");
  EXPECT_DEATH(
      {
        Registry r;
        r.AddGauge("g", "G.", {"a"}).WithLabels({});
      },
      "labels");
}

// Lints a realistic page with the real promtool when it is installed.
TEST(PromtoolTest, CheckMetricsAcceptsExposition) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not on PATH (Debian package 'prometheus'); lint not run";
  }
  Registry reg;
  reg.AddCounter("kinfer_test_requests_total", "Requests \"by\" status.\nSecond line.", {"status"})
      .WithLabels({"we\"ird\\va\nlue"})
      .Inc(7);
  reg.AddGauge("kinfer_test_kv_cache_usage_ratio", "KV usage.").Get().Set(0.5);
  auto& h = reg.AddHistogram("kinfer_test_latency_seconds", "Latency.", {0.01, 0.1, 1, 10, 120},
                             {"endpoint"});
  h.WithLabels({"chat"}).Observe(0.2);
  h.WithLabels({"completions"}).Observe(200);
  const std::string path = ::testing::TempDir() + "/kinfer_metrics_promtool.txt";
  {
    std::ofstream f(path);
    f << reg.ExposeText();
  }
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof(buf), p) != nullptr) output += buf;
  int rc = pclose(p);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_EQ(output, "") << output;
}

}  // namespace
}  // namespace kinfer::metrics
