// TtftHistogram: the pods' TTFT histogram deltas merged into one, and its quantiles computed the
// way Prometheus' histogram_quantile() computes them. Used by the Autoscaler for the P99 over the
// panic and stable windows.
//
// Contract:
//  * A histogram is `upper_bounds` (finite bucket edges in seconds, strictly increasing, without
//    +Inf) and `counts` (one count per edge plus one for +Inf, NOT cumulative). Bucket i holds
//    observations in (upper_bounds[i-1], upper_bounds[i]]; the first bucket's lower end is 0 (or
//    -Inf when its edge is <= 0), the last count is (upper_bounds.back(), +Inf).
//  * Merging: histograms with the same edges add count by count. Histograms with different edges
//    are merged onto the union of the edges: each source bucket's count is spread over the union
//    buckets inside it in proportion to their width (observations are taken to be uniform within a
//    bucket, the same assumption Quantile() interpolates with), so counts become fractional. A
//    source's +Inf count stays in the +Inf bucket. Sidecars normally share edges; the union only
//    keeps a misconfigured fleet from breaking the P99.
//  * Quantile(q) (Prometheus histogram_quantile): rank = q * total; the first bucket whose
//    cumulative count reaches the rank holds the quantile, linearly interpolated between the
//    bucket's lower and upper edge; a rank in the +Inf bucket answers the highest finite edge (a
//    lower bound of the truth); a rank in a first bucket whose edge is <= 0 answers that edge.
//    nullopt when the histogram holds no observation, has no finite edge, or q is NaN.
//  * Malformed input (edges not finite or not increasing, wrong number of counts) is refused by
//    Add(), which returns false and leaves the histogram as it was.
//
// Thread safety: a plain value; not thread-safe for concurrent writes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace kinfer::autoscale {

// True when `upper_bounds` is finite and strictly increasing and there are upper_bounds.size() + 1
// counts.
bool IsWellFormedHistogram(const std::vector<double>& upper_bounds, size_t num_counts);

class TtftHistogram {
 public:
  TtftHistogram() = default;

  // Adds a pod's histogram delta. Returns false (adding nothing) when it is malformed; an all-zero
  // or empty (no edges, no counts) histogram is accepted and adds nothing.
  bool Add(const std::vector<double>& upper_bounds, const std::vector<uint64_t>& counts);
  bool Add(const std::vector<double>& upper_bounds, const std::vector<double>& counts);
  void Add(const TtftHistogram& other);

  // The union of the edges added so far, and one count per edge plus +Inf (empty before the
  // first non-empty Add).
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  const std::vector<double>& counts() const { return counts_; }
  // Number of observations (the sum of the counts).
  double total() const { return total_; }
  bool empty() const { return total_ <= 0; }

  // The q-quantile as histogram_quantile(q, ...) answers it (see the contract above).
  std::optional<double> Quantile(double q) const;

 private:
  template <typename Count>
  bool AddCounts(const std::vector<double>& upper_bounds, const std::vector<Count>& counts);

  std::vector<double> upper_bounds_;
  std::vector<double> counts_;
  double total_ = 0;
};

// histogram_quantile(q) of one histogram given as above (`counts` may be fractional). nullopt for
// a malformed histogram too.
std::optional<double> HistogramQuantile(double q, const std::vector<double>& upper_bounds,
                                        const std::vector<double>& counts);

}  // namespace kinfer::autoscale
