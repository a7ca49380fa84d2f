#include "bench/scrape/scrape_rounds.h"

#include <dirent.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>

#include "operator/autoscale/pod_sampler.h"

namespace kinfer::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double CpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A "Name:   value kB" field of /proc/self/status (0 when absent).
long StatusField(const char* name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(name);
  while (std::getline(in, line)) {
    if (line.compare(0, n, name) == 0 && line.size() > n && line[n] == ':') {
      return std::atol(line.c_str() + n + 1);
    }
  }
  return 0;
}

int OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // the directory's own descriptor
}

// Samples the thread and descriptor counts every `period` and keeps the maxima since Reset().
// Its own CPU time is published so that the rounds can leave it out.
class ResourceSampler {
 public:
  explicit ResourceSampler(std::chrono::milliseconds period)
      : period_(period), thread_([this] { Run(); }) {}
  ~ResourceSampler() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Reset() {
    max_threads_.store(static_cast<int>(StatusField("Threads")));
    max_fds_.store(OpenFds());
  }
  int max_threads() const { return max_threads_.load(); }
  int max_fds() const { return max_fds_.load(); }
  double own_cpu_s() const { return own_cpu_ns_.load() * 1e-9; }

 private:
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      l.unlock();
      const int threads = static_cast<int>(StatusField("Threads"));
      const int fds = OpenFds();
      int seen = max_threads_.load();
      while (threads > seen && !max_threads_.compare_exchange_weak(seen, threads)) {
      }
      seen = max_fds_.load();
      while (fds > seen && !max_fds_.compare_exchange_weak(seen, fds)) {
      }
      own_cpu_ns_.store(static_cast<long long>(CpuSeconds(CLOCK_THREAD_CPUTIME_ID) * 1e9));
      l.lock();
      cv_.wait_for(l, period_, [this] { return stop_; });
    }
  }

  const std::chrono::milliseconds period_;
  std::atomic<int> max_threads_{0};
  std::atomic<int> max_fds_{0};
  std::atomic<long long> own_cpu_ns_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

nlohmann::json Percentiles(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) {
    size_t r = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::max<size_t>(r, 1) - 1];
  };
  double sum = 0;
  for (double x : v) sum += x;
  return {{"p50", rank(50)},
          {"p99", rank(99)},
          {"max", v.back()},
          {"mean", sum / static_cast<double>(v.size())}};
}

}  // namespace

ScrapeRoundsResult RunScrapeRounds(const std::vector<autoscale::PodEndpoint>& endpoints,
                                   const ScrapeRoundsOptions& options) {
  ScrapeRoundsResult result;
  result.endpoints = static_cast<int>(endpoints.size());
  ResourceSampler sampler(options.sample_period);
  autoscale::PodSampler pod_sampler(options.collector.sampler);
  auto process_cpu = [&sampler] {
    return CpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - sampler.own_cpu_s();
  };
  const int total = options.warmup_rounds + options.rounds;
  auto next = Clock::now();
  for (int r = 0; r < total; ++r) {
    RoundResult round;
    round.warmup = r < options.warmup_rounds;
    sampler.Reset();
    const double cpu0 = process_cpu();
    const auto t0 = Clock::now();
    std::vector<autoscale::PodScrape> scrapes = autoscale::ScrapeAll(endpoints, options.collector);
    const auto t1 = Clock::now();
    const double cpu1 = process_cpu();
    for (const autoscale::PodScrape& s : scrapes) {
      if (s.status.ok()) {
        if (options.expect_body_bytes > 0 && s.body.size() != options.expect_body_bytes) {
          ++round.wrong_body;
        } else {
          ++round.ok;
        }
        continue;
      }
      if (round.first_error.empty()) round.first_error = s.status.ToString();
      switch (s.status.code()) {
        case StatusCode::kUnavailable:
          ++round.unavailable;
          break;
        case StatusCode::kDeadlineExceeded:
          ++round.deadline_exceeded;
          break;
        default:
          ++round.other;
          break;
      }
    }
    const double cpu2 = process_cpu();
    const auto t2 = Clock::now();
    std::vector<autoscale::PodSample> samples = pod_sampler.Sample(scrapes);
    const auto t3 = Clock::now();
    round.sample_wall_s = Seconds(t3 - t2);
    round.sample_cpu_s = process_cpu() - cpu2;
    round.wall_s = Seconds(t1 - t0);
    round.cpu_s = cpu1 - cpu0;
    scrapes.clear();
    samples.clear();
    next += options.interval;
    if (next < Clock::now()) next = Clock::now();  // as the loop: no catching up
    std::this_thread::sleep_until(next);
    round.interval_cpu_s = process_cpu() - cpu0;
    round.max_threads = sampler.max_threads();
    round.max_fds = sampler.max_fds();
    std::fprintf(stderr,
                 "round %2d%s: %8.1f ms  ok %d  unavailable %d  deadline %d  other %d  wrong %d  "
                 "cpu %.3f s (interval %.3f s)  threads %d  fds %d\n",
                 r + 1, round.warmup ? " (warmup)" : "", round.wall_s * 1e3, round.ok,
                 round.unavailable, round.deadline_exceeded, round.other, round.wrong_body,
                 round.cpu_s, round.interval_cpu_s, round.max_threads, round.max_fds);
    result.rounds.push_back(std::move(round));
  }
  result.peak_rss_kib = StatusField("VmHWM");
  result.threads_after = static_cast<int>(StatusField("Threads"));
  result.fds_after = OpenFds();
  return result;
}

nlohmann::json ToJson(const ScrapeRoundsResult& result, const ScrapeRoundsOptions& options) {
  nlohmann::json rounds = nlohmann::json::array();
  std::vector<double> wall, cpu, interval_cpu, sample_wall, sample_cpu;
  int scrapes = 0, ok = 0, wrong = 0, unavailable = 0, deadline = 0, other = 0;
  int max_threads = 0, max_fds = 0;
  std::string first_error;
  for (const RoundResult& r : result.rounds) {
    rounds.push_back({{"warmup", r.warmup},
                      {"wall_s", r.wall_s},
                      {"cpu_s", r.cpu_s},
                      {"interval_cpu_s", r.interval_cpu_s},
                      {"sample_wall_s", r.sample_wall_s},
                      {"sample_cpu_s", r.sample_cpu_s},
                      {"ok", r.ok},
                      {"wrong_body", r.wrong_body},
                      {"unavailable", r.unavailable},
                      {"deadline_exceeded", r.deadline_exceeded},
                      {"other", r.other},
                      {"max_threads", r.max_threads},
                      {"max_fds", r.max_fds},
                      {"first_error", r.first_error}});
    max_threads = std::max(max_threads, r.max_threads);
    max_fds = std::max(max_fds, r.max_fds);
    if (r.warmup) continue;
    wall.push_back(r.wall_s);
    cpu.push_back(r.cpu_s);
    interval_cpu.push_back(r.interval_cpu_s);
    sample_wall.push_back(r.sample_wall_s);
    sample_cpu.push_back(r.sample_cpu_s);
    scrapes += result.endpoints;
    ok += r.ok;
    wrong += r.wrong_body;
    unavailable += r.unavailable;
    deadline += r.deadline_exceeded;
    other += r.other;
    if (first_error.empty()) first_error = r.first_error;
  }
  return {{"endpoints", result.endpoints},
          {"rounds_measured", options.rounds},
          {"warmup_rounds", options.warmup_rounds},
          {"interval_s", std::chrono::duration<double>(options.interval).count()},
          {"timeout_s", std::chrono::duration<double>(options.collector.timeout).count()},
          {"summary",
           {{"wall_s", Percentiles(wall)},
            {"cpu_s", Percentiles(cpu)},
            {"interval_cpu_s", Percentiles(interval_cpu)},
            {"sample_wall_s", Percentiles(sample_wall)},
            {"sample_cpu_s", Percentiles(sample_cpu)},
            {"scrapes", scrapes},
            {"ok", ok},
            {"wrong_body", wrong},
            {"unavailable", unavailable},
            {"deadline_exceeded", deadline},
            {"other_errors", other},
            {"first_error", first_error},
            {"max_threads", max_threads},
            {"max_fds", max_fds},
            {"peak_rss_kib", result.peak_rss_kib},
            {"threads_after", result.threads_after},
            {"fds_after", result.fds_after}}},
          {"rounds", rounds}};
}

}  // namespace kinfer::bench
