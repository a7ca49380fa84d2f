// Tests of the Prometheus text format 0.0.4 parser: the syntax, error lines, and a randomized
// robustness run (mutated real pages and random bytes must parse or fail, never crash).
#include "operator/autoscale/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

namespace kinfer::autoscale {
namespace {

const char* kSidecarPage =
    "# HELP kinfer_sidecar_in_flight Requests in flight to the upstream.\n"
    "# TYPE kinfer_sidecar_in_flight gauge\n"
    "kinfer_sidecar_in_flight 3\n"
    "# HELP kinfer_sidecar_queue_depth Requests waiting, by class.\n"
    "# TYPE kinfer_sidecar_queue_depth gauge\n"
    "kinfer_sidecar_queue_depth{class=\"high\"} 2\n"
    "kinfer_sidecar_queue_depth{class=\"low\"} 5\n"
    "# TYPE kinfer_sidecar_time_to_first_token_seconds histogram\n"
    "kinfer_sidecar_time_to_first_token_seconds_bucket{class=\"high\",le=\"0.1\"} 1\n"
    "kinfer_sidecar_time_to_first_token_seconds_bucket{class=\"high\",le=\"+Inf\"} 4\n"
    "kinfer_sidecar_time_to_first_token_seconds_sum{class=\"high\"} 1.5\n"
    "kinfer_sidecar_time_to_first_token_seconds_count{class=\"high\"} 4\n";

TEST(PrometheusTextTest, ParsesASidecarPage) {
  StatusOr<PromPage> page = ParsePrometheusText(kSidecarPage);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->samples.size(), 7u);
  EXPECT_EQ(page->types.at("kinfer_sidecar_in_flight"), "gauge");
  EXPECT_EQ(page->types.at("kinfer_sidecar_time_to_first_token_seconds"), "histogram");
  EXPECT_EQ(page->help.at("kinfer_sidecar_queue_depth"), "Requests waiting, by class.");
  EXPECT_EQ(page->samples[0].name, "kinfer_sidecar_in_flight");
  EXPECT_EQ(page->samples[0].value, 3);
  auto depth = page->Find("kinfer_sidecar_queue_depth");
  ASSERT_EQ(depth.size(), 2u);
  EXPECT_EQ(*depth[1]->Label("class"), "low");
  EXPECT_EQ(depth[1]->Label("le"), nullptr);
  EXPECT_EQ(*page->samples[4].Label("le"), "+Inf");
}

TEST(PrometheusTextTest, UnescapesLabelValuesAndHelp) {
  StatusOr<PromPage> page = ParsePrometheusText(
      "# HELP m a \\\\ b\\nc \"q\"\n"
      "m{a=\"x\\\"y\",b=\"back\\\\slash\",c=\"new\\nline\",} 1\n");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->help.at("m"), "a \\ b\nc \"q\"");
  const PromSample& s = page->samples.at(0);
  EXPECT_EQ(*s.Label("a"), "x\"y");
  EXPECT_EQ(*s.Label("b"), "back\\slash");
  EXPECT_EQ(*s.Label("c"), "new\nline");
}

TEST(PrometheusTextTest, ParsesSpecialValuesTimestampsBlanksAndCrLf) {
  StatusOr<PromPage> page = ParsePrometheusText(
      "a +Inf\n"
      "b -Inf 1700000000000\r\n"
      "\n   \t\n"
      "  c\t NaN  \n"
      "d{ x = \"1\" } 1.5e3 -5\n"
      "e 0x10\n"
      "# just a comment with \"quotes\" and { braces\n"
      "f{} -0.25");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->samples.size(), 6u);
  EXPECT_EQ(page->samples[0].value, std::numeric_limits<double>::infinity());
  EXPECT_EQ(page->samples[1].value, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(page->samples[1].timestamp_ms, 1700000000000);
  EXPECT_TRUE(std::isnan(page->samples[2].value));
  EXPECT_EQ(page->samples[3].value, 1500);
  EXPECT_EQ(page->samples[3].timestamp_ms, -5);
  EXPECT_EQ(*page->samples[3].Label("x"), "1");
  EXPECT_EQ(page->samples[4].value, 16);
  EXPECT_EQ(page->samples[5].value, -0.25);
  EXPECT_FALSE(page->samples[5].timestamp_ms.has_value());
}

TEST(PrometheusTextTest, ParsePromFloat) {
  EXPECT_EQ(ParsePromFloat("1"), 1.0);
  EXPECT_EQ(ParsePromFloat("+2.5"), 2.5);
  EXPECT_EQ(ParsePromFloat("inf"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(ParsePromFloat("-Infinity"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(ParsePromFloat("1e999"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(ParsePromFloat("1e-999"), 0.0);
  EXPECT_FALSE(ParsePromFloat(""));
  EXPECT_FALSE(ParsePromFloat("+"));
  EXPECT_FALSE(ParsePromFloat("1x"));
  EXPECT_FALSE(ParsePromFloat("--1"));
  EXPECT_FALSE(ParsePromFloat("+-1"));
  EXPECT_FALSE(ParsePromFloat("0x"));
  EXPECT_FALSE(ParsePromFloat(" 1"));
}

// Each bad page and the line its error must name.
TEST(PrometheusTextTest, ErrorsNameTheLine) {
  struct Case {
    const char* page;
    const char* line;
  } cases[] = {
      {"a 1\nb\n", "line 2: "},
      {"a 1\n\nb x\n", "line 3: "},
      {"1a 1\n", "line 1: "},
      {"a{b=\"1\" 1\n", "line 1: "},
      {"a{b=\"1} 1\n", "line 1: "},
      {"a{b=1} 1\n", "line 1: "},
      {"a{b=\"\\t\"} 1\n", "line 1: "},
      {"a{b=\"1\",b=\"2\"} 1\n", "line 1: "},
      {"a{:b=\"1\"} 1\n", "line 1: "},
      {"a 1 2 3\n", "line 1: "},
      {"a 1 1.5\n", "line 1: "},
      {"# TYPE a counter\n# TYPE a gauge\n", "line 2: "},
      {"# TYPE a gauges\n", "line 1: "},
      {"# TYPE\n", "line 1: "},
      {"# HELP 1\n", "line 1: "},
      {"# TYPE a counter extra\n", "line 1: "},
  };
  for (const Case& c : cases) {
    StatusOr<PromPage> page = ParsePrometheusText(c.page);
    ASSERT_FALSE(page.ok()) << c.page;
    EXPECT_EQ(page.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(page.status().message().rfind(c.line, 0), 0u)
        << c.page << " -> " << page.status().message();
  }
}

// Randomized robustness: mutations of a real page (byte flips, insertions, deletions, cuts) and
// random bytes either parse or fail with a line number; under ASan/UBSan this also checks that no
// read leaves the input.
TEST(PrometheusTextTest, RandomInputNeverCrashes) {
  std::mt19937 rng(12345);
  const std::string base = kSidecarPage;
  const std::string alphabet = "{}\"\\=,# \t\n\r+-.eE0123456789abcInfNaNle_:x";
  int parsed = 0, failed = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    if (round % 10 == 0) {
      text.resize(rng() % 200);
      for (char& c : text) c = static_cast<char>(rng() % 256);
    } else {
      text = base;
      int edits = 1 + static_cast<int>(rng() % 8);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        size_t pos = rng() % text.size();
        switch (rng() % 4) {
          case 0:
            text[pos] = alphabet[rng() % alphabet.size()];
            break;
          case 1:
            text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
            break;
          case 2:
            text.erase(pos, 1 + rng() % 5);
            break;
          default:
            text.resize(pos);
            break;
        }
      }
    }
    StatusOr<PromPage> page = ParsePrometheusText(text);
    if (page.ok()) {
      ++parsed;
    } else {
      ++failed;
      ASSERT_EQ(page.status().message().rfind("line ", 0), 0u) << page.status().message();
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace kinfer::autoscale
