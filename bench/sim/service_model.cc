#include "bench/sim/service_model.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace kinfer::sim {
namespace {

std::vector<std::string> Split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

bool ToDouble(const std::string& s, double* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(*out);
}

// Means per x, then drops points lower than a point before them.
std::vector<std::pair<double, double>> MonotoneMeans(
    const std::map<double, std::pair<double, int>>& sums) {
  std::vector<std::pair<double, double>> out;
  for (const auto& [x, sum_n] : sums) {
    const double y = sum_n.first / sum_n.second;
    if (!out.empty() && y < out.back().second) continue;
    out.emplace_back(x, y);
  }
  return out;
}

}  // namespace

PiecewiseLinear::PiecewiseLinear(std::vector<std::pair<double, double>> points)
    : points_(std::move(points)) {
  assert(!points_.empty());
}

double PiecewiseLinear::operator()(double x) const {
  const auto& p = points_;
  if (p.size() == 1 || x <= p.front().first) return p.front().second;
  auto hi =
      std::lower_bound(p.begin(), p.end(), x,
                       [](const std::pair<double, double>& a, double v) { return a.first < v; });
  if (hi == p.end()) hi = p.end() - 1;  // beyond the last point: extend the last segment
  auto lo = hi - 1;
  const double t = (x - lo->first) / (hi->first - lo->first);
  return lo->second + t * (hi->second - lo->second);
}

ServiceModel::ServiceModel(PiecewiseLinear prefill_ms, PiecewiseLinear decode_ms,
                           std::string description)
    : prefill_ms_(std::move(prefill_ms)),
      decode_ms_(std::move(decode_ms)),
      description_(std::move(description)) {}

StatusOr<ServiceModel> ServiceModel::FromPerfCsv(std::istream& in, const ServiceModelSpec& spec,
                                                 const std::string& source) {
  std::string line;
  size_t line_no = 0;
  // Lines that start with '#' are comments (how and where a calibration was measured).
  do {
    if (!std::getline(in, line)) return InvalidArgument("perf model: empty input");
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
  } while (!line.empty() && line.front() == '#');
  const std::vector<std::string> header = Split(line);
  auto col = [&](const char* name) {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  const int c_model = col("model"), c_hw = col("hardware"), c_prompt = col("prompt_size"),
            c_batch = col("batch_size"), c_pt = col("prompt_time"), c_tt = col("token_time"),
            c_tp = col("tensor_parallel");
  if (std::min({c_model, c_hw, c_prompt, c_batch, c_pt, c_tt, c_tp}) < 0) {
    return InvalidArgument(
        "perf model: the header needs model, hardware, prompt_size, batch_size, prompt_time, "
        "token_time and tensor_parallel");
  }
  std::map<double, std::pair<double, int>> prefill, decode;  // x -> (sum of ms, rows)
  std::set<std::string> present;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.front() == '#') continue;
    const std::vector<std::string> cells = Split(line);
    if (cells.size() != header.size()) {
      return InvalidArgument("perf model line " + std::to_string(line_no) + ": expected " +
                             std::to_string(header.size()) + " fields");
    }
    double prompt = 0, batch = 0, pt = 0, tt = 0, tp = 0;
    if (!ToDouble(cells[c_prompt], &prompt) || !ToDouble(cells[c_batch], &batch) ||
        !ToDouble(cells[c_pt], &pt) || !ToDouble(cells[c_tt], &tt) || !ToDouble(cells[c_tp], &tp) ||
        prompt <= 0 || batch <= 0 || pt <= 0 || tt <= 0) {
      return InvalidArgument("perf model line " + std::to_string(line_no) + ": bad number");
    }
    present.insert(cells[c_model] + "/" + cells[c_hw] + "/tp" +
                   std::to_string(static_cast<int>(tp)));
    if (cells[c_model] != spec.model || cells[c_hw] != spec.hardware ||
        static_cast<int>(tp) != spec.tensor_parallel) {
      continue;
    }
    auto& p = prefill[prompt * batch];
    p.first += pt;
    p.second += 1;
    auto& d = decode[batch];
    d.first += tt;
    d.second += 1;
  }
  const std::string name =
      spec.model + "/" + spec.hardware + "/tp" + std::to_string(spec.tensor_parallel);
  if (prefill.empty()) {
    std::string list;
    for (const std::string& p : present) list += (list.empty() ? "" : ", ") + p;
    return NotFound("perf model: no rows for " + name + " (present: " + list + ")");
  }
  return ServiceModel(PiecewiseLinear(MonotoneMeans(prefill)),
                      PiecewiseLinear(MonotoneMeans(decode)), name + " (" + source + ")");
}

StatusOr<ServiceModel> ServiceModel::LoadPerfCsv(const std::string& path,
                                                 const ServiceModelSpec& spec) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open perf model '" + path + "'");
  const size_t slash = path.find_last_of('/');
  return FromPerfCsv(in, spec, slash == std::string::npos ? path : path.substr(slash + 1));
}

}  // namespace kinfer::sim
