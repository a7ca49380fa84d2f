// Trace: the requests that kinfer-sim replays, read from a CSV or a JSONL file.
//
// A trace is a list of requests, each with an arrival time (seconds from the first request) and
// its prompt and output lengths in tokens. Two formats are read:
//   * CSV with a header line. The arrival column is TIMESTAMP (or timestamp / arrival_time /
//     arrival_s), either a date-time "YYYY-MM-DD HH:MM:SS[.fraction]" (the Azure LLM inference
//     traces) or a number of seconds. The prompt column is ContextTokens (or input_length /
//     input_tokens / prompt_tokens), the output column GeneratedTokens (or output_length /
//     output_tokens / completion_tokens). Names are matched without regard to case.
//   * JSONL, one object a line: "timestamp" in milliseconds, "input_length", "output_length"
//     (Mooncake's synthetic_trace.jsonl); other keys are ignored.
// Arrival times are made relative to the earliest request and sorted (stable: equal times keep
// the file's order). An output length of 0 is read as 1 (every request yields a first token).
//
// Errors are values: a malformed line gives INVALID_ARGUMENT naming the source and the line
// number; nothing here throws or aborts on bad input.
//
// Thread safety: plain functions over values.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kinfer::sim {

struct TraceRequest {
  double arrival_s = 0;   // seconds since the trace's first request
  int input_tokens = 0;   // > 0
  int output_tokens = 1;  // >= 1
};

struct Trace {
  std::string source;                  // file name (for messages and reports)
  std::vector<TraceRequest> requests;  // sorted by arrival_s

  // Arrival time of the last request (0 for an empty trace).
  double span_s() const { return requests.empty() ? 0.0 : requests.back().arrival_s; }
};

// Parses CSV text. `source` names the input in error messages.
StatusOr<Trace> ParseCsvTrace(std::istream& in, std::string_view source);
// Parses JSONL text.
StatusOr<Trace> ParseJsonlTrace(std::istream& in, std::string_view source);
// Reads a file: ".jsonl" or ".json" is JSONL, anything else CSV. NOT_FOUND when it cannot be
// opened; otherwise as the parsers. An empty trace (no request) is INVALID_ARGUMENT.
StatusOr<Trace> LoadTrace(const std::string& path);

// Multiplies every arrival time by `factor` (> 0): 0.5 replays the trace twice as fast (twice
// the request rate), 2 half as fast. INVALID_ARGUMENT when factor is not a positive number.
Status ScaleTraceTime(Trace& trace, double factor);

// Multiplies every prompt and output length by `factor` (> 0), rounded, at least 1 token each:
// a trace of GPU-sized requests made to fit a smaller service model (kinfer-runtime on a CPU).
// INVALID_ARGUMENT when factor is not a positive number.
Status ScaleTraceLengths(Trace& trace, double factor);

// The requests with arrival in [from_s, to_s), arrival times kept as they are.
Trace SliceTrace(const Trace& trace, double from_s, double to_s);

// The trace delayed by warmup_s, preceded by a replay of its own first warmup_s seconds: a run
// on it reaches time warmup_s in the steady state that the trace's start implies. The original
// requests are the last trace.requests.size() of the result.
Trace WithWarmup(const Trace& trace, double warmup_s);

}  // namespace kinfer::sim
