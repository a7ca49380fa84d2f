// RunScrapeRounds: times the operator's real scrape fan-out, autoscale::ScrapeAll (the call that
// AutoscaleLoop::Tick makes once per tick for every pod of every service), over a list of
// endpoints, one round every `interval` like the loop, and what the process spends on it.
//
// Per round: the wall time of ScrapeAll; its outcomes (OK with the expected page, wrong page,
// UNAVAILABLE, DEADLINE_EXCEEDED, other); the process CPU (user + system, every thread) during
// ScrapeAll and over the whole interval up to the next round; the wall and CPU time of turning the
// pages into PodSamples (PodSampler, as the loop does after ScrapeAll); and the most threads and
// file descriptors the process held, sampled every `sample_period` by a thread whose own CPU is
// subtracted. After the last round: the peak RSS (VmHWM).
//
// Threading: call from one thread; it starts and joins the sampler thread itself. ScrapeAll runs
// its requests on cpprestsdk's thread pool.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "operator/autoscale/metrics_collector.h"

namespace kinfer::bench {

struct ScrapeRoundsOptions {
  int rounds = 20;        // measured rounds
  int warmup_rounds = 1;  // run first, reported apart (cpprestsdk starts its thread pool)
  std::chrono::milliseconds interval{2000};  // round start to round start (the loop's tick)
  autoscale::CollectorOptions collector;     // timeout 1000 ms: the operator's default
  size_t expect_body_bytes = 0;              // > 0: an OK page of another size counts as wrong
  std::chrono::milliseconds sample_period{20};
};

struct RoundResult {
  bool warmup = false;
  double wall_s = 0;          // ScrapeAll
  double cpu_s = 0;           // process CPU during ScrapeAll
  double interval_cpu_s = 0;  // process CPU from this round's start to the next's
  double sample_wall_s = 0;   // PodSampler over the pages
  double sample_cpu_s = 0;
  int ok = 0, wrong_body = 0, unavailable = 0, deadline_exceeded = 0, other = 0;
  int max_threads = 0, max_fds = 0;
  std::string first_error;  // one failed scrape's status, for the report
};

struct ScrapeRoundsResult {
  int endpoints = 0;
  std::vector<RoundResult> rounds;  // warmup rounds first
  long peak_rss_kib = 0;            // VmHWM after the last round
  int threads_after = 0;
  int fds_after = 0;
};

ScrapeRoundsResult RunScrapeRounds(const std::vector<autoscale::PodEndpoint>& endpoints,
                                   const ScrapeRoundsOptions& options);

// The result as JSON: every round, and over the measured rounds p50/p99/max of the wall time
// (nearest rank: with 20 rounds p99 is the maximum), the failures, and the mean CPU per round.
nlohmann::json ToJson(const ScrapeRoundsResult& result, const ScrapeRoundsOptions& options);

}  // namespace kinfer::bench
