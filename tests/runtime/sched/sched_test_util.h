// Helpers for the scheduler tests: a fake engine that answers plans with fabricated tokens.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/sched/scheduler.h"

namespace kinfer {

inline std::vector<int32_t> Tokens(int32_t first, int n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline SchedTime T0() { return SchedTime{} + std::chrono::hours(1); }

// A plan as one line, for determinism checks and readable failures.
inline std::string PlanString(const StepPlan& p) {
  std::ostringstream os;
  os << "step " << p.step << " tokens " << p.num_tokens << " D[";
  for (const auto& d : p.decodes) os << d.id << "@" << d.start << " ";
  os << "] P[";
  for (const auto& c : p.prefills)
    os << c.id << ":" << c.start << "+" << c.length << (c.sample ? "s" : "") << " ";
  os << "] X[";
  for (auto id : p.preempted) os << id << " ";
  os << "] F[";
  for (const auto& f : p.finished) os << f.id << ":" << SeqEndName(f.reason) << " ";
  os << "]";
  return os.str();
}

// Answers every plan: the sampled token is a function of the sequence id and its length, so a
// recomputed sequence continues with the tokens it would have had. `stop_at[id] = n` makes the
// n-th generated token a stop.
class FakeEngine {
 public:
  explicit FakeEngine(Scheduler* s) : s_(s) {}

  static int32_t TokenFor(SchedSeqId id, int position) {
    return static_cast<int32_t>((id * 131 + position * 7) % 5000 + 10);
  }

  // Runs one step; returns the plan. Finished sequences (from the plan and OnStepDone) are
  // recorded in `ended`.
  StepPlan RunStep(SchedTime now) {
    StepPlan plan = s_->Step(now);
    for (const auto& f : plan.finished) ended[f.id] = f.reason;
    if (plan.idle()) return plan;
    StepResult r;
    for (const auto* list : {&plan.decodes, &plan.prefills}) {
      for (const ScheduledSeq& item : *list) {
        const auto view = s_->Find(item.id);
        EXPECT_TRUE(view.has_value());
        if (!view) continue;
        // The plan is consistent with the sequence and its reserved KV slots.
        const int end = item.start + item.length;
        const int len = static_cast<int>(view->tokens.size());
        EXPECT_EQ(view->state, SeqState::kRunning);
        EXPECT_EQ(item.start, view->num_computed);
        EXPECT_LE(end, len);
        EXPECT_EQ(item.sample, end == len);
        EXPECT_GE(s_->kv().num_slots(item.id), end);
        EXPECT_GE(static_cast<int>(s_->BlockTable(item.id).size()) * s_->kv().block_size(), end);
        if (!item.sample) continue;
        SampledToken t;
        t.id = item.id;
        t.token = TokenFor(item.id, static_cast<int>(view->tokens.size()));
        auto it = stop_at.find(item.id);
        t.stop = it != stop_at.end() && view->generated + 1 >= it->second;
        r.sampled.push_back(t);
      }
    }
    auto done = s_->OnStepDone(r);
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    if (done.ok()) {
      for (const auto& f : *done) ended[f.id] = f.reason;
    }
    return plan;
  }

  std::map<SchedSeqId, SeqEnd> ended;
  std::map<SchedSeqId, int> stop_at;

 private:
  Scheduler* s_;
};

}  // namespace kinfer
