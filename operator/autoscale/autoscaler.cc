#include "operator/autoscale/autoscaler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <deque>
#include <utility>

#include "operator/autoscale/ttft_histogram.h"

namespace kinfer::autoscale {
namespace {

// Slack for ceil/floor of ratios that land a rounding error away from an integer (3 * 1.1,
// 0.3/0.1).
constexpr double kEps = 1e-9;
// No count the autoscaler computes needs more (the SLO ratio can be huge before the caps).
constexpr double kMaxCount = 1e9;
// A hard bound on the tick window whatever the tick rate (a 60 s window at 1 ms ticks).
constexpr size_t kMaxTicks = 1 << 16;

int CeilCount(double x) {
  if (!(x > 0)) return 0;
  x = std::min(x, kMaxCount);
  return static_cast<int>(std::ceil(x - kEps * std::max(1.0, x)));
}

int FloorCount(double x) {
  if (!(x > 0)) return 0;
  x = std::min(x, kMaxCount);
  return static_cast<int>(std::floor(x + kEps * std::max(1.0, x)));
}

// Negative, NaN and infinite gauges count as 0.
double Gauge(double v) { return std::isfinite(v) && v > 0 ? v : 0.0; }

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string Secs(Duration d) { return Num(std::chrono::duration<double>(d).count()) + " s"; }

// One tick's totals.
struct TickRecord {
  TimePoint t{};
  double in_flight = 0;
  double queue = 0;      // as counted: capped at the hold's reference during a cold-start hold
  double queue_raw = 0;  // as reported
  bool held = false;     // recorded during a cold-start episode: its TTFTs skip the SLO term
  TtftHistogram ttft;
  // The request rate's share: first tokens (TTFT observations, silent ready pods filled in)
  // over (covered_from, t].
  double requests = 0;
  TimePoint covered_from{};
};

// One entry of the stabilization max-queue.
struct DesireRecord {
  TimePoint t{};
  int desire = 0;
};

// A scale-up whose pods are still cold (see the header).
struct ColdStart {
  bool active = false;
  TimePoint started{};     // the first raise; the grace lasts a panic window from here
  TimePoint last_raise{};  // cold_start_timeout counts from here
  int asked = 0;           // the highest count asked during the episode
  double queue_ref = 0;    // highest total queue seen during the grace
  std::optional<TimePoint> all_ready_at;  // when ready >= asked was first seen (settling)
};

// What one window (the newest ticks younger than its length) holds.
struct WindowView {
  int ticks = 0;
  double load_mean = 0;        // in flight + queue as counted
  double load_mean_raw = 0;    // in flight + queue as reported
  double load_max = 0;         // the highest tick's in flight + queue as counted
  TtftHistogram ttft_all;      // every TTFT observation (reported)
  TtftHistogram ttft_for_slo;  // without held ticks (the SLO term's input)
  double request_rate = 0;     // first tokens per second over the time the ticks cover
};

}  // namespace

struct Autoscaler::State {
  std::deque<TickRecord> ticks;      // oldest first, younger than the stable window
  std::deque<DesireRecord> desires;  // a max-queue over scale_down_delay: desires decrease
  std::optional<TimePoint> first_tick;
  std::optional<TimePoint> last_now;
  std::optional<TimePoint> last_recorded;  // the last tick that was not frozen
  bool panicking = false;
  TimePoint last_over_threshold{};
  ColdStart cold;

  WindowView View(TimePoint now, Duration window) const {
    WindowView v;
    double load = 0;
    double load_raw = 0;
    double requests = 0;
    double covered_s = 0;
    for (auto it = ticks.rbegin(); it != ticks.rend() && it->t > now - window; ++it) {
      requests += it->requests;
      covered_s +=
          std::chrono::duration<double>(it->t - std::max(it->covered_from, now - window)).count();
      ++v.ticks;
      load += it->in_flight + it->queue;
      v.load_max = std::max(v.load_max, it->in_flight + it->queue);
      load_raw += it->in_flight + it->queue_raw;
      v.ttft_all.Add(it->ttft);
      if (!it->held) v.ttft_for_slo.Add(it->ttft);
    }
    if (v.ticks > 0) {
      v.load_mean = load / v.ticks;
      v.load_mean_raw = load_raw / v.ticks;
    }
    if (covered_s > 0) v.request_rate = requests / covered_s;
    return v;
  }
};

Status AutoscalerConfig::Validate() const {
  if (min_replicas < 1) {
    return InvalidArgument("min_replicas must be >= 1 (no scale to zero), got " +
                           std::to_string(min_replicas));
  }
  if (max_replicas < min_replicas) {
    return InvalidArgument("max_replicas must be >= min_replicas (" + std::to_string(min_replicas) +
                           "), got " + std::to_string(max_replicas));
  }
  if (!(target_load_per_replica > 0) || !std::isfinite(target_load_per_replica)) {
    return InvalidArgument("target_load_per_replica must be > 0, got " +
                           Num(target_load_per_replica));
  }
  if (stable_window <= Duration::zero()) {
    return InvalidArgument("stable_window must be > 0, got " + Secs(stable_window));
  }
  if (!(panic_window_percent > 0 && panic_window_percent <= 100)) {
    return InvalidArgument("panic_window_percent must be in (0, 100], got " +
                           Num(panic_window_percent));
  }
  if (Autoscaler::PanicWindow(*this) <= Duration::zero()) {
    return InvalidArgument("panic_window_percent of stable_window is under a nanosecond");
  }
  if (!(panic_threshold > 1) || !std::isfinite(panic_threshold)) {
    return InvalidArgument("panic_threshold must be > 1, got " + Num(panic_threshold));
  }
  if (!(slo_ttft_p99_seconds >= 0) || !std::isfinite(slo_ttft_p99_seconds)) {
    return InvalidArgument("slo_ttft_p99_seconds must be >= 0 (0 = no SLO term), got " +
                           Num(slo_ttft_p99_seconds));
  }
  if (!(tolerance >= 0 && tolerance < 1)) {
    return InvalidArgument("tolerance must be in [0, 1), got " + Num(tolerance));
  }
  if (scale_down_delay < Duration::zero()) {
    return InvalidArgument("scale_down_delay must be >= 0, got " + Secs(scale_down_delay));
  }
  if (!(scale_down_p99_fraction > 0 && scale_down_p99_fraction <= 1)) {
    return InvalidArgument("scale_down_p99_fraction must be in (0, 1], got " +
                           Num(scale_down_p99_fraction));
  }
  if (!(max_scale_up_rate >= 1) || !std::isfinite(max_scale_up_rate)) {
    return InvalidArgument("max_scale_up_rate must be >= 1, got " + Num(max_scale_up_rate));
  }
  if (!(max_scale_down_rate >= 1) || !std::isfinite(max_scale_down_rate)) {
    return InvalidArgument("max_scale_down_rate must be >= 1, got " + Num(max_scale_down_rate));
  }
  if (!(missing_metrics_freeze_fraction >= 0 && missing_metrics_freeze_fraction <= 1)) {
    return InvalidArgument("missing_metrics_freeze_fraction must be in [0, 1], got " +
                           Num(missing_metrics_freeze_fraction));
  }
  if (min_ttft_observations < 1) {
    return InvalidArgument("min_ttft_observations must be >= 1, got " +
                           std::to_string(min_ttft_observations));
  }
  if (cold_start_timeout < Duration::zero()) {
    return InvalidArgument("cold_start_timeout must be >= 0 (0 = no hold), got " +
                           Secs(cold_start_timeout));
  }
  if (!(scale_down_utilization > 0 && scale_down_utilization <= 1)) {
    return InvalidArgument("scale_down_utilization must be in (0, 1], got " +
                           Num(scale_down_utilization));
  }
  if (slo_max_step < 0) {
    return InvalidArgument("slo_max_step must be >= 0 (0 = no cap), got " +
                           std::to_string(slo_max_step));
  }
  if (!(target_requests_per_second_per_replica >= 0) ||
      !std::isfinite(target_requests_per_second_per_replica)) {
    return InvalidArgument("target_requests_per_second_per_replica must be >= 0 (0 = off), got " +
                           Num(target_requests_per_second_per_replica));
  }
  return Status::Ok();
}

Duration Autoscaler::PanicWindow(const AutoscalerConfig& config) {
  const double ns =
      static_cast<double>(config.stable_window.count()) * config.panic_window_percent / 100.0;
  return Duration(static_cast<Duration::rep>(std::llround(ns)));
}

Autoscaler::Autoscaler(const AutoscalerConfig& config)
    : config_(config), state_(std::make_shared<State>()) {
  assert(config.Validate().ok());
}

StatusOr<Autoscaler> Autoscaler::Create(const AutoscalerConfig& config) {
  KINFER_RETURN_IF_ERROR(config.Validate());
  return Autoscaler(config);
}

Autoscaler::Autoscaler(const Autoscaler& other)
    : config_(other.config_),
      state_(other.state_ ? std::make_shared<State>(*other.state_) : nullptr) {}

Autoscaler& Autoscaler::operator=(const Autoscaler& other) {
  if (this != &other) *this = Autoscaler(other);
  return *this;
}

Status Autoscaler::Reconfigure(const AutoscalerConfig& config) {
  KINFER_RETURN_IF_ERROR(config.Validate());
  config_ = config;
  return Status::Ok();
}

Decision Autoscaler::Tick(TimePoint now, int current, const std::vector<PodSample>& samples) {
  assert(state_ != nullptr);
  State& s = *state_;
  const AutoscalerConfig& c = config_;
  assert(!s.last_now || now >= *s.last_now);
  if (s.last_now && now < *s.last_now) now = *s.last_now;
  // A gap longer than the stable window (the caller stopped ticking) is a restart: the windows
  // are empty, so the warm-up and the scale-down history start over.
  if (!s.first_tick || now - *s.last_now > c.stable_window) s.first_tick = now;
  // This tick's TTFT deltas cover the time since the previous tick (at most a stable window).
  const TimePoint covered_from = s.last_now ? std::max(*s.last_now, now - c.stable_window) : now;
  s.last_now = now;
  current = std::max(current, 0);
  const Duration panic_window = PanicWindow(c);

  Decision d;

  // ---- 1. This tick's census: load, with the silent ready pods filled in, and TTFTs.
  int ready_missing = 0;
  int ready_reporting = 0;
  double ready_queue = 0, ready_in_flight = 0, other_queue = 0, other_in_flight = 0;
  TtftHistogram tick_ttft;
  for (const PodSample& p : samples) {
    p.ready ? ++d.ready : ++d.starting;
    if (!p.has_metrics) {
      if (p.ready) ++ready_missing;
      continue;
    }
    const double q = Gauge(p.queue_depth);
    const double f = Gauge(p.in_flight);
    if (p.ready) {
      ++ready_reporting;
      ready_queue += q;
      ready_in_flight += f;
    } else {
      other_queue += q;
      other_in_flight += f;
    }
    tick_ttft.Add(p.ttft_upper_bounds, p.ttft_counts);  // a malformed histogram adds nothing
  }
  double queue = ready_queue + other_queue;
  double in_flight = ready_in_flight + other_in_flight;
  if (ready_missing > 0 && ready_reporting > 0) {
    queue += ready_missing * ready_queue / ready_reporting;
    in_flight += ready_missing * ready_in_flight / ready_reporting;
  }
  d.observed_load = queue + in_flight;

  // ---- 2. Metrics freeze: too many ready pods silent, or none ready at all (pods not ready are
  // not scraped: every pod out of its Service, say, with its sidecar's breaker open, is no load
  // of zero to scale down on); this tick is not recorded.
  const bool frozen =
      (d.ready == 0 && current > 0) ||
      (d.ready > 0 &&
       (ready_reporting == 0 || ready_missing > c.missing_metrics_freeze_fraction * d.ready));

  if (!frozen) {
    // A freeze longer than the stable window is a restart, as a gap in the ticks is: the windows
    // hold nothing from before it, so the warm-up and the scale-down history start over.
    if (s.last_recorded && now - *s.last_recorded > c.stable_window) {
      s.first_tick = now;
      s.panicking = false;
    }
    s.last_recorded = now;
    // ---- 3. Cold-start episode: end it, then count the queue as it allows.
    ColdStart& cs = s.cold;
    if (cs.active) {
      if (current < cs.asked || now - cs.last_raise >= c.cold_start_timeout) {
        cs = ColdStart{};
      } else if (d.ready >= cs.asked) {
        if (!cs.all_ready_at) cs.all_ready_at = now;
        if (now - *cs.all_ready_at >= panic_window) cs = ColdStart{};
      }
    }
    const bool grace = cs.active && now - cs.started < panic_window;
    const bool hold = cs.active && !grace;
    if (grace) cs.queue_ref = std::max(cs.queue_ref, queue);
    const double counted_queue = hold ? std::min(queue, cs.queue_ref) : queue;
    double requests = tick_ttft.total();
    if (ready_missing > 0 && ready_reporting > 0) {
      requests *= static_cast<double>(ready_reporting + ready_missing) / ready_reporting;
    }
    s.ticks.push_back(TickRecord{now, in_flight, counted_queue, queue, cs.active,
                                 std::move(tick_ttft), requests, covered_from});
  }
  while (!s.ticks.empty() &&
         (s.ticks.front().t <= now - c.stable_window || s.ticks.size() > kMaxTicks)) {
    s.ticks.pop_front();
  }

  // ---- 4. The windows.
  const WindowView stable = s.View(now, c.stable_window);
  const WindowView panic = s.View(now, panic_window);
  d.load_stable = stable.load_mean;
  d.load_panic = panic.load_mean;
  d.p99_ttft_panic = panic.ttft_all.Quantile(0.99);
  d.p99_ttft_stable = stable.ttft_all.Quantile(0.99);
  d.ttft_observations_panic = static_cast<uint64_t>(std::llround(panic.ttft_all.total()));

  if (frozen) {
    d.panic = s.panicking;
    d.cold_start_hold = s.cold.active;
    d.desired = std::clamp(current, c.min_replicas, c.max_replicas);
    d.reason = d.desired < current   ? "max_replicas"
               : d.desired > current ? "min_replicas"
                                     : "metrics_missing";
    return d;
  }

  // ---- 5. Panic (Knative KPA): the unrounded panic desire against the ready pods.
  const double panic_pods = panic.load_mean / c.target_load_per_replica;
  if (panic.ticks > 0 && panic_pods >= c.panic_threshold * std::max(d.ready, 1)) {
    s.panicking = true;
    s.last_over_threshold = now;
  } else if (s.panicking && now - s.last_over_threshold >= c.stable_window) {
    s.panicking = false;
  }
  d.panic = s.panicking;

  // ---- 6. The terms.
  const auto load_term = [&](double stable_load, double panic_load) {
    const int by_stable = CeilCount(stable_load / c.target_load_per_replica);
    const int by_panic = CeilCount(panic_load / c.target_load_per_replica);
    return s.panicking ? std::max(by_stable, by_panic) : by_stable;
  };
  const auto slo_term = [&](const TtftHistogram& h) {
    if (!(c.slo_ttft_p99_seconds > 0) || d.ready == 0 || h.total() < c.min_ttft_observations) {
      return 0;
    }
    const std::optional<double> p99 = h.Quantile(0.99);
    if (!p99 || *p99 <= c.slo_ttft_p99_seconds) return 0;
    const int proportional = CeilCount(d.ready * *p99 / c.slo_ttft_p99_seconds);
    if (c.slo_max_step == 0) return proportional;
    // Latency the load does not explain is answered a step at a time.
    const int by_load = CeilCount(panic.load_mean_raw / c.target_load_per_replica);
    return std::min(proportional, std::max(d.ready, by_load) + c.slo_max_step);
  };
  d.desired_by_load = load_term(stable.load_mean, panic.load_mean);
  d.request_rate_stable = stable.request_rate;
  if (c.target_requests_per_second_per_replica > 0) {
    d.desired_by_rate = CeilCount(stable.request_rate / c.target_requests_per_second_per_replica);
  }
  d.desired_by_slo = slo_term(panic.ttft_for_slo);
  // What the terms would ask without the cold-start hold (only for the reason).
  const int unheld_want =
      std::max(load_term(stable.load_mean_raw, panic.load_mean_raw), slo_term(panic.ttft_all));
  // Warm-up: until a new Autoscaler has seen a whole stable window, its stable mean rests on a few
  // ticks; it does not raise the count (panic and the SLO term still do).
  int load_want = std::max(d.desired_by_load, d.desired_by_rate);
  if (!s.panicking && now - *s.first_tick < c.stable_window) {
    load_want = std::min(load_want, current);
  }
  const int want = std::max(load_want, d.desired_by_slo);
  const int bound = std::clamp(want, c.min_replicas, c.max_replicas);

  // Stabilization: the max-queue of desires over scale_down_delay.
  while (!s.desires.empty() && s.desires.back().desire <= bound) s.desires.pop_back();
  s.desires.push_back(DesireRecord{now, bound});
  while (s.desires.front().t < now - c.scale_down_delay) s.desires.pop_front();
  const int stabilized = s.desires.front().desire;

  // ---- 7. The decision.
  int out = current;
  std::string reason = "steady";
  const double tol = c.tolerance;
  if (bound > current) {
    if (bound <= d.ready + d.starting) {
      reason = "scale_up_pending";  // the pods are there, some still starting
    } else if (bound <= current * (1 + tol) + kEps) {
      reason = "within_tolerance";
    } else {
      const int cap = std::max(current + 1, FloorCount(current * c.max_scale_up_rate));
      out = std::min(bound, cap);
      reason = d.desired_by_slo > d.desired_by_load ? "scale_up_slo"
               : s.panicking                        ? "scale_up_panic"
                                                    : "scale_up_load";
    }
  } else if (bound < current) {
    const bool p99_high = c.slo_ttft_p99_seconds > 0 &&
                          stable.ttft_all.total() >= c.min_ttft_observations && d.p99_ttft_stable &&
                          *d.p99_ttft_stable > c.scale_down_p99_fraction * c.slo_ttft_p99_seconds;
    if (bound >= current * (1 - tol) - kEps) {
      reason = "within_tolerance";
    } else if (s.panicking || s.cold.active || now - *s.first_tick < c.scale_down_delay ||
               stabilized >= current || p99_high) {
      reason = "scale_down_delayed";
    } else if (stabilized >= current * (1 - tol) - kEps) {
      reason = "within_tolerance";
    } else {
      const int floor = std::min(current - 1, CeilCount(current / c.max_scale_down_rate));
      // Headroom: the replicas left must carry the stable window's busiest tick at
      // scale_down_utilization x target.
      int headroom =
          CeilCount(stable.load_max / (c.scale_down_utilization * c.target_load_per_replica));
      if (c.target_requests_per_second_per_replica > 0) {
        headroom = std::max(
            headroom, CeilCount(stable.request_rate / (c.scale_down_utilization *
                                                       c.target_requests_per_second_per_replica)));
      }
      out = std::max({stabilized, floor, headroom});
      if (out >= current) {
        out = current;
        reason = "scale_down_delayed";
      } else {
        reason = "scale_down";
      }
    }
  }
  if (out <= current && s.cold.active && unheld_want > std::max(current, bound) &&
      (reason == "steady" || reason == "within_tolerance" || reason == "scale_down_delayed")) {
    reason = "scale_up_pending";  // the hold keeps back what the pods on their way will answer
  }

  // ---- 8. Bounds (current itself may lie outside them after a CR edit).
  const int clamped = std::clamp(out, c.min_replicas, c.max_replicas);
  if (clamped != out) {
    reason = clamped > out ? "min_replicas" : "max_replicas";
  } else if (want > c.max_replicas && clamped == c.max_replicas) {
    reason = "max_replicas";
  } else if (want < c.min_replicas && clamped == c.min_replicas) {
    reason = "min_replicas";
  }
  d.desired = clamped;
  d.reason = std::move(reason);

  // A raise starts (or extends) a cold-start episode.
  if (clamped > current && c.cold_start_timeout > Duration::zero()) {
    ColdStart& cs = s.cold;
    if (!cs.active) {
      cs = ColdStart{.active = true,
                     .started = now,
                     .last_raise = now,
                     .asked = clamped,
                     .queue_ref = queue,
                     .all_ready_at = std::nullopt};
    } else {
      cs.asked = std::max(cs.asked, clamped);
      cs.last_raise = now;
      cs.all_ready_at.reset();
    }
  }
  d.cold_start_hold = s.cold.active;
  return d;
}

}  // namespace kinfer::autoscale
