// Metrics: counters, gauges and histograms with labels, kept in one Registry and exposed in the
// Prometheus text format 0.0.4 (see common/metrics/text_format.h).
//
// Usage (declare a component's metrics in one place, then update them on the hot path):
//   Registry reg;
//   auto& requests = reg.AddCounter("kinfer_runtime_requests_total", "Requests.", {"status"});
//   requests.WithLabels({"ok"}).Inc();
//   auto& ttft = reg.AddHistogram("kinfer_runtime_time_to_first_token_seconds", "TTFT.",
//                                 {0.05, 0.1, 0.5, 1, 5});
//   ttft.Get().Observe(0.07);
//   std::string page = reg.ExposeText();
//
// Thread safety: every method of every class here may be called from any thread.
//   - Counter, Gauge and Histogram updates are lock-free atomics (relaxed: metrics need no
//   ordering).
//   - Family::WithLabels takes the family's mutex to find or create the child; hot paths should
//     keep the returned reference (it stays valid for the Registry's lifetime) instead of looking
//     it up per event.
//   - Registry::Add* and ExposeText take the registry's mutex. A scrape reads each value
//   atomically,
//     so it never sees a torn value; a histogram's _count is computed from its bucket counts, so
//     le="+Inf" always equals _count (_sum may lag by the observations racing the scrape).
//
// Registration errors (invalid names, duplicates, a counter not ending in _total, a histogram with
// a label named "le", unsorted buckets) are programming errors: Add* prints the reason and aborts.
// Validate*() exposes the same checks as Status values for tests and dynamic names.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kinfer::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };
// "counter", "gauge", "histogram".
const char* MetricTypeName(MetricType type);

// A monotonically increasing value (requests, tokens).
class Counter {
 public:
  // Adds `v`. REQUIRES: v >= 0; negative or NaN values are ignored (a counter never goes down).
  void Inc(double v = 1.0);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A value that goes up and down (queue depth, cache usage).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Inc(double v = 1.0) { value_.fetch_add(v, std::memory_order_relaxed); }
  void Dec(double v = 1.0) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Observations counted into buckets with fixed upper bounds (inclusive, like Prometheus `le`),
// plus an implicit +Inf bucket.
class Histogram {
 public:
  // REQUIRES: `upper_bounds` finite and strictly increasing (checked by ValidateBuckets).
  explicit Histogram(std::vector<double> upper_bounds);

  // NaN observations are ignored.
  void Observe(double v);

  struct Snapshot {
    std::vector<double> upper_bounds;  // without +Inf
    std::vector<uint64_t> cumulative;  // one per bound, then one for +Inf (== count)
    uint64_t count = 0;
    double sum = 0.0;
  };
  Snapshot Snap() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative; size bounds+1
  std::atomic<double> sum_{0.0};
};

// What the exposition needs from a family, independent of its metric type.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  MetricType type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends this family's HELP, TYPE and samples to *out.
  virtual void AppendText(std::string* out) const = 0;

 protected:
  FamilyBase(std::string name, std::string help, MetricType type, std::vector<std::string> labels)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(type),
        label_names_(std::move(labels)) {}

 private:
  std::string name_;
  std::string help_;
  MetricType type_;
  std::vector<std::string> label_names_;
};

// Appends one metric's samples (text format) for one label set. Defined in text_format.cc.
void AppendSamples(std::string* out, const std::string& name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, const Counter& c);
void AppendSamples(std::string* out, const std::string& name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, const Gauge& g);
void AppendSamples(std::string* out, const std::string& name,
                   const std::vector<std::string>& label_names,
                   const std::vector<std::string>& label_values, const Histogram& h);
// "# HELP name help\n# TYPE name type\n" with the help text escaped.
void AppendHeader(std::string* out, const FamilyBase& family);

// All the children of one metric name, one per label-value tuple. Owned by the Registry.
template <typename M>
class Family final : public FamilyBase {
 public:
  // The child for these label values, created on first use. The reference stays valid for the
  // Registry's lifetime. REQUIRES: values.size() == label_names().size() (aborts otherwise).
  M& WithLabels(const std::vector<std::string>& values);
  // The child of a family without labels.
  M& Get() { return WithLabels({}); }

  void AppendText(std::string* out) const override;

 private:
  friend class Registry;
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> labels,
         std::vector<double> buckets)
      : FamilyBase(std::move(name), std::move(help), type, std::move(labels)),
        buckets_(std::move(buckets)) {}
  std::unique_ptr<M> Make() const;

  std::vector<double> buckets_;  // histograms only
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> children_;  // guarded by mu_
};

// Holds every family of a process (or of a component under test) in registration order.
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Registers a family. Aborts with a message on an invalid or duplicate name (see top).
  Family<Counter>& AddCounter(std::string name, std::string help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(std::string name, std::string help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(std::string name, std::string help, std::vector<double> buckets,
                                  std::vector<std::string> label_names = {});

  // The whole registry in the Prometheus text format 0.0.4: one group per family, in
  // registration order, HELP and TYPE first; children sorted by label values.
  std::string ExposeText() const;

 private:
  void CheckOrDie(const Status& s) const;
  bool HasName(std::string_view name) const;  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<FamilyBase>> families_;  // guarded by mu_
};

// The Content-Type of ExposeText()'s output.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Name rules of the data model: metric [a-zA-Z_:][a-zA-Z0-9_:]*, label [a-zA-Z_][a-zA-Z0-9_]*
// and not starting with "__". INVALID_ARGUMENT names the rule broken.
Status ValidateMetricName(std::string_view name);
Status ValidateLabelName(std::string_view name);
// Finite, strictly increasing, at least one bound.
Status ValidateBuckets(const std::vector<double>& upper_bounds);

// ---- template implementation ----------------------------------------------------------------

[[noreturn]] void DieLabelArity(const std::string& name, size_t want, size_t got);

template <typename M>
M& Family<M>::WithLabels(const std::vector<std::string>& values) {
  if (values.size() != label_names().size())
    DieLabelArity(name(), label_names().size(), values.size());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(values);
  if (it == children_.end()) it = children_.emplace(values, Make()).first;
  return *it->second;
}

template <typename M>
void Family<M>::AppendText(std::string* out) const {
  AppendHeader(out, *this);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [values, metric] : children_) {
    AppendSamples(out, name(), label_names(), values, *metric);
  }
}

template <typename M>
std::unique_ptr<M> Family<M>::Make() const {
  if constexpr (std::is_same_v<M, Histogram>) {
    return std::make_unique<Histogram>(buckets_);
  } else {
    return std::make_unique<M>();
  }
}

}  // namespace kinfer::metrics
