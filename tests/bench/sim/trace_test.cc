// Tests for the trace readers: both formats, column names, sorting, time scaling, and clear
// errors (never a crash) on bad input.
#include "bench/sim/trace.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace kinfer::sim {
namespace {

StatusOr<Trace> Csv(const std::string& text) {
  std::istringstream in(text);
  return ParseCsvTrace(in, "t.csv");
}

StatusOr<Trace> Jsonl(const std::string& text) {
  std::istringstream in(text);
  return ParseJsonlTrace(in, "t.jsonl");
}

std::string Fixture(const char* name) {
  return std::string(KINFER_SOURCE_DIR) + "/tests/fixtures/traces/" + name;
}

TEST(TraceCsvTest, ReadsAzureDateTimesRelativeToTheFirstRequest) {
  auto t =
      Csv("TIMESTAMP,ContextTokens,GeneratedTokens\n"
          "2023-11-16 18:15:46.6805900,374,44\n"
          "2023-11-16 18:15:50.9951690,396,109\n"
          "2023-11-16 18:16:01.2500000,879,55\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_s, 0);
  EXPECT_NEAR(t->requests[1].arrival_s, 4.314579, 1e-6);
  EXPECT_NEAR(t->requests[2].arrival_s, 14.56941, 1e-6);
  EXPECT_EQ(t->requests[1].input_tokens, 396);
  EXPECT_EQ(t->requests[1].output_tokens, 109);
  EXPECT_NEAR(t->span_s(), 14.56941, 1e-6);
}

TEST(TraceCsvTest, ReadsAcrossMidnightAndMonthEnds) {
  auto t =
      Csv("TIMESTAMP,ContextTokens,GeneratedTokens\n"
          "2023-12-31 23:59:59.5,1,1\n"
          "2024-01-01 00:00:00.5,1,1\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NEAR(t->requests[1].arrival_s, 1.0, 1e-6);
}

TEST(TraceCsvTest, ReadsNumericSecondsAndOtherColumnNamesInAnyOrder) {
  auto t =
      Csv("output_tokens,arrival_s,extra,Input_Length\r\n"
          "10,5.5,x,100\r\n"
          "\r\n"
          "20,7.25,y,200\r\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 1.75);
  EXPECT_EQ(t->requests[1].input_tokens, 200);
  EXPECT_EQ(t->requests[1].output_tokens, 20);
}

TEST(TraceCsvTest, SortsArrivalsAndReadsZeroOutputAsOne) {
  auto t =
      Csv("timestamp,input_tokens,output_tokens\n"
          "3,30,0\n"
          "1,10,1\n"
          "2,20,2\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->requests[0].input_tokens, 10);
  EXPECT_EQ(t->requests[1].input_tokens, 20);
  EXPECT_EQ(t->requests[2].input_tokens, 30);
  EXPECT_EQ(t->requests[2].output_tokens, 1);
  EXPECT_DOUBLE_EQ(t->requests[2].arrival_s, 2);
}

TEST(TraceCsvTest, BadInputIsAnErrorNamingTheLine) {
  struct Case {
    const char* text;
    const char* expect;  // in the message
  };
  const Case cases[] = {
      {"", "no header"},
      {"a,b,c\n1,2,3\n", "header needs"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\nyesterday,1,1\n",
       "t.csv:3: bad timestamp"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-16 18:15:46,1,1\n", "t.csv:2: bad"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,12,\n", "t.csv:2: token counts"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,12\n", "t.csv:2: expected 3"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,1.5,2\n", "integers"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,0,2\n", "input token count"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,5,-2\n", "output token count"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\nnan,5,2\n", "bad timestamp"},
      {"TIMESTAMP,ContextTokens,GeneratedTokens\n1e999,5,2\n", "bad timestamp"},
  };
  for (const Case& c : cases) {
    auto t = Csv(c.text);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(t.status().message().find(c.expect), std::string::npos)
        << c.text << " -> " << t.status().message();
  }
}

TEST(TraceJsonlTest, ReadsMillisecondsAndIgnoresOtherKeys) {
  auto t = Jsonl(
      "{\"timestamp\": 0, \"input_length\": 40160, \"output_length\": 6, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 1500, \"input_length\": 100, \"output_length\": 0}\n");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 1.5);
  EXPECT_EQ(t->requests[0].input_tokens, 40160);
  EXPECT_EQ(t->requests[1].output_tokens, 1);
}

TEST(TraceJsonlTest, BadInputIsAnErrorNamingTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n{\"timestamp\": 1,", ":2:"},
      {"[1, 2, 3]\n", "not a JSON object"},
      {"{\"input_length\": 1, \"output_length\": 1}\n", "\"timestamp\""},
      {"{\"timestamp\": \"soon\", \"input_length\": 1, \"output_length\": 1}\n", "\"timestamp\""},
      {"{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1}\n", "integers"},
      {"{\"timestamp\": 0, \"output_length\": 1}\n", "integers"},
      {"{\"timestamp\": 0, \"input_length\": -4, \"output_length\": 1}\n", "input token count"},
  };
  for (const auto& [text, expect] : cases) {
    auto t = Jsonl(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(expect), std::string::npos)
        << text << " -> " << t.status().message();
  }
}

TEST(TraceLoadTest, MissingFileIsNotFoundAndEmptyFileIsInvalid) {
  auto missing = LoadTrace("/nonexistent/trace.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  const std::string path = ::testing::TempDir() + "/empty_trace.jsonl";
  std::ofstream(path) << "\n";
  auto empty = LoadTrace(path);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

TEST(TraceLoadTest, ReadsTheFixtureByExtension) {
  auto t = LoadTrace(Fixture("azure_conv_first10min.csv"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->requests.size(), 2867u);
  EXPECT_LT(t->span_s(), 600);
  EXPECT_GT(t->span_s(), 590);

  const std::string path = ::testing::TempDir() + "/two.jsonl";
  std::ofstream(path) << "{\"timestamp\": 10, \"input_length\": 3, \"output_length\": 4}\n"
                      << "{\"timestamp\": 20, \"input_length\": 5, \"output_length\": 6}\n";
  auto j = LoadTrace(path);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_DOUBLE_EQ(j->requests[1].arrival_s, 0.01);
  std::remove(path.c_str());
}

TEST(TraceTimeTest, ScalingStretchesArrivalsAndRejectsNonPositiveFactors) {
  auto t = Csv("timestamp,input_tokens,output_tokens\n0,1,1\n10,1,1\n");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(ScaleTraceTime(*t, 0.5).ok());
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 5);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity()}) {
    Status st = ScaleTraceTime(*t, bad);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 5);
}

TEST(TraceLengthTest, ScalingRoundsLengthsKeepsAtLeastOneTokenAndRejectsBadFactors) {
  auto t = Csv("timestamp,input_tokens,output_tokens\n0,1000,211\n1,7,3\n");
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(ScaleTraceLengths(*t, 1.0 / 16).ok());
  EXPECT_EQ(t->requests[0].input_tokens, 63);  // 62.5 rounds half away from zero
  EXPECT_EQ(t->requests[0].output_tokens, 13);
  EXPECT_EQ(t->requests[1].input_tokens, 1);  // 0.44: never below one token
  EXPECT_EQ(t->requests[1].output_tokens, 1);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 1);  // arrivals untouched
  for (double bad : {0.0, -2.0, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_EQ(ScaleTraceLengths(*t, bad).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(t->requests[0].input_tokens, 63);
}

TEST(TraceTimeTest, WarmupReplaysTheStartBeforeTheDelayedTrace) {
  auto t = Csv("timestamp,input_tokens,output_tokens\n0,1,1\n30,2,1\n70,3,1\n");
  ASSERT_TRUE(t.ok());
  Trace w = WithWarmup(*t, 60);
  ASSERT_EQ(w.requests.size(), 5u);
  EXPECT_DOUBLE_EQ(w.requests[0].arrival_s, 0);
  EXPECT_DOUBLE_EQ(w.requests[1].arrival_s, 30);
  EXPECT_DOUBLE_EQ(w.requests[2].arrival_s, 60);
  EXPECT_EQ(w.requests[4].input_tokens, 3);
  EXPECT_DOUBLE_EQ(w.requests[4].arrival_s, 130);

  Trace s = SliceTrace(*t, 30, 70);
  ASSERT_EQ(s.requests.size(), 1u);
  EXPECT_EQ(s.requests[0].input_tokens, 2);
}

}  // namespace
}  // namespace kinfer::sim
