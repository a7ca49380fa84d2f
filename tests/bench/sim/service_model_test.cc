// Tests for the service model: it reproduces perf_model.csv's measured means at their points,
// interpolates linearly between them, and handles the ends and bad input.
#include "bench/sim/service_model.h"

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer::sim {
namespace {

const std::string kPerfCsv =
    std::string(KINFER_SOURCE_DIR) + "/tests/fixtures/traces/perf_model_llama2-70b_h100.csv";

struct Row {
  int tp, prompt, batch;
  double prompt_ms, token_ms;
};

// The fixture's rows, read here independently of the model's own reader.
std::vector<Row> Rows() {
  std::ifstream in(kPerfCsv);
  std::string line;
  std::getline(in, line);
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    std::vector<std::string> c;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) c.push_back(cell);
    rows.push_back(
        Row{std::stoi(c[10]), std::stoi(c[2]), std::stoi(c[3]), std::stod(c[7]), std::stod(c[8])});
  }
  return rows;
}

ServiceModel Load(int tp) {
  ServiceModelSpec spec;
  spec.tensor_parallel = tp;
  auto m = ServiceModel::LoadPerfCsv(kPerfCsv, spec);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

TEST(ServiceModelTest, ReproducesTheMeasuredMeansAtTheirPoints) {
  const std::vector<Row> rows = Rows();
  ASSERT_EQ(rows.size(), 315u);
  const ServiceModel m = Load(4);
  std::map<int, std::pair<double, int>> prefill, decode;  // x -> (sum, n)
  for (const Row& r : rows) {
    if (r.tp != 4) continue;
    auto& p = prefill[r.prompt * r.batch];
    p.first += r.prompt_ms;
    ++p.second;
    auto& d = decode[r.batch];
    d.first += r.token_ms;
    ++d.second;
  }
  // A point the model kept is reproduced exactly; one it dropped (slower than a smaller point,
  // as decode at batch 4 is by 0.01 ms against batch 2) is still within 5% of the curve.
  auto kept = [](const PiecewiseLinear& f, double x) {
    for (const auto& [px, py] : f.points()) {
      if (px == x) return true;
    }
    return false;
  };
  int dropped = 0;
  for (const auto& [tokens, sum] : prefill) {
    const double mean = sum.first / sum.second / 1e3;
    if (kept(m.prefill_ms(), tokens)) {
      EXPECT_NEAR(m.PrefillSeconds(tokens), mean, 1e-12) << tokens;
    } else {
      ++dropped;
      EXPECT_NEAR(m.PrefillSeconds(tokens), mean, 0.05 * mean) << tokens;
    }
  }
  for (const auto& [batch, sum] : decode) {
    const double mean = sum.first / sum.second / 1e3;
    if (kept(m.decode_ms(), batch)) {
      EXPECT_NEAR(m.DecodeStepSeconds(batch), mean, 1e-12) << batch;
    } else {
      ++dropped;
      EXPECT_NEAR(m.DecodeStepSeconds(batch), mean, 0.05 * mean) << batch;
    }
  }
  EXPECT_LE(dropped, 2);
  EXPECT_EQ(m.prefill_ms().points().size() + m.decode_ms().points().size() + dropped,
            prefill.size() + decode.size());
  // Spot values (ms, means of the rows): 8192-token prompt ~0.9 s, a 64-wide decode step 52 ms.
  EXPECT_NEAR(m.PrefillSeconds(512 * 64), 3.532, 0.001);
  EXPECT_NEAR(m.DecodeStepSeconds(64), 0.05199, 0.0001);
}

TEST(ServiceModelTest, EveryMeasuredPromptAndBatchIsWithinTenPercentOfTheTokenCurve) {
  // The model indexes prefill by prompt x batch; each (prompt, batch) cell's own mean stays close.
  std::map<std::pair<int, int>, std::pair<double, int>> cells;
  for (const Row& r : Rows()) {
    if (r.tp != 4) continue;
    auto& c = cells[{r.prompt, r.batch}];
    c.first += r.prompt_ms;
    ++c.second;
  }
  const ServiceModel m = Load(4);
  for (const auto& [key, sum] : cells) {
    const double measured = sum.first / sum.second / 1e3;
    EXPECT_NEAR(m.PrefillSeconds(key.first * key.second), measured, 0.10 * measured)
        << key.first << " x " << key.second;
  }
}

TEST(ServiceModelTest, InterpolatesLinearlyAndHandlesTheEnds) {
  const ServiceModel m = Load(4);
  const double at32 = m.DecodeStepSeconds(32), at64 = m.DecodeStepSeconds(64);
  EXPECT_NEAR(m.DecodeStepSeconds(48), (at32 + at64) / 2, 1e-12);
  // Beyond the last point the last segment goes on.
  EXPECT_NEAR(m.DecodeStepSeconds(96), at64 + (at64 - at32), 1e-12);
  // Below the first point the first value holds (a fixed per-iteration cost).
  EXPECT_DOUBLE_EQ(m.PrefillSeconds(1), m.PrefillSeconds(128));
  const double p4096 = m.PrefillSeconds(4096), p8192 = m.PrefillSeconds(8192);
  EXPECT_NEAR(m.PrefillSeconds(6144), (p4096 + p8192) / 2, 1e-12);
  // Monotone in both arguments.
  for (int b = 1; b < 128; ++b) EXPECT_LE(m.DecodeStepSeconds(b), m.DecodeStepSeconds(b + 1));
  for (int t = 64; t < 40000; t += 64) EXPECT_LE(m.PrefillSeconds(t), m.PrefillSeconds(t + 64));
}

TEST(ServiceModelTest, DropsAPointFasterThanASmallerOne) {
  // TP2's 512 x 64 prefill row (361 ms) is faster than 512 x 32 (2.4 s): an artefact.
  const ServiceModel m = Load(2);
  EXPECT_GT(m.PrefillSeconds(512 * 64), m.PrefillSeconds(512 * 32));
  for (const auto& [x, y] : m.prefill_ms().points()) EXPECT_NE(x, 512.0 * 64);
}

TEST(ServiceModelTest, UnknownCombinationIsNotFoundAndListsWhatIsThere) {
  ServiceModelSpec spec;
  spec.hardware = "tpu-v5";
  auto m = ServiceModel::LoadPerfCsv(kPerfCsv, spec);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("llama2-70b/h100-80gb/tp4"), std::string::npos);
  EXPECT_EQ(ServiceModel::LoadPerfCsv("/nonexistent.csv", {}).status().code(),
            StatusCode::kNotFound);
}

TEST(ServiceModelTest, CommentLinesAreSkippedAndTheSourceIsNamed) {
  std::istringstream in(
      "# measured somewhere\n# on some date\n"
      "model,hardware,prompt_size,batch_size,prompt_time,token_time,tensor_parallel\n"
      "m,cpu,100,1,50,10,1\n# a note between rows\nm,cpu,100,4,180,25,1\n");
  ServiceModelSpec spec{"m", "cpu", 1};
  auto m = ServiceModel::FromPerfCsv(in, spec, "calibration.csv");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->description(), "m/cpu/tp1 (calibration.csv)");
  EXPECT_DOUBLE_EQ(m->PrefillSeconds(100), 0.050);
  EXPECT_DOUBLE_EQ(m->PrefillSeconds(400), 0.180);
  EXPECT_DOUBLE_EQ(m->DecodeStepSeconds(4), 0.025);
}

// kinfer-runtime's own curve, measured on the development machine (bench/sim/measure_runtime.py):
// it loads under the names its comment gives, and both curves grow with the work.
TEST(ServiceModelTest, LoadsKinferRuntimesMeasuredCpuCurve) {
  const std::string path =
      std::string(KINFER_SOURCE_DIR) + "/bench/sim/perf_kinfer_runtime_cpu.csv";
  auto m = ServiceModel::LoadPerfCsv(path, ServiceModelSpec{"smollm2-135m-q4_1", "cpu-2t", 1});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NE(m->description().find("perf_kinfer_runtime_cpu.csv"), std::string::npos);
  ASSERT_GE(m->prefill_ms().points().size(), 3u);
  ASSERT_GE(m->decode_ms().points().size(), 3u);
  EXPECT_GT(m->PrefillSeconds(1024), m->PrefillSeconds(128));
  EXPECT_GT(m->DecodeStepSeconds(16), m->DecodeStepSeconds(1));
  // A CPU at 2 threads: tens of milliseconds a decode step, not the GPU's few.
  EXPECT_GT(m->DecodeStepSeconds(1), 0.005);
  EXPECT_LT(m->DecodeStepSeconds(1), 1.0);
}

TEST(ServiceModelTest, MalformedInputIsInvalidArgument) {
  const char* cases[] = {
      "",
      "model,hardware\nllama2-70b,h100-80gb\n",
      "model,hardware,prompt_size,batch_size,prompt_time,token_time,tensor_parallel\n"
      "llama2-70b,h100-80gb,512,1,fast,30,4\n",
      "model,hardware,prompt_size,batch_size,prompt_time,token_time,tensor_parallel\n"
      "llama2-70b,h100-80gb,512,1,60\n",
      "model,hardware,prompt_size,batch_size,prompt_time,token_time,tensor_parallel\n"
      "llama2-70b,h100-80gb,512,0,60,30,4\n",
  };
  for (const char* text : cases) {
    std::istringstream in(text);
    auto m = ServiceModel::FromPerfCsv(in, {});
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << text;
  }
}

}  // namespace
}  // namespace kinfer::sim
