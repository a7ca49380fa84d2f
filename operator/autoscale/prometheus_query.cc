#include "operator/autoscale/prometheus_query.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "operator/autoscale/prometheus_text.h"

namespace kinfer::autoscale {
namespace {

constexpr std::string_view kTtftBucket = "kinfer_sidecar_time_to_first_token_seconds_bucket";

std::string WithSelector(std::string_view metric, std::string_view selector) {
  return std::string(metric) + "{" + std::string(selector) + "}";
}

std::string FormatQuantile(double q) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", q);
  return buf;
}

StatusOr<double> ValueOf(const nlohmann::json& pair) {
  // [ <unix time>, "<value>" ]
  if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() || !pair[1].is_string()) {
    return InvalidArgument("a value is not [time, \"number\"]");
  }
  std::optional<double> v = ParsePromFloat(pair[1].get<std::string>());
  if (!v) return InvalidArgument("a value is not a number: " + pair[1].get<std::string>());
  return *v;
}

}  // namespace

std::string PromSelector(const std::vector<std::pair<std::string, std::string>>& matchers) {
  std::string out;
  for (const auto& [name, value] : matchers) {
    if (!out.empty()) out += ",";
    out += name + "=\"";
    for (char c : value) {
      if (c == '\\' || c == '"') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += "\"";
  }
  return out;
}

std::string QueueDepthByPodQuery(std::string_view selector) {
  return "sum by (pod) (" + WithSelector("kinfer_sidecar_queue_depth", selector) + ")";
}

std::string InFlightByPodQuery(std::string_view selector) {
  return "sum by (pod) (" + WithSelector("kinfer_sidecar_in_flight", selector) + ")";
}

std::string TtftBucketIncreaseByPodQuery(std::string_view selector, std::string_view window) {
  return "sum by (pod, le) (increase(" + WithSelector(kTtftBucket, selector) + "[" +
         std::string(window) + "]))";
}

std::string TtftQuantileQuery(double quantile, std::string_view selector, std::string_view window) {
  return "histogram_quantile(" + FormatQuantile(quantile) + ", sum by (le) (rate(" +
         WithSelector(kTtftBucket, selector) + "[" + std::string(window) + "])))";
}

std::string PrometheusQueryUrl(std::string_view server, std::string_view expr) {
  while (!server.empty() && server.back() == '/') server.remove_suffix(1);
  std::string out = std::string(server) + "/api/v1/query?query=";
  static const char* kHex = "0123456789ABCDEF";
  for (unsigned char c : expr) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

StatusOr<std::vector<PromQueryValue>> ParsePrometheusQueryResponse(std::string_view json) {
  nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument("answer is not a JSON object");
  auto status = doc.find("status");
  if (status == doc.end() || !status->is_string()) return InvalidArgument("answer has no status");
  if (*status != "success") {
    // value() throws on a field of another type: a proxy's or a broken server's answer must
    // not take the operator down.
    auto text = [&doc](const char* key, const char* fallback) {
      auto it = doc.find(key);
      return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
    };
    std::string type = text("errorType", "unknown");
    std::string error = text("error", "");
    return Unavailable("prometheus query failed: " + type + ": " + error);
  }
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_object()) return InvalidArgument("answer has no data");
  auto type = data->find("resultType");
  auto result = data->find("result");
  if (type == data->end() || !type->is_string() || result == data->end()) {
    return InvalidArgument("answer has no resultType or result");
  }
  std::vector<PromQueryValue> out;
  if (*type == "scalar") {
    KINFER_ASSIGN_OR_RETURN(double v, ValueOf(*result));
    out.push_back(PromQueryValue{{}, v, (*result)[0].get<double>()});
    return out;
  }
  if (*type != "vector") return InvalidArgument("unsupported resultType " + type->dump());
  if (!result->is_array()) return InvalidArgument("vector result is not an array");
  for (const nlohmann::json& element : *result) {
    if (!element.is_object()) return InvalidArgument("vector element is not an object");
    PromQueryValue item;
    auto metric = element.find("metric");
    if (metric != element.end()) {
      if (!metric->is_object()) return InvalidArgument("metric is not an object");
      for (const auto& [name, value] : metric->items()) {
        if (!value.is_string()) return InvalidArgument("label " + name + " is not a string");
        item.labels[name] = value.get<std::string>();
      }
    }
    auto value = element.find("value");
    if (value == element.end()) return InvalidArgument("vector element has no value");
    KINFER_ASSIGN_OR_RETURN(item.value, ValueOf(*value));
    item.timestamp_s = (*value)[0].get<double>();
    out.push_back(std::move(item));
  }
  return out;
}

std::vector<PodSample> PodSamplesFromPrometheus(
    const std::vector<std::pair<std::string, bool>>& pods,
    const std::vector<PromQueryValue>& queue_depth, const std::vector<PromQueryValue>& in_flight,
    const std::vector<PromQueryValue>& ttft_buckets) {
  auto by_pod = [](const std::vector<PromQueryValue>& values) {
    std::map<std::string, double> out;
    for (const PromQueryValue& v : values) {
      auto pod = v.labels.find("pod");
      if (pod != v.labels.end() && std::isfinite(v.value)) out[pod->second] += v.value;
    }
    return out;
  };
  std::map<std::string, double> depth = by_pod(queue_depth);
  std::map<std::string, double> flight = by_pod(in_flight);
  std::map<std::string, std::map<double, double>> buckets;  // pod -> le -> cumulative
  std::map<std::string, bool> bad;
  for (const PromQueryValue& v : ttft_buckets) {
    auto pod = v.labels.find("pod");
    auto le = v.labels.find("le");
    if (pod == v.labels.end()) continue;
    std::optional<double> edge = le == v.labels.end() ? std::nullopt : ParsePromFloat(le->second);
    if (!edge || std::isnan(*edge) || *edge == -std::numeric_limits<double>::infinity() ||
        !std::isfinite(v.value) || v.value < 0) {
      bad[pod->second] = true;
      continue;
    }
    buckets[pod->second][*edge] += v.value;
  }

  std::vector<PodSample> out;
  for (const auto& [name, ready] : pods) {
    PodSample s;
    s.pod = name;
    s.ready = ready;
    auto f = flight.find(name);
    s.has_metrics = f != flight.end();
    if (!s.has_metrics) {
      out.push_back(std::move(s));
      continue;
    }
    s.in_flight = f->second;
    auto d = depth.find(name);
    s.queue_depth = d == depth.end() ? 0 : d->second;
    auto b = buckets.find(name);
    if (b != buckets.end() && !bad.count(name) && !b->second.empty() &&
        std::isinf(b->second.rbegin()->first) && b->second.rbegin()->first > 0) {
      double previous = 0;
      bool any = false;
      for (const auto& [le, cumulative] : b->second) {
        // increase() per bucket may make the cumulative dip slightly; clamp at 0.
        double count = std::max(0.0, cumulative - previous);
        previous = std::max(previous, cumulative);
        if (!std::isinf(le)) s.ttft_upper_bounds.push_back(le);
        s.ttft_counts.push_back(static_cast<uint64_t>(std::llround(count)));
        any = any || s.ttft_counts.back() > 0;
      }
      if (!any) {
        s.ttft_upper_bounds.clear();
        s.ttft_counts.clear();
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

TtftQueryPlan PlanTtftQuery(std::optional<TimePoint> covered_to, TimePoint now,
                            Duration panic_window, Duration stable_window) {
  TtftQueryPlan plan;
  const auto seconds = [](Duration d) { return std::chrono::duration<double>(d).count(); };
  if (!covered_to || now - *covered_to > stable_window) {
    plan.ask = true;
    plan.range_s = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds(panic_window))));
    plan.covered_to = now;
    return plan;
  }
  plan.covered_to = *covered_to;
  const Duration elapsed = now - *covered_to;
  if (elapsed < std::max<Duration>(panic_window, std::chrono::seconds(1))) return plan;
  plan.ask = true;
  plan.range_s = static_cast<int64_t>(std::floor(seconds(elapsed)));  // >= 1; the rest carries
  plan.covered_to = *covered_to + std::chrono::seconds(plan.range_s);
  return plan;
}

}  // namespace kinfer::autoscale
