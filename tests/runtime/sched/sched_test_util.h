// Helpers for the scheduler tests: a fake engine that answers plans with fabricated tokens.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
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
    Deliver(Answer(plan));
    return plan;
  }

  // The engine with lookahead: while the step planned last is computed, plans the next one with
  // StepAhead (a Step when there is none, or the last plan ahead was deferred), gives the
  // computed step's tokens (SetPendingTokens), then its stop flags (OnStepDone). Returns the
  // plan made.
  StepPlan RunPipelined(SchedTime now) {
    if (!in_flight_) {
      StepPlan plan = s_->Step(now);
      for (const auto& f : plan.finished) ended[f.id] = f.reason;
      if (!plan.idle()) in_flight_ = Answer(plan);
      return plan;
    }
    StepPlan ahead;
    std::optional<StepResult> next;
    // Rows of sequences that ended after the step was planned are thrown away.
    std::erase_if(in_flight_->sampled,
                  [&](const SampledToken& t) { return !s_->Find(t.id).has_value(); });
    if (!deferred_) {
      ahead = s_->StepAhead(now);
      for (const auto& f : ahead.finished) ended[f.id] = f.reason;
      deferred_ = ahead.deferred;
      if (!ahead.idle()) next = Answer(ahead);
      const Status st = s_->SetPendingTokens(*in_flight_);
      EXPECT_TRUE(st.ok()) << st.ToString();
      ++ahead_steps;
      // What the engine feeds the plan ahead is known now, and it is each position's token.
      for (const auto* list : {&ahead.decodes, &ahead.prefills}) {
        for (const ScheduledSeq& item : *list) {
          const auto view = s_->Find(item.id);
          if (!view) continue;
          for (int p = item.start; p < item.start + item.length; ++p) {
            const int32_t want = p < view->prompt_len ? view->tokens[p] : TokenFor(item.id, p);
            EXPECT_EQ(view->tokens[p], want) << "sequence " << item.id << " position " << p;
          }
        }
      }
    } else {
      deferred_ = false;
    }
    Deliver(*in_flight_);
    in_flight_ = std::move(next);
    if (!ahead.idle()) return ahead;
    if (!in_flight_) return RunPipelined(now);  // nothing ahead: plan now
    return ahead;
  }

  // The tokens a plan's sampled items draw, and whether they stop; checks the plan against the
  // sequences as they stand.
  StepResult Answer(const StepPlan& plan) {
    StepResult r;
    for (const auto* list : {&plan.decodes, &plan.prefills}) {
      for (const ScheduledSeq& item : *list) {
        const auto view = s_->Find(item.id);
        EXPECT_TRUE(view.has_value());
        if (!view) continue;
        // The plan is consistent with the sequence and its reserved KV slots.
        const int end = item.start + item.length;
        const int ndraft = static_cast<int>(item.draft.size());
        const int len = static_cast<int>(view->tokens.size());
        EXPECT_EQ(view->state, SeqState::kRunning);
        EXPECT_EQ(item.start, view->num_computed);
        EXPECT_LE(end - ndraft, len);
        EXPECT_EQ(item.sample, end - ndraft == len);
        if (ndraft > 0) {
          EXPECT_TRUE(view->decoding);
          EXPECT_EQ(item.length, 1 + ndraft);
        }
        EXPECT_GE(s_->kv().num_slots(item.id), end);
        EXPECT_GE(static_cast<int>(s_->BlockTable(item.id).size()) * s_->kv().block_size(), end);
        if (!item.sample) continue;
        // Verification as a real engine does it: draft token j (at position len + j) is accepted
        // while it equals the target's token there; a stop ends the sequence at its token.
        auto it = stop_at.find(item.id);
        const int stop_n = it != stop_at.end() ? it->second : -1;
        SampledToken t;
        t.id = item.id;
        int j = 0;
        for (;;) {
          const int32_t target = TokenFor(item.id, len + j);
          const bool stop = stop_n > 0 && view->generated + j + 1 >= stop_n;
          if (j == ndraft || item.draft[j] != target || stop) {
            t.token = target;
            t.stop = stop;
            break;
          }
          ++j;
        }
        t.accepted = j;
        r.sampled.push_back(t);
        drafts[item.id] = item.draft;
      }
    }
    return r;
  }

  // Answers the outstanding plan with `r`, less the tokens of sequences that ended meanwhile
  // (a late stop: the engine throws those rows away).
  void Deliver(StepResult r) {
    std::erase_if(r.sampled, [&](const SampledToken& t) { return !s_->Find(t.id).has_value(); });
    for (const SampledToken& t : r.sampled) {
      accepted_total += t.accepted;
      auto& out = emitted[t.id];
      const std::vector<int32_t>& d = drafts[t.id];
      out.insert(out.end(), d.begin(), d.begin() + t.accepted);
      out.push_back(t.token);
    }
    auto done = s_->OnStepDone(r);
    EXPECT_TRUE(done.ok()) << done.status().ToString();
    if (done.ok()) {
      for (const auto& f : *done) ended[f.id] = f.reason;
    }
  }

  std::map<SchedSeqId, SeqEnd> ended;
  std::map<SchedSeqId, int> stop_at;
  int64_t accepted_total = 0;
  std::map<SchedSeqId, std::vector<int32_t>> emitted;  // every sequence's generated tokens
  int64_t ahead_steps = 0;                             // RunPipelined: StepAhead calls

 private:
  Scheduler* s_;
  std::map<SchedSeqId, std::vector<int32_t>> drafts;  // each sequence's last planned draft
  std::optional<StepResult> in_flight_;               // RunPipelined: the step being computed
  bool deferred_ = false;
};

// ---- fixture ----------------------------------------------------------------------------------

inline SchedulerConfig Config(int num_blocks = 256, int block_size = 16) {
  SchedulerConfig c;
  c.kv.num_blocks = num_blocks;
  c.kv.block_size = block_size;
  c.watermark_blocks = 0;
  return c;
}

inline SchedRequest Req(SchedSeqId id, int prompt_len, int max_tokens, int priority = 0,
                        int32_t first_token = -1) {
  SchedRequest r;
  r.id = id;
  r.prompt = Tokens(first_token >= 0 ? first_token : static_cast<int32_t>(id) * 10000, prompt_len);
  r.max_tokens = max_tokens;
  r.priority = priority;
  return r;
}

class SchedulerTest : public ::testing::Test {
 protected:
  void Make(SchedulerConfig c) {
    ASSERT_TRUE(ValidateSchedulerConfig(c).ok()) << ValidateSchedulerConfig(c).ToString();
    s_ = std::make_unique<Scheduler>(std::move(c));
    eng_ = std::make_unique<FakeEngine>(s_.get());
  }
  void Submit(SchedRequest r, SchedTime now = T0()) {
    const Status st = s_->Submit(std::move(r), now);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  StepPlan Run(SchedTime now = T0()) {
    StepPlan p = eng_->RunStep(now);
    EXPECT_LE(p.num_tokens, s_->config().max_batch_tokens) << PlanString(p);
    int sum = 0;
    for (const auto& d : p.decodes) sum += d.length;
    for (const auto& c : p.prefills) sum += c.length;
    EXPECT_EQ(sum, p.num_tokens) << PlanString(p);
    const Status inv = s_->kv().CheckInvariants();
    EXPECT_TRUE(inv.ok()) << inv.ToString();
    return p;
  }
  // Steps until nothing is left (or `max_steps`); returns the number of steps.
  int Drain(int max_steps = 10000, SchedTime now = T0()) {
    int n = 0;
    while (s_->has_work() && n < max_steps) {
      Run(now);
      ++n;
    }
    return n;
  }
  static const ScheduledSeq* FindItem(const std::vector<ScheduledSeq>& v, SchedSeqId id) {
    for (const auto& i : v) {
      if (i.id == id) return &i;
    }
    return nullptr;
  }
  std::unique_ptr<Scheduler> s_;
  std::unique_ptr<FakeEngine> eng_;
};

}  // namespace kinfer
