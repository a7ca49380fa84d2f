#include "common/metrics/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kinfer::metrics {

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void Counter::Inc(double v) {
  if (!(v >= 0.0)) return;  // also rejects NaN
  value_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // Bucket i holds bounds_[i-1] < v <= bounds_[i]; the last one is +Inf. Bucket lists are short
  // (~20), so a linear scan is as fast as a binary search and simpler.
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Snap() const {
  Snapshot s;
  s.upper_bounds = bounds_;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = running;
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

namespace {

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

Status ValidateMetricName(std::string_view name) {
  if (name.empty()) return InvalidArgument("metric name is empty");
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = IsNameStart(c) || c == ':' || (i > 0 && IsDigit(c));
    if (!ok) {
      return InvalidArgument("metric name '" + std::string(name) +
                             "' must match [a-zA-Z_:][a-zA-Z0-9_:]*");
    }
  }
  return Status::Ok();
}

Status ValidateLabelName(std::string_view name) {
  if (name.empty()) return InvalidArgument("label name is empty");
  if (name.substr(0, 2) == "__") {
    return InvalidArgument("label name '" + std::string(name) + "' is reserved (starts with __)");
  }
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (!(IsNameStart(c) || (i > 0 && IsDigit(c)))) {
      return InvalidArgument("label name '" + std::string(name) +
                             "' must match [a-zA-Z_][a-zA-Z0-9_]*");
    }
  }
  return Status::Ok();
}

Status ValidateBuckets(const std::vector<double>& upper_bounds) {
  if (upper_bounds.empty()) return InvalidArgument("a histogram needs at least one bucket");
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i])) {
      return InvalidArgument("bucket bounds must be finite (+Inf is implicit)");
    }
    if (i > 0 && !(upper_bounds[i] > upper_bounds[i - 1])) {
      return InvalidArgument("bucket bounds must be strictly increasing");
    }
  }
  return Status::Ok();
}

void DieLabelArity(const std::string& name, size_t want, size_t got) {
  std::fprintf(stderr, "metrics: %s has %zu labels, got %zu values\n", name.c_str(), want, got);
  std::abort();
}

void Registry::CheckOrDie(const Status& s) const {
  if (s.ok()) return;
  std::fprintf(stderr, "metrics: registration error: %s\n", s.ToString().c_str());
  std::abort();
}

bool Registry::HasName(std::string_view name) const {
  for (const auto& f : families_) {
    if (f->name() == name) return true;
  }
  return false;
}

namespace {

Status ValidateFamily(std::string_view name, MetricType type,
                      const std::vector<std::string>& labels) {
  KINFER_RETURN_IF_ERROR(ValidateMetricName(name));
  if (type == MetricType::kCounter &&
      (name.size() < 6 || name.substr(name.size() - 6) != "_total")) {
    return InvalidArgument("counter '" + std::string(name) + "' must end in _total");
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    KINFER_RETURN_IF_ERROR(ValidateLabelName(labels[i]));
    if (type == MetricType::kHistogram && labels[i] == "le") {
      return InvalidArgument("histogram '" + std::string(name) + "' may not have a label 'le'");
    }
    for (size_t j = 0; j < i; ++j) {
      if (labels[j] == labels[i]) return InvalidArgument("duplicate label '" + labels[i] + "'");
    }
  }
  return Status::Ok();
}

}  // namespace

Family<Counter>& Registry::AddCounter(std::string name, std::string help,
                                      std::vector<std::string> label_names) {
  CheckOrDie(ValidateFamily(name, MetricType::kCounter, label_names));
  std::lock_guard<std::mutex> lock(mu_);
  if (HasName(name)) CheckOrDie(InvalidArgument("duplicate metric '" + name + "'"));
  // Family's constructor is private to the Registry, hence new (owned at once).
  std::unique_ptr<Family<Counter>> owned(new Family<Counter>(
      std::move(name), std::move(help), MetricType::kCounter, std::move(label_names), {}));
  Family<Counter>* f = owned.get();
  families_.push_back(std::move(owned));
  if (f->label_names().empty()) f->Get();  // expose 0 before the first event
  return *f;
}

Family<Gauge>& Registry::AddGauge(std::string name, std::string help,
                                  std::vector<std::string> label_names) {
  CheckOrDie(ValidateFamily(name, MetricType::kGauge, label_names));
  std::lock_guard<std::mutex> lock(mu_);
  if (HasName(name)) CheckOrDie(InvalidArgument("duplicate metric '" + name + "'"));
  // Family's constructor is private to the Registry, hence new (owned at once).
  std::unique_ptr<Family<Gauge>> owned(new Family<Gauge>(
      std::move(name), std::move(help), MetricType::kGauge, std::move(label_names), {}));
  Family<Gauge>* f = owned.get();
  families_.push_back(std::move(owned));
  if (f->label_names().empty()) f->Get();
  return *f;
}

Family<Histogram>& Registry::AddHistogram(std::string name, std::string help,
                                          std::vector<double> buckets,
                                          std::vector<std::string> label_names) {
  CheckOrDie(ValidateFamily(name, MetricType::kHistogram, label_names));
  CheckOrDie(ValidateBuckets(buckets));
  std::lock_guard<std::mutex> lock(mu_);
  if (HasName(name)) CheckOrDie(InvalidArgument("duplicate metric '" + name + "'"));
  // Family's constructor is private to the Registry, hence new (owned at once).
  std::unique_ptr<Family<Histogram>> owned(
      new Family<Histogram>(std::move(name), std::move(help), MetricType::kHistogram,
                            std::move(label_names), std::move(buckets)));
  Family<Histogram>* f = owned.get();
  families_.push_back(std::move(owned));
  if (f->label_names().empty()) f->Get();
  return *f;
}

std::string Registry::ExposeText() const {
  std::string out;
  out.reserve(4096);
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& f : families_) f->AppendText(&out);
  return out;
}

}  // namespace kinfer::metrics
