#include "bench/sim/trace.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

namespace kinfer::sim {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

std::vector<std::string_view> SplitCommas(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t comma = line.find(',', start);
    out.push_back(
        Trim(line.substr(start, comma == std::string_view::npos ? line.npos : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::optional<long long> ParseInt(std::string_view s) {
  long long v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseDouble(std::string_view s) {
  if (s.empty()) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar (H. Hinnant's algorithm).
long long DaysFromCivil(long long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long long>(doe) - 719468;
}

// "YYYY-MM-DD HH:MM:SS[.fraction]" (or with a 'T') to seconds since the epoch, or a plain
// number of seconds.
std::optional<double> ParseTimestamp(std::string_view s) {
  if (auto plain = ParseDouble(s)) return plain;
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  auto y = ParseInt(s.substr(0, 4)), mo = ParseInt(s.substr(5, 2)), d = ParseInt(s.substr(8, 2));
  auto h = ParseInt(s.substr(11, 2)), mi = ParseInt(s.substr(14, 2));
  auto sec = ParseDouble(s.substr(17));
  if (!y || !mo || !d || !h || !mi || !sec || *mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h < 0 ||
      *h > 23 || *mi < 0 || *mi > 59 || *sec < 0 || *sec >= 61) {
    return std::nullopt;
  }
  const long long days = DaysFromCivil(*y, static_cast<unsigned>(*mo), static_cast<unsigned>(*d));
  return static_cast<double>(days) * 86400.0 + static_cast<double>(*h * 3600 + *mi * 60) + *sec;
}

int FindColumn(const std::vector<std::string_view>& header,
               std::initializer_list<std::string_view> names) {
  for (size_t i = 0; i < header.size(); ++i) {
    const std::string col = Lower(header[i]);
    for (std::string_view n : names) {
      if (col == n) return static_cast<int>(i);
    }
  }
  return -1;
}

Status LineError(std::string_view source, size_t line, const std::string& what) {
  return InvalidArgument(std::string(source) + ":" + std::to_string(line) + ": " + what);
}

// Checks the token counts and appends the request (arrival still absolute).
Status Append(Trace& trace, std::string_view source, size_t line, double arrival, long long input,
              long long output) {
  if (input <= 0 || input > 100'000'000) {
    return LineError(source, line,
                     "input token count must be in [1, 1e8], got " + std::to_string(input));
  }
  if (output < 0 || output > 100'000'000) {
    return LineError(source, line,
                     "output token count must be in [0, 1e8], got " + std::to_string(output));
  }
  trace.requests.push_back(TraceRequest{arrival, static_cast<int>(input),
                                        static_cast<int>(std::max<long long>(output, 1))});
  return Status::Ok();
}

// Sorts by arrival and makes times relative to the first request.
void Normalize(Trace& trace) {
  std::stable_sort(
      trace.requests.begin(), trace.requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  if (trace.requests.empty()) return;
  const double t0 = trace.requests.front().arrival_s;
  for (TraceRequest& r : trace.requests) r.arrival_s -= t0;
}

}  // namespace

StatusOr<Trace> ParseCsvTrace(std::istream& in, std::string_view source) {
  Trace trace;
  trace.source = std::string(source);
  std::string line;
  size_t line_no = 0;
  int col_time = -1, col_in = -1, col_out = -1;
  size_t n_cols = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (Trim(line).empty()) continue;
    std::vector<std::string_view> cells = SplitCommas(line);
    if (col_time < 0) {
      col_time = FindColumn(cells, {"timestamp", "arrival_time", "arrival_s", "time"});
      col_in =
          FindColumn(cells, {"contexttokens", "input_length", "input_tokens", "prompt_tokens"});
      col_out = FindColumn(
          cells, {"generatedtokens", "output_length", "output_tokens", "completion_tokens"});
      if (col_time < 0 || col_in < 0 || col_out < 0) {
        return LineError(source, line_no,
                         "the header needs an arrival column (TIMESTAMP), a prompt column "
                         "(ContextTokens) and an output column (GeneratedTokens); got '" +
                             line.substr(0, 120) + "'");
      }
      n_cols = cells.size();
      continue;
    }
    if (cells.size() != n_cols) {
      return LineError(source, line_no,
                       "expected " + std::to_string(n_cols) + " comma-separated fields, got " +
                           std::to_string(cells.size()));
    }
    std::optional<double> t = ParseTimestamp(cells[col_time]);
    if (!t) {
      return LineError(source, line_no,
                       "bad timestamp '" + std::string(cells[col_time].substr(0, 40)) + "'");
    }
    std::optional<long long> input = ParseInt(cells[col_in]);
    std::optional<long long> output = ParseInt(cells[col_out]);
    if (!input || !output) {
      return LineError(source, line_no, "token counts must be integers");
    }
    KINFER_RETURN_IF_ERROR(Append(trace, source, line_no, *t, *input, *output));
  }
  if (col_time < 0) return InvalidArgument(std::string(source) + ": no header line");
  Normalize(trace);
  return trace;
}

StatusOr<Trace> ParseJsonlTrace(std::istream& in, std::string_view source) {
  Trace trace;
  trace.source = std::string(source);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (Trim(line).empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return LineError(source, line_no, "not a JSON object");
    }
    auto ts = j.find("timestamp");
    auto in_len = j.find("input_length");
    auto out_len = j.find("output_length");
    if (ts == j.end() || !ts->is_number()) {
      return LineError(source, line_no, "\"timestamp\" (milliseconds) missing or not a number");
    }
    if (in_len == j.end() || !in_len->is_number_integer() || out_len == j.end() ||
        !out_len->is_number_integer()) {
      return LineError(source, line_no, "\"input_length\" and \"output_length\" must be integers");
    }
    const double ms = ts->get<double>();
    if (!std::isfinite(ms)) return LineError(source, line_no, "timestamp is not finite");
    KINFER_RETURN_IF_ERROR(Append(trace, source, line_no, ms / 1000.0, in_len->get<long long>(),
                                  out_len->get<long long>()));
  }
  Normalize(trace);
  return trace;
}

StatusOr<Trace> LoadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open trace '" + path + "'");
  const bool jsonl = (path.size() >= 6 && path.ends_with(".jsonl")) || path.ends_with(".json");
  StatusOr<Trace> trace = jsonl ? ParseJsonlTrace(in, path) : ParseCsvTrace(in, path);
  if (trace.ok() && trace->requests.empty()) {
    return InvalidArgument("trace '" + path + "' has no request");
  }
  return trace;
}

Status ScaleTraceTime(Trace& trace, double factor) {
  if (!(factor > 0) || !std::isfinite(factor)) {
    return InvalidArgument("time scale must be a positive number, got " + std::to_string(factor));
  }
  for (TraceRequest& r : trace.requests) r.arrival_s *= factor;
  return Status::Ok();
}

Status ScaleTraceLengths(Trace& trace, double factor) {
  if (!(factor > 0) || !std::isfinite(factor)) {
    return InvalidArgument("length scale must be a positive number, got " + std::to_string(factor));
  }
  auto scaled = [factor](int tokens) {
    return static_cast<int>(std::clamp<double>(std::llround(tokens * factor), 1, 1 << 30));
  };
  for (TraceRequest& r : trace.requests) {
    r.input_tokens = scaled(r.input_tokens);
    r.output_tokens = scaled(r.output_tokens);
  }
  return Status::Ok();
}

Trace SliceTrace(const Trace& trace, double from_s, double to_s) {
  Trace out;
  out.source = trace.source;
  auto lo = std::lower_bound(trace.requests.begin(), trace.requests.end(), from_s,
                             [](const TraceRequest& r, double t) { return r.arrival_s < t; });
  auto hi = std::lower_bound(lo, trace.requests.end(), to_s,
                             [](const TraceRequest& r, double t) { return r.arrival_s < t; });
  out.requests.assign(lo, hi);
  return out;
}

Trace WithWarmup(const Trace& trace, double warmup_s) {
  Trace out = SliceTrace(trace, 0, warmup_s);
  out.source = trace.source;
  for (const TraceRequest& r : trace.requests) {
    out.requests.push_back(r);
    out.requests.back().arrival_s += warmup_s;
  }
  return out;
}

}  // namespace kinfer::sim
