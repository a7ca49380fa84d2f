#include "operator/autoscale/pod_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <utility>

namespace kinfer::autoscale {
namespace {

// A series' identity: its labels other than `le`, sorted.
std::vector<std::pair<std::string, std::string>> SeriesKey(const PromSample& s) {
  std::vector<std::pair<std::string, std::string>> key;
  for (const auto& label : s.labels) {
    if (label.first != "le") key.push_back(label);
  }
  std::sort(key.begin(), key.end());
  return key;
}

// Counts are whole numbers; anything else is not a counter this parser trusts.
bool ToCount(double v, uint64_t* out) {
  if (!std::isfinite(v) || v < 0 || v > 9.0e18) return false;
  *out = static_cast<uint64_t>(std::llround(v));
  return true;
}

}  // namespace

StatusOr<CumulativeHistogram> ExtractHistogram(const PromPage& page, std::string_view metric) {
  const std::string bucket_name = std::string(metric) + "_bucket";
  // series -> (le -> cumulative count)
  std::map<std::vector<std::pair<std::string, std::string>>, std::map<double, uint64_t>> series;
  for (const PromSample* s : page.Find(bucket_name)) {
    const std::string* le_text = s->Label("le");
    if (le_text == nullptr) return InvalidArgument(bucket_name + " sample without le");
    std::optional<double> le = ParsePromFloat(*le_text);
    if (!le || std::isnan(*le) || *le == -std::numeric_limits<double>::infinity()) {
      return InvalidArgument(bucket_name + " has a bad le \"" + *le_text + "\"");
    }
    uint64_t count = 0;
    if (!ToCount(s->value, &count)) return InvalidArgument(bucket_name + " has a bad count");
    if (!series[SeriesKey(*s)].emplace(*le, count).second) {
      return InvalidArgument(bucket_name + " repeats a bucket");
    }
  }
  if (series.empty()) return NotFound("no " + bucket_name + " series");

  const std::map<double, uint64_t>& first = series.begin()->second;
  if (first.empty() || !std::isinf(first.rbegin()->first)) {
    return InvalidArgument(bucket_name + " has no +Inf bucket");
  }
  CumulativeHistogram out;
  std::vector<uint64_t> cumulative(first.size(), 0);
  for (const auto& [key, buckets] : series) {
    if (buckets.size() != first.size() ||
        !std::equal(buckets.begin(), buckets.end(), first.begin(),
                    [](const auto& a, const auto& b) { return a.first == b.first; })) {
      return InvalidArgument(bucket_name + " series have different edges");
    }
    size_t i = 0;
    uint64_t previous = 0;
    for (const auto& [le, count] : buckets) {
      if (count < previous) return InvalidArgument(bucket_name + " counts decrease with le");
      previous = count;
      cumulative[i++] += count;
    }
  }
  for (const auto& [le, count] : first) {
    if (!std::isinf(le)) out.upper_bounds.push_back(le);
  }
  out.counts.resize(cumulative.size());
  for (size_t i = 0; i < cumulative.size(); ++i) {
    out.counts[i] = cumulative[i] - (i == 0 ? 0 : cumulative[i - 1]);
  }
  return out;
}

PodSample PodSampler::SamplePage(const std::string& pod, bool ready, const PromPage* page) {
  PodSample sample;
  sample.pod = pod;
  sample.ready = ready;
  sample.has_metrics = false;
  std::vector<const PromSample*> in_flight;
  if (page != nullptr) in_flight = page->Find(options_.in_flight_metric);
  if (in_flight.empty()) {
    // No sample: the autoscaler fills this pod's share in from the others, or freezes the tick.
    // Its observations meanwhile are not delivered later on top of that (counted twice, or a
    // freeze's worth landing in one tick): the next page starts a new baseline.
    previous_.erase(pod);
    return sample;
  }
  sample.has_metrics = true;
  for (const PromSample* s : in_flight) sample.in_flight += s->value;
  for (const PromSample* s : page->Find(options_.queue_depth_metric))
    sample.queue_depth += s->value;

  StatusOr<CumulativeHistogram> current = ExtractHistogram(*page, options_.ttft_metric);
  if (!current.ok()) {
    // No series yet: the baseline is "nothing observed", so the first series that appear count
    // whole. A malformed page leaves the baseline as it was.
    // (Only a pod without a baseline gets the empty one: a page that lacks the series once, with
    // a real baseline kept, would otherwise deliver the sidecar's lifetime counts next.)
    if (current.status().code() == StatusCode::kNotFound) previous_.try_emplace(pod);
    return sample;
  }
  auto it = previous_.find(pod);
  if (it == previous_.end()) {
    previous_.emplace(pod, std::move(current).value());
    return sample;  // the first scrape is the baseline
  }
  const CumulativeHistogram& before = it->second;
  // The count sizes too: an empty baseline (no series yet) and a +Inf-only histogram have the
  // same (no) finite edges, and indexing the empty counts crashed the operator.
  bool reset = before.upper_bounds != current->upper_bounds ||
               before.counts.size() != current->counts.size();
  for (size_t i = 0; !reset && i < current->counts.size(); ++i) {
    reset = current->counts[i] < before.counts[i];
  }
  sample.ttft_upper_bounds = current->upper_bounds;
  sample.ttft_counts = current->counts;
  if (!reset) {
    for (size_t i = 0; i < sample.ttft_counts.size(); ++i)
      sample.ttft_counts[i] -= before.counts[i];
  }
  bool any = std::any_of(sample.ttft_counts.begin(), sample.ttft_counts.end(),
                         [](uint64_t c) { return c > 0; });
  if (!any) {
    sample.ttft_upper_bounds.clear();
    sample.ttft_counts.clear();
  }
  it->second = std::move(current).value();
  return sample;
}

std::vector<PodSample> PodSampler::Sample(const std::vector<PodScrape>& scrapes) {
  std::vector<PodSample> out;
  out.reserve(scrapes.size());
  std::set<std::string, std::less<>> listed;
  for (const PodScrape& scrape : scrapes) {
    listed.insert(scrape.pod);
    if (!scrape.status.ok()) {
      out.push_back(SamplePage(scrape.pod, scrape.ready, nullptr));
      continue;
    }
    StatusOr<PromPage> page = ParsePrometheusText(scrape.body);
    out.push_back(SamplePage(scrape.pod, scrape.ready, page.ok() ? &page.value() : nullptr));
  }
  for (auto it = previous_.begin(); it != previous_.end();) {
    it = listed.count(it->first) ? std::next(it) : previous_.erase(it);
  }
  return out;
}

}  // namespace kinfer::autoscale
