// ServiceModel: how long one replica's engine iterations take, calibrated from measurements.
//
// A replica runs continuous batching (see replica.h). It needs two costs:
//   * PrefillSeconds(tokens): one prefill iteration over `tokens` prompt tokens in total (one
//     prompt or several batched together);
//   * DecodeStepSeconds(batch): one decode step that yields one token for each of `batch`
//     running requests.
// FromPerfCsv() builds both from splitwise-sim's perf_model.csv rows for one model, hardware and
// tensor-parallel degree. Those rows measure prompt_time for prompts of 128-8192 tokens at batch
// 1 and for 512-token prompts at batch 1-64; prompt_time tracks the total tokens in the batch
// (512 x 4 takes what one 2048-token prompt takes, within 2%), so the prefill curve is indexed by
// prompt_size x batch_size. token_time is measured at batch 1-64 and barely moves with prompt
// or output length, so the decode curve is indexed by batch_size alone. Each measured point is
// the mean of its rows. Between points the model interpolates linearly; beyond the last point
// it extends the last segment; below the first it keeps the first value (a fixed per-iteration
// cost). A point that is faster than a smaller point before it (TP2's 512 x 64 prefill, 7x
// faster than 512 x 32) is a measurement artefact and is dropped, so both curves are monotone.
//
// Thread safety: immutable after construction; const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace kinfer::sim {

// y(x) by linear interpolation over points sorted by x (see the header comment for the ends).
class PiecewiseLinear {
 public:
  PiecewiseLinear() = default;
  // REQUIRES: at least one point, x strictly increasing.
  explicit PiecewiseLinear(std::vector<std::pair<double, double>> points);
  double operator()(double x) const;
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
};

struct ServiceModelSpec {
  std::string model = "llama2-70b";
  std::string hardware = "h100-80gb";
  int tensor_parallel = 4;
};

class ServiceModel {
 public:
  // Builds the curves from perf_model.csv text (lines starting with '#' are comments: a measured
  // calibration such as bench/sim/perf_kinfer_runtime_cpu.csv says there how and where it was
  // taken). NOT_FOUND when no row matches `spec` (the message lists the combinations present);
  // INVALID_ARGUMENT for a malformed row or header.
  // `source` names the input in the description ("llama2-70b/h100-80gb/tp4 (perf_model.csv)").
  static StatusOr<ServiceModel> FromPerfCsv(std::istream& in, const ServiceModelSpec& spec,
                                            const std::string& source = "perf_model.csv");
  static StatusOr<ServiceModel> LoadPerfCsv(const std::string& path, const ServiceModelSpec& spec);
  // Direct construction (tests, other calibrations): prefill in ms by total prompt tokens, decode
  // in ms by batch size. REQUIRES: both non-empty with increasing x.
  ServiceModel(PiecewiseLinear prefill_ms, PiecewiseLinear decode_ms, std::string description);

  // Seconds for one prefill iteration over `prompt_tokens` tokens in total. REQUIRES: > 0.
  double PrefillSeconds(int64_t prompt_tokens) const { return prefill_ms_(prompt_tokens) / 1e3; }
  // Seconds for one decode step of `batch` running requests. REQUIRES: batch >= 1.
  double DecodeStepSeconds(int batch) const { return decode_ms_(batch) / 1e3; }

  const PiecewiseLinear& prefill_ms() const { return prefill_ms_; }
  const PiecewiseLinear& decode_ms() const { return decode_ms_; }
  const std::string& description() const { return description_; }

 private:
  PiecewiseLinear prefill_ms_;
  PiecewiseLinear decode_ms_;
  std::string description_;
};

}  // namespace kinfer::sim
