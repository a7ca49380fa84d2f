#include "operator/autoscale/ttft_histogram.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace kinfer::autoscale {
namespace {

// The lower end of bucket i of a histogram with edges `b` (see the contract in the header).
double LowerEdge(const std::vector<double>& b, size_t i) {
  if (i > 0) return b[i - 1];
  return b[0] > 0 ? 0.0 : b[0];  // a first edge <= 0 makes a zero-width (-Inf, edge] bucket
}

// Spreads a histogram with edges `src` onto `dst`, a superset of `src`, adding into `out` (one
// entry per dst edge plus +Inf). Each source bucket's count goes to the dst buckets inside it in
// proportion to their width; the last dst bucket of the range takes the rounding remainder so
// that the total is kept exactly.
template <typename Count>
void Rebucket(const std::vector<double>& src, const std::vector<Count>& counts,
              const std::vector<double>& dst, std::vector<double>& out) {
  for (size_t i = 0; i < src.size(); ++i) {
    const double c = static_cast<double>(counts[i]);
    if (c == 0) continue;
    const double hi = src[i];
    const double lo = LowerEdge(src, i);
    // hi is one of dst's edges: the dst bucket ending there.
    const size_t last =
        static_cast<size_t>(std::lower_bound(dst.begin(), dst.end(), hi) - dst.begin());
    if (!(hi > lo)) {
      out[last] += c;
      continue;
    }
    const size_t first =
        static_cast<size_t>(std::upper_bound(dst.begin(), dst.end(), lo) - dst.begin());
    double assigned = 0;
    for (size_t j = first; j < last; ++j) {
      const double lower = j == first ? lo : dst[j - 1];
      const double share = c * (dst[j] - lower) / (hi - lo);
      out[j] += share;
      assigned += share;
    }
    out[last] += c - assigned;
  }
  out[dst.size()] += static_cast<double>(counts[src.size()]);
}

}  // namespace

bool IsWellFormedHistogram(const std::vector<double>& upper_bounds, size_t num_counts) {
  if (num_counts != upper_bounds.size() + 1) return false;
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i])) return false;
    if (i > 0 && !(upper_bounds[i] > upper_bounds[i - 1])) return false;
  }
  return true;
}

template <typename Count>
bool TtftHistogram::AddCounts(const std::vector<double>& upper_bounds,
                              const std::vector<Count>& counts) {
  if (upper_bounds.empty() && counts.empty()) return true;  // a pod that saw no request
  if (!IsWellFormedHistogram(upper_bounds, counts.size())) return false;
  double sum = 0;
  for (const Count c : counts) {
    const double v = static_cast<double>(c);
    if (!(v >= 0) || !std::isfinite(v)) return false;
    sum += v;
  }
  if (sum == 0) return true;
  if (counts_.empty()) {
    upper_bounds_ = upper_bounds;
    counts_.assign(counts.begin(), counts.end());
  } else if (upper_bounds == upper_bounds_) {
    for (size_t i = 0; i < counts.size(); ++i) counts_[i] += static_cast<double>(counts[i]);
  } else {
    std::vector<double> merged_edges;
    merged_edges.reserve(upper_bounds_.size() + upper_bounds.size());
    std::set_union(upper_bounds_.begin(), upper_bounds_.end(), upper_bounds.begin(),
                   upper_bounds.end(), std::back_inserter(merged_edges));
    std::vector<double> merged(merged_edges.size() + 1, 0.0);
    Rebucket(upper_bounds_, counts_, merged_edges, merged);
    Rebucket(upper_bounds, counts, merged_edges, merged);
    upper_bounds_ = std::move(merged_edges);
    counts_ = std::move(merged);
  }
  total_ += sum;
  return true;
}

bool TtftHistogram::Add(const std::vector<double>& upper_bounds,
                        const std::vector<uint64_t>& counts) {
  return AddCounts(upper_bounds, counts);
}

bool TtftHistogram::Add(const std::vector<double>& upper_bounds,
                        const std::vector<double>& counts) {
  return AddCounts(upper_bounds, counts);
}

void TtftHistogram::Add(const TtftHistogram& other) {
  if (!other.counts_.empty()) AddCounts(other.upper_bounds_, other.counts_);
}

std::optional<double> TtftHistogram::Quantile(double q) const {
  return HistogramQuantile(q, upper_bounds_, counts_);
}

std::optional<double> HistogramQuantile(double q, const std::vector<double>& upper_bounds,
                                        const std::vector<double>& counts) {
  if (std::isnan(q) || upper_bounds.empty()) return std::nullopt;
  if (!IsWellFormedHistogram(upper_bounds, counts.size())) return std::nullopt;
  double total = 0;
  for (const double c : counts) total += c;
  if (!(total > 0)) return std::nullopt;
  q = std::clamp(q, 0.0, 1.0);
  double rank = q * total;
  // Merged counts are fractional: forgive the rounding of the running sum at the top.
  const double slack = total * 1e-12;
  double below = 0;  // cumulative count of the buckets before b
  for (size_t b = 0; b < upper_bounds.size(); ++b) {
    // The first non-empty bucket whose cumulative count reaches the rank (a rank of 0 answers the
    // lower edge of the first non-empty bucket instead of Prometheus' 0/0).
    if (counts[b] > 0 && below + counts[b] + slack >= rank) {
      if (b == 0 && upper_bounds[0] <= 0) return upper_bounds[0];
      const double start = LowerEdge(upper_bounds, b);
      const double end = upper_bounds[b];
      const double fraction = std::clamp((rank - below) / counts[b], 0.0, 1.0);
      return start + (end - start) * fraction;
    }
    below += counts[b];
  }
  return upper_bounds.back();  // the rank is in the +Inf bucket
}

}  // namespace kinfer::autoscale
