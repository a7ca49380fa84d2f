#include "operator/controller/autoscale_loop.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "operator/api/autoscaler_config.h"
#include "operator/api/inference_service.h"
#include "operator/autoscale/metrics_collector.h"
#include "operator/autoscale/prometheus_query.h"
#include "operator/reconcile/object_diff.h"
#include "operator/reconcile/pod_summary.h"

#include <future>

namespace kinfer::controller {

using nlohmann::json;

struct AutoscaleLoop::Entry {
  std::string uid;
  autoscale::Autoscaler scaler;
  autoscale::PodSampler sampler;
  std::optional<int> last_desired;
  double published_load = -1;
  double published_p99 = -1;
  std::optional<bool> published_missing;  // the ScalingActive status the last publish gave
  autoscale::TimePoint last_publish{};
  // Prometheus source only: where the TTFT ranges asked so far end (PlanTtftQuery).
  std::optional<autoscale::TimePoint> ttft_covered_to;
  explicit Entry(autoscale::Autoscaler s) : scaler(std::move(s)) {}
};

namespace {

using reconcile::At;

bool PodReady(const json& pod) {
  const json& conds = At(pod, {"status", "conditions"});
  if (!conds.is_array()) return false;
  for (const json& c : conds) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

std::string HostPort(const std::string& ip, int port) {
  if (ip.find(':') != std::string::npos) return "[" + ip + "]:" + std::to_string(port);
  return ip + ":" + std::to_string(port);
}

// A material change of an observed value worth a status refresh (10% or the first value).
bool Moved(double before, double now) {
  if (before < 0) return true;
  return std::fabs(now - before) > 0.1 * std::max(1.0, std::fabs(before));
}

std::string ReplaceAll(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

// The PromQL of one service (docs/crd.md): the built-in queries over the sidecars of its pods,
// or the spec's overrides, with $NAMESPACE, $NAME and $WINDOW replaced.
struct PromQueries {
  std::string queue_depth, in_flight, ttft_buckets;
};
PromQueries QueriesFor(const api::InferenceService& isvc, const api::PrometheusSourceSpec& p,
                       const std::string& window) {
  const std::string sel = "namespace=\"$NAMESPACE\", pod=~\"$NAME-.*\"";
  PromQueries q;
  q.queue_depth =
      p.queue_depth_query.empty() ? autoscale::QueueDepthByPodQuery(sel) : p.queue_depth_query;
  q.in_flight = p.in_flight_query.empty() ? autoscale::InFlightByPodQuery(sel) : p.in_flight_query;
  q.ttft_buckets = p.ttft_buckets_query.empty()
                       ? autoscale::TtftBucketIncreaseByPodQuery(sel, "$WINDOW")
                       : p.ttft_buckets_query;
  for (std::string* e : {&q.queue_depth, &q.in_flight, &q.ttft_buckets}) {
    *e = ReplaceAll(*e, "$NAMESPACE", isvc.metadata.namespace_name);
    *e = ReplaceAll(*e, "$NAME", isvc.metadata.name);
    *e = ReplaceAll(*e, "$WINDOW", window);
  }
  return q;
}

}  // namespace

AutoscaleLoop::AutoscaleLoop(Controller* controller, AutoscaleLoopOptions options,
                             OperatorMetrics* metrics)
    : controller_(controller), options_(std::move(options)), metrics_(metrics) {}

AutoscaleLoop::~AutoscaleLoop() { Stop(); }

void AutoscaleLoop::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void AutoscaleLoop::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

size_t AutoscaleLoop::tracked() const { return entries_.size(); }

void AutoscaleLoop::Run() {
  auto next = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    Tick(t0);
    metrics_->autoscaler_tick_seconds.Get().Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    l.lock();
    next += options_.interval;
    if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now();
    cv_.wait_until(l, next, [this] { return stop_; });
  }
}

void AutoscaleLoop::Tick(autoscale::TimePoint now) {
  struct Work {
    std::string key;
    Entry* entry = nullptr;
    int current = 0;
    // pods source: the range of this service's pods in `endpoints`.
    size_t first = 0, count = 0;
    // prometheus source: the pods (name, ready) and the index of its queries in `prom_urls`
    // (queue depth, in flight, then TTFT buckets when with_ttft).
    bool prometheus = false;
    std::vector<std::pair<std::string, bool>> pods;
    size_t query = 0;
    bool with_ttft = false;
    // The TTFT coverage once this tick's TTFT answer is in (PlanTtftQuery): stored only then, so
    // that a failed answer's range is asked again by the next plan instead of lost.
    autoscale::TimePoint ttft_covered_to{};
  };
  std::vector<Work> work;
  std::vector<autoscale::PodEndpoint> endpoints;
  std::vector<std::string> prom_urls;
  std::set<std::string> live;

  for (const json& object : controller_->InferenceServices()) {
    StatusOr<api::InferenceService> isvc = api::ParseInferenceService(object);
    if (!isvc.ok()) continue;
    const api::ObjectMeta& md = isvc->metadata;
    const std::string key = KeyOf(md.namespace_name, md.name);
    if (!isvc->spec.autoscaling.enabled ||
        !At(object, {"metadata", "deletionTimestamp"}).is_null()) {
      continue;
    }
    autoscale::AutoscalerConfig config = api::MakeAutoscalerConfig(isvc->spec);
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second->uid != md.uid) {
      entries_.erase(it);  // deleted and created again under the same name
      it = entries_.end();
    }
    if (it == entries_.end()) {
      StatusOr<autoscale::Autoscaler> scaler = autoscale::Autoscaler::Create(config);
      if (!scaler.ok()) continue;  // ParseInferenceService validated it; defensive
      auto entry = std::make_unique<Entry>(std::move(*scaler));
      entry->uid = md.uid;
      it = entries_.emplace(key, std::move(entry)).first;
    } else if (it->second->scaler.config() != config) {  // any field (operator== compares all)
      Status st = it->second->scaler.Reconfigure(config);
      if (!st.ok()) spdlog::warn("autoscaler {}: {}", key, st.ToString());
    }
    live.insert(key);
    Entry* entry = it->second.get();

    int current = config.min_replicas;
    std::optional<json> dep = controller_->Deployment(md.namespace_name, md.name);
    if (const json* r = dep ? &At(*dep, {"spec", "replicas"}) : nullptr; r && r->is_number()) {
      current = r->get<int>();
    } else if (isvc->status.desired_replicas) {
      current = *isvc->status.desired_replicas;
    }
    Work w;
    w.key = key;
    w.entry = entry;
    w.current = current;
    // The service's own Prometheus, else the operator-wide one (--metrics-source prometheus).
    std::optional<api::PrometheusSourceSpec> prom_spec;
    if (isvc->spec.autoscaling.metrics_source_type == "prometheus" &&
        isvc->spec.autoscaling.prometheus) {
      prom_spec = *isvc->spec.autoscaling.prometheus;
    } else if (!options_.prometheus_url.empty()) {
      prom_spec.emplace();
      prom_spec->url = options_.prometheus_url;
    }
    w.prometheus = prom_spec.has_value();
    if (!w.prometheus) w.first = endpoints.size();
    for (const json& pod : controller_->Pods(md.namespace_name, md.name)) {
      if (!At(pod, {"metadata", "deletionTimestamp"}).is_null() ||
          reconcile::PodTerminated(pod)) {
        continue;
      }
      autoscale::PodEndpoint ep;
      ep.pod = pod["metadata"].value("name", "");
      ep.ready = PodReady(pod);
      if (w.prometheus) {
        w.pods.emplace_back(ep.pod, ep.ready);
        continue;
      }
      if (options_.address_of) ep.address = options_.address_of(pod);
      if (ep.address.empty()) {
        const json& ip = At(pod, {"status", "podIP"});
        if (!ip.is_string() || ip.get<std::string>().empty()) {
          ep.ready = false;  // no address yet: starting
        } else {
          ep.address = HostPort(ip.get<std::string>(), options_.sidecar_port);
        }
      }
      endpoints.push_back(std::move(ep));
      ++w.count;
    }
    if (w.prometheus) {
      // TTFT increases are asked about once per panic window, over ranges that follow one
      // another (PlanTtftQuery): each observation counted once (a query every tick over the
      // window would count it window/interval times; fixed ranges at uneven ticks miss some).
      const autoscale::TtftQueryPlan plan = autoscale::PlanTtftQuery(
          entry->ttft_covered_to, now, autoscale::Autoscaler::PanicWindow(config),
          config.stable_window);
      PromQueries q = QueriesFor(*isvc, *prom_spec, std::to_string(plan.range_s) + "s");
      const std::string& server = prom_spec->url;
      w.query = prom_urls.size();
      prom_urls.push_back(autoscale::PrometheusQueryUrl(server, q.queue_depth));
      prom_urls.push_back(autoscale::PrometheusQueryUrl(server, q.in_flight));
      w.with_ttft = plan.ask;
      if (w.with_ttft) {
        prom_urls.push_back(autoscale::PrometheusQueryUrl(server, q.ttft_buckets));
        w.ttft_covered_to = plan.covered_to;
      }
    }
    work.push_back(std::move(w));
  }
  // Services no longer autoscaled (deleted, autoscaling off, invalid): forget their state.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (live.count(it->first) == 0) {
      controller_->SetDecision(it->first, std::nullopt, /*enqueue=*/false);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  if (work.empty()) return;

  // Both sources at once: the sidecars' pages and the Prometheus queries, each with a timeout.
  std::future<std::vector<std::pair<Status, std::string>>> prom;
  if (!prom_urls.empty()) {
    prom = std::async(std::launch::async, [&prom_urls, this] {
      return autoscale::HttpGetAll(prom_urls, options_.scrape_timeout);
    });
  }
  autoscale::CollectorOptions co;
  co.timeout = options_.scrape_timeout;
  std::vector<autoscale::PodScrape> scrapes = autoscale::ScrapeAll(endpoints, co);
  std::vector<std::pair<Status, std::string>> answers;
  if (prom.valid()) answers = prom.get();
  auto parse = [&](size_t i) -> std::optional<std::vector<autoscale::PromQueryValue>> {
    if (!answers[i].first.ok()) {
      metrics_->autoscaler_scrape_errors.Get().Inc();
      spdlog::debug("prometheus query failed: {}", answers[i].first.ToString());
      return std::nullopt;
    }
    auto v = autoscale::ParsePrometheusQueryResponse(answers[i].second);
    if (!v.ok()) {
      metrics_->autoscaler_scrape_errors.Get().Inc();
      spdlog::debug("prometheus answer refused: {}", v.status().ToString());
      return std::nullopt;
    }
    return std::move(*v);
  };

  for (Work& w : work) {
    std::vector<autoscale::PodSample> samples;
    if (w.prometheus) {
      auto queue = parse(w.query);
      auto in_flight = parse(w.query + 1);
      std::optional<std::vector<autoscale::PromQueryValue>> ttft;
      if (w.with_ttft) ttft = parse(w.query + 2);
      // The pods path's baselines mean nothing after a stretch here: were the service to read
      // its pods again, their first deltas would hold everything since (forgotten now).
      (void)w.entry->sampler.Sample({});
      if (queue && in_flight) {
        // Without a TTFT answer the tick has its gauges and no first tokens, and the range stays
        // uncovered: the next tick asks it again (with what has come since).
        samples = autoscale::PodSamplesFromPrometheus(
            w.pods, *queue, *in_flight, ttft.value_or(std::vector<autoscale::PromQueryValue>{}));
        if (ttft) w.entry->ttft_covered_to = w.ttft_covered_to;
      } else {  // no answer: every ready pod is missing (the freeze rule decides)
        for (const auto& [pod, ready] : w.pods) {
          autoscale::PodSample s;
          s.pod = pod;
          s.ready = ready;
          s.has_metrics = false;
          samples.push_back(std::move(s));
        }
      }
    } else {
      std::vector<autoscale::PodScrape> mine(
          std::make_move_iterator(scrapes.begin() + static_cast<long>(w.first)),
          std::make_move_iterator(scrapes.begin() + static_cast<long>(w.first + w.count)));
      for (const autoscale::PodScrape& s : mine) {
        if (s.ready && !s.status.ok()) metrics_->autoscaler_scrape_errors.Get().Inc();
      }
      samples = w.entry->sampler.Sample(mine);
      // Prometheus coverage means nothing after a stretch of scraping: were the service to read
      // Prometheus again, it would ask for a range the pods already delivered.
      w.entry->ttft_covered_to.reset();
    }
    autoscale::Decision d = w.entry->scaler.Tick(now, w.current, samples);
    metrics_->autoscaler_decisions.WithLabels({d.reason}).Inc();
    const double p99 = d.p99_ttft_panic.value_or(0);
    // ScalingActive follows whether metrics are missing: a change there is published at once
    // (a NetworkPolicy that blocks the scrape shows within a tick, not at the next resync).
    const bool missing = d.reason == "metrics_missing";
    bool publish = !w.entry->last_desired || *w.entry->last_desired != d.desired ||
                   w.entry->published_missing != missing;
    if (!publish && now - w.entry->last_publish >= options_.status_refresh &&
        (Moved(w.entry->published_load, d.observed_load) || Moved(w.entry->published_p99, p99))) {
      publish = true;
    }
    if (publish) {
      w.entry->last_desired = d.desired;
      w.entry->published_missing = missing;
      w.entry->published_load = d.observed_load;
      w.entry->published_p99 = p99;
      w.entry->last_publish = now;
    }
    // The decision is always recorded (any reconcile reads the latest), but only a publish
    // queues one.
    controller_->SetDecision(w.key, std::move(d), publish);
  }
}

}  // namespace kinfer::controller
