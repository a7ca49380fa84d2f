#include "bench/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <queue>
#include <random>

#include "bench/sim/stats.h"

namespace kinfer::sim {

std::vector<double> DefaultTtftEdges() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

std::vector<double> TtftEdgesWithSlo(double slo_s) {
  std::vector<double> edges = DefaultTtftEdges();
  if (slo_s > 0) {
    auto it = std::lower_bound(edges.begin(), edges.end(), slo_s);
    if (it == edges.end() || *it != slo_s) edges.insert(it, slo_s);
  }
  return edges;
}

namespace {

enum class EventKind { kIterationDone, kPodReady, kTick };

struct Event {
  double t;
  int order;  // same-instant order: iterations 0, pods ready 1, (arrivals 2), ticks 3
  uint64_t seq;
  EventKind kind;
  int pod;
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    if (a.t != b.t) return a.t > b.t;
    if (a.order != b.order) return a.order > b.order;
    return a.seq > b.seq;
  }
};

constexpr int kArrivalOrder = 2;
// Ticks go on past the horizon while requests are unfinished, for at most this long.
constexpr double kMaxDrainSeconds = 3600;

class Run {
 public:
  Run(const Trace& trace, const ServiceModel& model, const SimConfig& config, Policy& policy)
      : trace_(trace),
        model_(model),
        config_(config),
        policy_(policy),
        edges_(TtftEdgesWithSlo(config.slo_ttft_s)),
        rng_(config.seed),
        balancer_(config.balancer) {
    out_.policy = policy.name();
    out_.outcomes.resize(trace.requests.size());
    out_.horizon_s = config.horizon_s >= 0 ? config.horizon_s : trace.span_s();
    out_.measured_s = std::max(0.0, out_.horizon_s - config.warmup_s);
  }

  SimRun Go();

 private:
  void Push(double t, int order, EventKind kind, int pod) {
    events_.push(Event{t, order, seq_++, kind, pod});
  }
  Replica& Pod(int id) { return *pods_[id]; }
  int CreatePod(double now, bool ready_now);
  void Dispatch(int r, double now);
  void ReadyEndpoints(std::vector<Endpoint>* out) const;
  void RebuildBalancer(double now);
  void Kick(Replica& pod, double now);
  void MaybeGone(Replica& pod, double now);
  void Scale(double now, int desired);
  void OnTick(double now);
  ClusterSnapshot Snapshot(double now);
  void RecordTimeline(double now);
  int CostingPods() const;
  bool Unfinished() const;

  const Trace& trace_;
  const ServiceModel& model_;
  const SimConfig& config_;
  Policy& policy_;
  const std::vector<double> edges_;
  std::mt19937_64 rng_;

  std::priority_queue<Event, std::vector<Event>, Later> events_;
  uint64_t seq_ = 0;
  std::vector<std::unique_ptr<Replica>> pods_;  // index = pod id
  std::deque<int> pending_;                     // requests that arrived while no pod was ready
  Balancer balancer_;
  std::vector<Endpoint> ready_scratch_;  // Dispatch's list of ready pods
  std::vector<double> slow_start_from_;  // by pod id: when it became ready (< 0: initial pod)
  int requested_ = 0;                    // ready + starting

  // Timeline accumulators for the current period.
  int period_arrivals_ = 0;
  std::vector<double> period_ttfts_;
  double last_row_s_ = 0;
  bool timeline_started_ = false;

  SimRun out_;
};

int Run::CreatePod(double now, bool ready_now) {
  const int id = static_cast<int>(pods_.size());
  const double ready_s = ready_now ? now : now + config_.cold_start_s;
  pods_.push_back(std::make_unique<Replica>(id, now, ready_s, &model_, config_.limits,
                                            &trace_.requests, &out_.outcomes, &edges_));
  ++requested_;
  // Pods ready at creation (the initial ones, or any with no cold start) are there when the
  // balancer starts (initial) or join it at once; only the initial ones skip slow start.
  slow_start_from_.push_back(ready_now && now <= 0 ? -1.0 : ready_s);
  if (ready_now) {
    pods_.back()->set_phase(Replica::Phase::kReady);
  } else {
    Push(ready_s, 1, EventKind::kPodReady, id);
  }
  return id;
}

int Run::CostingPods() const {
  int n = 0;
  for (const auto& p : pods_) n += p->phase() != Replica::Phase::kGone;
  return n;
}

void Run::Kick(Replica& pod, double now) {
  if (std::optional<double> end = pod.StartIteration(now)) {
    Push(*end, 0, EventKind::kIterationDone, pod.id());
  }
}

void Run::MaybeGone(Replica& pod, double now) {
  if (pod.phase() == Replica::Phase::kDraining && pod.outstanding() == 0 && !pod.busy()) {
    pod.set_gone(now);
  }
}

void Run::ReadyEndpoints(std::vector<Endpoint>* out) const {
  out->clear();
  for (const auto& p : pods_) {
    if (p->phase() != Replica::Phase::kReady) continue;
    out->push_back(Endpoint{p->id(), p->outstanding(), p->pending_prefill_tokens(),
                            slow_start_from_[p->id()]});
  }
}

void Run::RebuildBalancer(double now) {
  ReadyEndpoints(&ready_scratch_);
  balancer_.Rebuild(ready_scratch_, now);
}

void Run::Dispatch(int r, double now) {
  ReadyEndpoints(&ready_scratch_);
  if (ready_scratch_.empty()) {
    pending_.push_back(r);
    return;
  }
  Replica& pod = Pod(ready_scratch_[balancer_.Pick(ready_scratch_, now, rng_)].id);
  pod.Enqueue(r, now);
  Kick(pod, now);
}

void Run::Scale(double now, int desired) {
  desired = std::clamp(desired, config_.min_replicas, config_.max_replicas);
  if (desired == requested_) return;
  const bool counted = now >= config_.warmup_s;
  out_.scale_events += counted;
  if (desired > requested_) {
    out_.scale_ups += counted;
    while (requested_ < desired) CreatePod(now, config_.cold_start_s <= 0);
    if (config_.cold_start_s <= 0) {
      RebuildBalancer(now);
      while (!pending_.empty()) {
        const int r = pending_.front();
        pending_.pop_front();
        Dispatch(r, now);
      }
    }
    return;
  }
  out_.scale_downs += counted;
  // Starting pods first, youngest first: they hold no requests.
  for (auto it = pods_.rbegin(); it != pods_.rend() && requested_ > desired; ++it) {
    Replica& p = **it;
    if (p.phase() != Replica::Phase::kStarting) continue;
    p.set_gone(now);
    p.set_removed(now);
    --requested_;
  }
  // Then ready pods with the fewest outstanding requests (youngest on ties); they drain.
  bool drained = false;
  while (requested_ > desired) {
    Replica* victim = nullptr;
    for (const auto& p : pods_) {
      if (p->phase() != Replica::Phase::kReady) continue;
      if (!victim || p->outstanding() <= victim->outstanding()) victim = p.get();
    }
    if (!victim) break;
    victim->set_phase(Replica::Phase::kDraining);
    victim->set_removed(now);
    --requested_;
    drained = true;
    MaybeGone(*victim, now);
  }
  if (drained) RebuildBalancer(now);  // the ready set changed
}

ClusterSnapshot Run::Snapshot(double now) {
  ClusterSnapshot s;
  s.now_s = now;
  s.ttft_edges = &edges_;
  for (const auto& p : pods_) {
    switch (p->phase()) {
      case Replica::Phase::kGone:
        continue;
      case Replica::Phase::kDraining:
        ++s.draining;
        p->TakeTtftCounts();
        continue;
      case Replica::Phase::kStarting:
        ++s.starting;
        break;
      case Replica::Phase::kReady:
        ++s.ready;
        break;
    }
    p->ShedExpired(now);
    PodSnapshot pod;
    pod.id = p->id();
    pod.ready = p->phase() == Replica::Phase::kReady;
    pod.created_s = p->created_s();
    pod.queue_depth = p->queue_depth();
    pod.in_flight = p->in_flight();
    pod.ttft_counts = p->TakeTtftCounts();
    s.pods.push_back(std::move(pod));
  }
  s.requested = s.ready + s.starting;
  return s;
}

void Run::RecordTimeline(double now) {
  TimelineRow row;
  row.t_s = now - config_.warmup_s;
  const double len = now - last_row_s_;
  row.arrival_rps = len > 0 ? period_arrivals_ / len : 0;
  for (const auto& p : pods_) {
    if (p->phase() == Replica::Phase::kGone) continue;
    ++row.pods;
    row.queue_depth += p->queue_depth();
    row.in_flight += p->in_flight();
    if (p->phase() == Replica::Phase::kReady) ++row.ready;
  }
  row.requested = requested_;
  row.first_tokens = static_cast<int>(period_ttfts_.size());
  if (!period_ttfts_.empty()) row.p99_ttft_s = Quantile(period_ttfts_, 0.99);
  out_.timeline.push_back(row);
  period_arrivals_ = 0;
  period_ttfts_.clear();
  last_row_s_ = now;
}

bool Run::Unfinished() const {
  for (const auto& p : pods_) {
    if (p->phase() != Replica::Phase::kGone && (p->outstanding() > 0 || p->busy())) return true;
  }
  return !pending_.empty();
}

void Run::OnTick(double now) {
  ClusterSnapshot snap = Snapshot(now);
  if (now <= out_.horizon_s || Unfinished()) {
    if (std::optional<int> desired = policy_.Tick(snap)) Scale(now, *desired);
  }
  if (now >= config_.warmup_s && now <= out_.horizon_s) {
    out_.peak_pods = std::max(out_.peak_pods, CostingPods());
  }
}

SimRun Run::Go() {
  const auto& reqs = trace_.requests;
  const int initial =
      std::clamp(policy_.InitialReplicas(), config_.min_replicas, config_.max_replicas);
  for (int i = 0; i < initial; ++i) CreatePod(0.0, /*ready_now=*/true);
  RebuildBalancer(0.0);
  Push(std::max(0.0, std::ceil(config_.first_tick_s / config_.tick_s) * config_.tick_s), 3,
       EventKind::kTick, -1);
  const bool timeline = config_.timeline_period_s > 0;
  const long long timeline_every =
      timeline ? std::max<long long>(1, std::llround(config_.timeline_period_s)) : 0;

  size_t next = 0;
  for (;;) {
    const bool have_event = !events_.empty();
    const bool have_arrival = next < reqs.size();
    if (!have_event && !have_arrival) break;
    if (have_arrival &&
        (!have_event || reqs[next].arrival_s < events_.top().t ||
         (reqs[next].arrival_s == events_.top().t && kArrivalOrder < events_.top().order))) {
      const double now = reqs[next].arrival_s;
      ++period_arrivals_;
      Dispatch(static_cast<int>(next), now);
      ++next;
      continue;
    }
    const Event e = events_.top();
    events_.pop();
    switch (e.kind) {
      case EventKind::kIterationDone: {
        Replica& pod = Pod(e.pod);
        pod.FinishIteration(e.t, timeline ? &period_ttfts_ : nullptr);
        Kick(pod, e.t);
        MaybeGone(pod, e.t);
        break;
      }
      case EventKind::kPodReady: {
        Replica& pod = Pod(e.pod);
        if (pod.phase() != Replica::Phase::kStarting) break;  // removed while starting
        pod.set_phase(Replica::Phase::kReady);
        RebuildBalancer(e.t);
        while (!pending_.empty()) {
          const int r = pending_.front();
          pending_.pop_front();
          Dispatch(r, e.t);
        }
        break;
      }
      case EventKind::kTick: {
        const long long k = std::llround(e.t / config_.tick_s);
        if (!timeline_started_ && e.t >= config_.warmup_s) {
          timeline_started_ = true;
          period_arrivals_ = 0;
          period_ttfts_.clear();
          last_row_s_ = e.t;
        }
        if (timeline && config_.tick_s == 1.0 && e.t > config_.warmup_s &&
            std::llround(e.t - config_.warmup_s) % timeline_every == 0 &&
            e.t < out_.horizon_s + static_cast<double>(timeline_every)) {
          RecordTimeline(e.t);
        }
        OnTick(e.t);
        const double next_tick = static_cast<double>(k + 1) * config_.tick_s;
        if (next_tick <= out_.horizon_s || (next_tick <= out_.horizon_s + kMaxDrainSeconds &&
                                            (next < reqs.size() || Unfinished()))) {
          Push(next_tick, 3, EventKind::kTick, -1);
        }
        break;
      }
    }
  }

  // Pod records and cost, cut at the horizon.
  out_.pods.resize(pods_.size());
  for (const auto& p : pods_) {
    PodRecord& rec = out_.pods[p->id()];
    rec.id = p->id();
    rec.created_s = p->created_s();
    rec.ready_s = p->ready_s();
    rec.removed_s = p->removed_s();
    rec.gone_s = p->phase() == Replica::Phase::kGone ? p->gone_s() : -1;
    const double end = rec.gone_s >= 0 ? std::min(rec.gone_s, out_.horizon_s) : out_.horizon_s;
    out_.replica_seconds += std::max(0.0, end - std::max(config_.warmup_s, rec.created_s));
    out_.shed += p->shed_count();
  }
  return std::move(out_);
}

}  // namespace

SimRun Simulate(const Trace& trace, const ServiceModel& model, const SimConfig& config,
                Policy& policy) {
  Run run(trace, model, config, policy);
  return run.Go();
}

}  // namespace kinfer::sim
