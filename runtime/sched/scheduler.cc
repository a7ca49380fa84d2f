#include "runtime/sched/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

namespace kinfer {

const char* SeqEndName(SeqEnd e) {
  switch (e) {
    case SeqEnd::kStop:
      return "stop";
    case SeqEnd::kLength:
      return "length";
    case SeqEnd::kCancelled:
      return "cancelled";
    case SeqEnd::kDeadlineExceeded:
      return "deadline_exceeded";
    case SeqEnd::kError:
      return "error";
  }
  return "";
}

Status ValidateSchedulerConfig(const SchedulerConfig& c) {
  if (c.max_batch_tokens <= 0) return InvalidArgument("max_batch_tokens: must be > 0");
  if (c.max_running <= 0) return InvalidArgument("max_running: must be > 0");
  if (c.max_running >= c.max_batch_tokens) {
    // Decode tokens are reserved first; at least one token per step must be left for prefill.
    return InvalidArgument("max_running: must be < max_batch_tokens");
  }
  if (c.max_prefill_chunk <= 0) return InvalidArgument("max_prefill_chunk: must be > 0");
  if (c.max_waiting <= 0) return InvalidArgument("max_waiting: must be > 0");
  if (c.max_waiting_prompt_tokens <= 0) {
    return InvalidArgument("max_waiting_prompt_tokens: must be > 0");
  }
  if (c.priority_aging.count() < 0) return InvalidArgument("priority_aging: must be >= 0");
  KINFER_RETURN_IF_ERROR(ValidateKvBlockManagerOptions(c.kv).WithContext("kv"));
  if (c.watermark_blocks < -1 || c.watermark_blocks >= c.kv.num_blocks) {
    return InvalidArgument("watermark_blocks: must be -1 (auto) or in [0, kv.num_blocks)");
  }
  return Status::Ok();
}

struct Scheduler::Seq {
  SchedSeqId id = 0;
  std::vector<int32_t> tokens;
  int prompt_len = 0;
  int max_tokens = 0;
  int priority = 0;
  uint64_t salt = 0;
  std::optional<SchedTime> deadline;
  SchedTime arrival;
  uint64_t order = 0;  // submission order: the tie-break that makes plans deterministic
  SeqState state = SeqState::kWaiting;
  int num_computed = 0;
  int generated = 0;
  int preemptions = 0;
  int cached_tokens = 0;
  bool cancelled = false;
  bool decode_reserved = false;  // during a Step: a decoder whose token is not yet scheduled
  std::vector<int32_t> draft;    // SetDraft's offer for the next step
  // Lookahead (StepAhead): in the step being computed; held out of the plan ahead (it ends, or
  // its deadline passed, once that step is answered); the index of its token that the step
  // being computed draws (kPendingToken until SetPendingTokens), or -1.
  bool in_flight = false;
  bool held = false;
  int pending_at = -1;

  int len() const { return static_cast<int>(tokens.size()); }
  // Feeding its last sampled token: one decode token per step.
  bool decoding() const { return generated > 0 && num_computed == len() - 1; }
};

struct Scheduler::StepState {
  StepPlan plan;
  int decode_reserved = 0;  // running decoders not yet scheduled (Seq::decode_reserved)
  bool ahead = false;       // StepAhead: never preempts, never ends a sequence in flight

  void Unreserve(Seq& s) {
    if (!s.decode_reserved) return;
    s.decode_reserved = false;
    --decode_reserved;
  }
};

Scheduler::Scheduler(SchedulerConfig config) : config_(std::move(config)) {
  assert(ValidateSchedulerConfig(config_).ok());
  watermark_blocks_ =
      config_.watermark_blocks >= 0 ? config_.watermark_blocks : config_.kv.num_blocks / 100;
  kv_ = std::make_unique<KvBlockManager>(config_.kv);
}

Scheduler::~Scheduler() = default;

Scheduler::Seq* Scheduler::Get(SchedSeqId id) {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

int Scheduler::EffectivePriority(const Seq& s, SchedTime now) const {
  if (config_.priority_aging.count() == 0 || now <= s.arrival) return s.priority;
  const int64_t classes = (now - s.arrival) / config_.priority_aging;
  return static_cast<int>(s.priority - std::min<int64_t>(classes, int64_t{1} << 20));
}

// ---- submission -----------------------------------------------------------------------------

Status Scheduler::Submit(SchedRequest r, SchedTime now) {
  Status st = [&]() -> Status {
    if (r.prompt.empty()) return InvalidArgument("the prompt is empty");
    if (r.max_tokens <= 0) return InvalidArgument("max_tokens must be at least 1");
    if (seqs_.count(r.id) != 0) {
      return InvalidArgument("sequence id " + std::to_string(r.id) + " is already live");
    }
    const int64_t slots = static_cast<int64_t>(r.prompt.size()) + r.max_tokens - 1;
    const int64_t blocks = (slots + kv_->block_size() - 1) / kv_->block_size();
    if (blocks > kv_->num_blocks()) {
      return OutOfRange(
          "the request needs up to " + std::to_string(slots) + " KV cache positions (" +
          std::to_string(blocks) + " blocks); the cache holds " +
          std::to_string(static_cast<int64_t>(kv_->num_blocks()) * kv_->block_size()));
    }
    if (static_cast<int64_t>(r.prompt.size()) > config_.max_waiting_prompt_tokens) {
      return OutOfRange("the prompt has " + std::to_string(r.prompt.size()) + " tokens; at most " +
                        std::to_string(config_.max_waiting_prompt_tokens) + " may wait");
    }
    if (static_cast<int>(waiting_.size()) >= config_.max_waiting) {
      return ResourceExhausted("too many waiting requests (" + std::to_string(config_.max_waiting) +
                               ")");
    }
    if (waiting_prompt_tokens_ + static_cast<int64_t>(r.prompt.size()) >
        config_.max_waiting_prompt_tokens) {
      return ResourceExhausted("too many waiting prompt tokens (" +
                               std::to_string(waiting_prompt_tokens_) + " waiting, limit " +
                               std::to_string(config_.max_waiting_prompt_tokens) + ")");
    }
    return Status::Ok();
  }();
  if (!st.ok()) {
    ++rejected_;
    return st;
  }
  auto s = std::make_unique<Seq>();
  s->id = r.id;
  s->tokens = std::move(r.prompt);
  s->prompt_len = s->len();
  s->max_tokens = r.max_tokens;
  s->priority = r.priority;
  s->salt = r.cache_salt;
  s->deadline = r.deadline;
  s->arrival = now;
  s->order = next_order_++;
  waiting_prompt_tokens_ += s->len();
  waiting_.push_back(r.id);
  seqs_.emplace(r.id, std::move(s));
  return Status::Ok();
}

bool Scheduler::Cancel(SchedSeqId id) {
  Seq* s = Get(id);
  if (s == nullptr) return false;
  s->cancelled = true;
  return true;
}

bool Scheduler::SetDraft(SchedSeqId id, std::vector<int32_t> draft) {
  Seq* s = Get(id);
  if (s == nullptr || s->state != SeqState::kRunning || !s->decoding()) return false;
  s->draft = std::move(draft);
  return true;
}

// ---- one step -------------------------------------------------------------------------------

StepPlan Scheduler::Step(SchedTime now) {
  assert(!has_outstanding_);
  StepState st;
  return Plan(st, now);
}

StepPlan Scheduler::StepAhead(SchedTime now) {
  assert(has_outstanding_ && !has_ahead_ && !outstanding_applied_);
  assert(outstanding_.num_draft_tokens == 0);
  // The outstanding step, applied as if each sampled item drew a token that does not stop.
  for (const auto* list : {&outstanding_.decodes, &outstanding_.prefills}) {
    for (const ScheduledSeq& item : *list) {
      Seq& s = *Get(item.id);  // a sequence in flight ends only when its step is answered
      s.in_flight = true;
      s.num_computed = item.start + item.length;
      if (!item.sample) continue;
      s.pending_at = s.len();
      s.tokens.push_back(kPendingToken);
      ++s.generated;
      ++pending_;
    }
  }
  outstanding_applied_ = true;
  StepState st;
  st.ahead = true;
  StepPlan plan = Plan(st, now);
  for (const auto* list : {&outstanding_.decodes, &outstanding_.prefills}) {
    for (const ScheduledSeq& item : *list) Get(item.id)->held = false;
  }
  return plan;
}

StepPlan Scheduler::Plan(StepState& st, SchedTime now) {
  st.plan.step = ++steps_;

  // 1. Cancellations and deadlines, in queue order (deterministic). Ahead, a sequence in the
  // step being computed ends only after it (its KV is being written): it is held out of this
  // plan, and the next one ends it. So is one whose last token is its max_tokens-th.
  std::vector<SchedSeqId>& live = live_scratch_;
  live = running_;
  live.insert(live.end(), waiting_.begin(), waiting_.end());
  for (SchedSeqId id : live) {
    Seq& s = *Get(id);
    const bool expired = s.deadline && now >= *s.deadline;
    if (s.in_flight) {
      s.held = s.cancelled || expired || s.generated >= s.max_tokens;
      continue;
    }
    if (s.cancelled) {
      EndSequence(id, SeqEnd::kCancelled, Cancelled("the request was cancelled"),
                  &st.plan.finished);
    } else if (expired) {
      EndSequence(id, SeqEnd::kDeadlineExceeded, DeadlineExceeded("the request's deadline passed"),
                  &st.plan.finished);
    }
  }

  ScheduleRunning(st);
  AdmitWaiting(st, now);
  ScheduleDrafts(st);
  ExtendPrefills(st);
  assert(st.plan.num_tokens <= config_.max_batch_tokens);
  if (!st.plan.idle()) {
    if (st.ahead) {
      ahead_ = st.plan;
      has_ahead_ = true;
    } else {
      outstanding_ = st.plan;  // into the last plan's vectors
      has_outstanding_ = true;
    }
  }
  return std::move(st.plan);
}

void Scheduler::SortRunning() {
  // One lookup a sequence, not two a comparison.
  std::vector<RunKey>& keys = sort_keys_;
  keys.clear();
  for (SchedSeqId id : running_) {
    const Seq& s = *seqs_.at(id);
    keys.push_back(RunKey{s.priority, s.order, id});
  }
  std::sort(keys.begin(), keys.end(), [](const RunKey& a, const RunKey& b) {
    return std::tie(a.priority, a.order) < std::tie(b.priority, b.order);
  });
  for (size_t i = 0; i < keys.size(); ++i) running_[i] = keys[i].id;
}

namespace {
int PrefillBudget(const SchedulerConfig& c, const StepPlan& plan, int decode_reserved) {
  return c.max_batch_tokens - plan.num_tokens - decode_reserved;
}
}  // namespace

void Scheduler::ScheduleRunning(StepState& st) {
  SortRunning();
  for (SchedSeqId id : running_) {
    Seq& s = *Get(id);
    if (s.decoding() && !s.held) {
      s.decode_reserved = true;
      ++st.decode_reserved;
    }
  }
  const std::vector<SchedSeqId> order = running_;  // preemption edits running_
  for (SchedSeqId id : order) {
    Seq* s = Get(id);
    if (s == nullptr || s->state != SeqState::kRunning) continue;  // preempted or failed above
    if (s->held) continue;
    if (s->decoding()) {
      st.Unreserve(*s);
      if (!GrowOrPreempt(*s, 1, st)) continue;
      st.plan.decodes.push_back(ScheduledSeq{id, s->num_computed, 1, true, {}});
      st.plan.num_tokens += 1;
      continue;
    }
    const int n = std::min({s->len() - s->num_computed, config_.max_prefill_chunk,
                            PrefillBudget(config_, st.plan, st.decode_reserved)});
    if (n <= 0) continue;
    if (!GrowOrPreempt(*s, n, st)) continue;
    st.plan.prefills.push_back(
        ScheduledSeq{id, s->num_computed, n, s->num_computed + n == s->len(), {}});
    st.plan.num_tokens += n;
  }
  assert(st.decode_reserved == 0);  // every decoder was scheduled, preempted or ended
}

bool Scheduler::GrowOrPreempt(Seq& s, int n, StepState& st) {
  while (!kv_->Grow(s.id, n)) {
    if (st.ahead) {  // preemption waits for a plan made after the step in flight
      st.plan.deferred = true;
      return false;
    }
    // Everything after `s` in running_ is unscheduled and less important, so the back of the
    // list is the victim the rule names (lowest priority, then latest arrival).
    const SchedSeqId victim = running_.back();
    if (victim != s.id) {
      Preempt(victim, st);
      continue;
    }
    if (running_.size() == 1) {
      // Alone and still out of blocks: it can never fit. Submit's check makes this unreachable
      // unless the pool is shared with something else; fail rather than loop.
      EndSequence(s.id, SeqEnd::kError,
                  OutOfRange("the sequence needs more KV cache blocks than the pool has"),
                  &st.plan.finished);
      return false;
    }
    Preempt(s.id, st);
    return false;
  }
  return true;
}

void Scheduler::Unschedule(SchedSeqId id, StepState& st) {
  for (auto* list : {&st.plan.decodes, &st.plan.prefills}) {
    for (auto it = list->begin(); it != list->end(); ++it) {
      if (it->id == id) {
        st.plan.num_tokens -= it->length;
        list->erase(it);
        break;
      }
    }
  }
}

void Scheduler::Preempt(SchedSeqId id, StepState& st) {
  Seq& s = *Get(id);
  assert(s.state == SeqState::kRunning);
  Unschedule(id, st);
  st.Unreserve(s);
  kv_->Free(id);  // its committed full blocks stay cached: the recompute may hit them
  running_.erase(std::find(running_.begin(), running_.end(), id));
  s.state = SeqState::kWaiting;
  s.num_computed = 0;
  s.draft.clear();
  ++s.preemptions;
  ++preemptions_;
  waiting_.push_back(id);
  waiting_prompt_tokens_ += s.len();
  st.plan.preempted.push_back(id);
}

bool Scheduler::MakeRoomByPreemptingLowerClasses(const Seq& s, int blocks_needed, StepState& st,
                                                 bool dry_run) {
  SortRunning();
  // Victims: strictly less important classes, least important (then latest) first. Count only
  // the blocks each holds alone (a lower bound on what preempting it frees) so that nothing is
  // preempted unless it is enough. A block of the newcomer's own cached prefix frees nothing for
  // it: freed, it is a hit the newcomer takes back off the free list (blocks_needed counts the
  // free hits already). Counted, a victim holding the newcomer's prefix was preempted for a
  // newcomer that still did not fit.
  std::vector<int32_t> hit_path = kv_->LookupBlocks(s.tokens, s.salt);
  std::sort(hit_path.begin(), hit_path.end());
  std::vector<SchedSeqId> victims;
  int freeable = 0;
  int available = kv_->num_free_blocks();
  for (auto it = running_.rbegin(); it != running_.rend() && available + freeable < blocks_needed;
       ++it) {
    const Seq& v = *Get(*it);
    if (v.priority <= s.priority) break;
    victims.push_back(*it);
    for (int32_t b : kv_->BlockTable(*it)) {
      freeable += kv_->ref_count(b) == 1 &&
                          !std::binary_search(hit_path.begin(), hit_path.end(), b)
                      ? 1
                      : 0;
    }
  }
  if (available + freeable < blocks_needed) return false;
  if (dry_run) return true;
  for (SchedSeqId v : victims) Preempt(v, st);
  return true;
}

void Scheduler::AdmitWaiting(StepState& st, SchedTime now) {
  // A step that had to preempt is out of KV: admitting now would only preempt again.
  if (!st.plan.preempted.empty() || st.plan.deferred) return;
  struct Key {
    int eff;
    uint64_t order;
    SchedSeqId id;
  };
  std::vector<Key> queue;
  queue.reserve(waiting_.size());
  for (SchedSeqId id : waiting_) {
    const Seq& s = *Get(id);
    queue.push_back(Key{EffectivePriority(s, now), s.order, id});
  }
  std::sort(queue.begin(), queue.end(), [](const Key& a, const Key& b) {
    return std::tie(a.eff, a.order) < std::tie(b.eff, b.order);
  });
  waiting_.clear();
  for (const Key& k : queue) waiting_.push_back(k.id);

  for (const Key& k : queue) {
    if (static_cast<int>(running_.size()) >= config_.max_running) break;
    Seq* sp = Get(k.id);
    if (sp == nullptr || sp->state != SeqState::kWaiting) continue;
    Seq& s = *sp;
    bool preempted_for_it = false;
    int n = 0;
    for (;;) {
      const int budget = PrefillBudget(config_, st.plan, st.decode_reserved);
      if (budget <= 0) return;
      const PrefixHit hit = kv_->Lookup(s.tokens, s.salt);
      n = std::min({s.len() - hit.tokens, config_.max_prefill_chunk, budget});
      const int available = kv_->num_free_blocks() - hit.blocks_free;
      const int chunk_blocks = kv_->BlocksForTokens(hit.tokens + n) - hit.blocks;
      // With others running, admit only when the whole known sequence fits with a margin, so
      // that its later chunks do not preempt them (vLLM's preemption storms near a full pool).
      // Alone, its first chunk is enough: it can always finish by itself (Submit checked).
      const int need = running_.empty()
                           ? chunk_blocks
                           : kv_->BlocksForTokens(s.len()) - hit.blocks + watermark_blocks_;
      if (available >= need) break;
      if (st.ahead) {  // no preemption ahead: the next plan does it, if it can
        st.plan.deferred = !preempted_for_it && !running_.empty() &&
                           MakeRoomByPreemptingLowerClasses(s, need + hit.blocks_free, st,
                                                            /*dry_run=*/true);
        return;
      }
      if (running_.empty()) {
        EndSequence(s.id, SeqEnd::kError,
                    OutOfRange("the sequence needs more KV cache blocks than the pool has"),
                    &st.plan.finished);
        n = 0;
        break;
      }
      if (preempted_for_it || !MakeRoomByPreemptingLowerClasses(s, need + hit.blocks_free, st)) {
        return;  // no skipping ahead: the head waits for room
      }
      preempted_for_it = true;  // look up again: preemption freed (and maybe cached) blocks
    }
    if (n == 0) continue;
    const std::optional<int> cached = kv_->Allocate(s.id, s.tokens, s.salt, n);
    assert(cached.has_value());
    if (!cached) return;
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s.id));
    waiting_prompt_tokens_ -= s.len();
    running_.push_back(s.id);
    s.state = SeqState::kRunning;
    s.num_computed = *cached;
    s.cached_tokens = *cached;
    ++admitted_;
    st.plan.prefills.push_back(ScheduledSeq{s.id, *cached, n, *cached + n == s.len(), {}});
    st.plan.num_tokens += n;
  }
}

int Scheduler::FreeRoom(SchedSeqId id) const {
  return static_cast<int>(kv_->BlockTable(id).size()) * kv_->block_size() - kv_->num_slots(id) +
         kv_->num_free_blocks() * kv_->block_size();
}

void Scheduler::ScheduleDrafts(StepState& st) {
  for (ScheduledSeq& item : st.plan.decodes) {
    Seq& s = *Get(item.id);
    std::vector<int32_t> draft = std::move(s.draft);
    s.draft.clear();
    if (draft.empty() || st.ahead) continue;  // a draft follows a token that is known
    const int budget = PrefillBudget(config_, st.plan, st.decode_reserved);
    // Verifying k drafts can yield k + 1 tokens: stay within max_tokens.
    const int k = std::min({static_cast<int>(draft.size()), s.max_tokens - s.generated - 1, budget,
                            FreeRoom(item.id)});
    if (k <= 0 || !kv_->Grow(item.id, k)) continue;
    draft.resize(k);
    item.length += k;
    item.draft = std::move(draft);
    st.plan.num_tokens += k;
    st.plan.num_draft_tokens += k;
  }
}

void Scheduler::ExtendPrefills(StepState& st) {
  for (ScheduledSeq& item : st.plan.prefills) {
    const int budget = PrefillBudget(config_, st.plan, st.decode_reserved);
    if (budget <= 0) return;
    const Seq& s = *Get(item.id);
    const int remaining = s.len() - (item.start + item.length);
    if (remaining <= 0) continue;
    // Only what free blocks (plus the room left in its last block) can hold; never preempts.
    const int extra = std::min({remaining, budget, FreeRoom(item.id)});
    if (extra <= 0 || !kv_->Grow(item.id, extra)) continue;
    item.length += extra;
    item.sample = item.start + item.length == s.len();
    st.plan.num_tokens += extra;
  }
}

// ---- results --------------------------------------------------------------------------------

StatusOr<std::vector<FinishedSeq>> Scheduler::OnStepDone(const StepResult& result) {
  if (!has_outstanding_) return FailedPrecondition("no step is being computed");
  const StepPlan& plan = outstanding_;
  // The results by id (sorted, searched): one allocation a step, not one a sequence.
  std::vector<std::pair<SchedSeqId, const SampledToken*>>& sampled = sampled_scratch_;
  sampled.clear();
  for (const SampledToken& t : result.sampled) sampled.emplace_back(t.id, &t);
  std::sort(sampled.begin(), sampled.end());
  for (size_t i = 1; i < sampled.size(); ++i) {
    if (sampled[i].first == sampled[i - 1].first) {
      return InvalidArgument("two sampled tokens for sequence " + std::to_string(sampled[i].first));
    }
  }
  auto find = [&](SchedSeqId id) -> const SampledToken* {
    auto it = std::lower_bound(sampled.begin(), sampled.end(),
                               std::pair<SchedSeqId, const SampledToken*>(id, nullptr));
    return it != sampled.end() && it->first == id ? it->second : nullptr;
  };
  size_t expected = 0;
  for (const auto* list : {&plan.decodes, &plan.prefills}) {
    for (const ScheduledSeq& item : *list) {
      if (!item.sample) continue;
      ++expected;
      const SampledToken* t = find(item.id);
      if (t == nullptr) {
        return InvalidArgument("no sampled token for sequence " + std::to_string(item.id));
      }
      const int accepted = t->accepted;
      if (accepted < 0 || accepted > static_cast<int>(item.draft.size())) {
        return InvalidArgument("sequence " + std::to_string(item.id) + ": " +
                               std::to_string(accepted) + " draft tokens accepted of " +
                               std::to_string(item.draft.size()));
      }
    }
  }
  if (expected != sampled.size()) {
    return InvalidArgument("a sampled token for a sequence that was not to be sampled");
  }

  std::vector<FinishedSeq> done;
  auto cacheable = [&](const Seq& s) {
    return config_.cache_generated_blocks ? std::numeric_limits<int>::max() : s.prompt_len;
  };
  for (const auto* list : {&plan.decodes, &plan.prefills}) {
    for (const ScheduledSeq& item : *list) {
      Seq& s = *Get(item.id);
      const SampledToken* t = item.sample ? find(item.id) : nullptr;
      if (outstanding_applied_) {  // StepAhead applied it already, but for the tokens' values
        s.in_flight = false;
        if (t != nullptr) {
          s.tokens[s.pending_at] = t->token;
          s.pending_at = -1;
        }
        kv_->Commit(s.id, s.tokens, s.num_computed, cacheable(s));
        if (t == nullptr) continue;
        if (t->stop) {
          EndSequence(s.id, SeqEnd::kStop, Status::Ok(), &done);
        } else if (s.generated >= s.max_tokens) {
          EndSequence(s.id, SeqEnd::kLength, Status::Ok(), &done);
        }
        continue;
      }
      const int accepted = t != nullptr ? t->accepted : 0;
      // Accepted draft tokens join the sequence (their KV is valid); rejected ones give their
      // slots back.
      s.tokens.insert(s.tokens.end(), item.draft.begin(), item.draft.begin() + accepted);
      s.num_computed = item.start + item.length - static_cast<int>(item.draft.size()) + accepted;
      if (kv_->num_slots(s.id) > s.num_computed && !item.draft.empty()) {
        kv_->Shrink(s.id, s.num_computed);
      }
      const int ndraft = static_cast<int>(item.draft.size());
      if (t != nullptr && t->stop && ndraft > 0) {
        // Ended inside the draft: a stop token that was the draft's counts as accepted, and the
        // drafts after it were never checked against anything (the sequence is over).
        const bool stop_was_drafted = accepted < ndraft && t->token == item.draft[accepted];
        draft_tokens_ += std::min(ndraft, accepted + 1);
        accepted_tokens_ += accepted + (stop_was_drafted ? 1 : 0);
      } else {
        draft_tokens_ += ndraft;
        accepted_tokens_ += accepted;
      }
      kv_->Commit(s.id, s.tokens, s.num_computed, cacheable(s));
      if (t == nullptr) continue;
      s.tokens.push_back(t->token);
      s.generated += accepted + 1;
      if (t->stop) {
        EndSequence(s.id, SeqEnd::kStop, Status::Ok(), &done);
      } else if (s.generated >= s.max_tokens) {
        EndSequence(s.id, SeqEnd::kLength, Status::Ok(), &done);
      }
    }
  }
  outstanding_applied_ = false;
  pending_ = 0;
  // The plan ahead (less what just ended) is the one being computed now, even when nothing is
  // left of it: the engine answers it like any other.
  has_outstanding_ = has_ahead_;
  if (has_ahead_) std::swap(outstanding_, ahead_);
  has_ahead_ = false;
  return done;
}

Status Scheduler::SetPendingTokens(const StepResult& result) {
  if (!outstanding_applied_) return FailedPrecondition("no step is planned ahead");
  int filled = 0;
  for (const SampledToken& t : result.sampled) {
    Seq* s = Get(t.id);
    if (s == nullptr || s->pending_at < 0) {
      return InvalidArgument("sequence " + std::to_string(t.id) + " has no token pending");
    }
    if (t.token < 0) {
      return InvalidArgument("sequence " + std::to_string(t.id) + ": token " +
                             std::to_string(t.token));
    }
    int32_t& slot = s->tokens[s->pending_at];
    if (slot == kPendingToken) ++filled;
    slot = t.token;
  }
  if (filled != pending_) {
    return InvalidArgument(std::to_string(filled) + " pending tokens given of " +
                           std::to_string(pending_));
  }
  return Status::Ok();
}

std::vector<FinishedSeq> Scheduler::OnStepFailed(const Status& error) {
  std::vector<FinishedSeq> done;
  if (!has_outstanding_) return done;
  const bool had_ahead = has_ahead_;  // else ahead_ holds an earlier plan
  has_outstanding_ = false;
  has_ahead_ = false;
  outstanding_applied_ = false;
  pending_ = 0;
  for (const StepPlan* plan : {&outstanding_, &ahead_}) {
    if (plan == &ahead_ && !had_ahead) break;
    for (const auto* list : {&plan->decodes, &plan->prefills}) {
      for (const ScheduledSeq& item : *list) {
        if (Get(item.id) != nullptr) EndSequence(item.id, SeqEnd::kError, error, &done);
      }
    }
  }
  return done;
}

// ---- bookkeeping ----------------------------------------------------------------------------

void Scheduler::RemoveFromQueues(SchedSeqId id) {
  auto r = std::find(running_.begin(), running_.end(), id);
  if (r != running_.end()) {
    running_.erase(r);
    return;
  }
  auto w = std::find(waiting_.begin(), waiting_.end(), id);
  if (w != waiting_.end()) {
    waiting_prompt_tokens_ -= Get(id)->len();
    waiting_.erase(w);
  }
}

void Scheduler::EndSequence(SchedSeqId id, SeqEnd reason, Status status,
                            std::vector<FinishedSeq>* out) {
  // Ended while planned ahead (a late stop): the plan ahead's row for it is computed and thrown
  // away. Its blocks may go to another sequence at once: the engine launches the next plan only
  // after the step ahead is computed.
  if (has_ahead_) {
    for (auto* list : {&ahead_.decodes, &ahead_.prefills}) {
      for (auto it = list->begin(); it != list->end(); ++it) {
        if (it->id == id) {
          ahead_.num_tokens -= it->length;
          list->erase(it);
          break;
        }
      }
    }
  }
  kv_->Free(id);
  RemoveFromQueues(id);
  seqs_.erase(id);
  ++finished_;
  out->push_back(FinishedSeq{id, reason, std::move(status)});
}

std::optional<SeqView> Scheduler::Find(SchedSeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  const Seq& s = *it->second;
  SeqView v;
  v.id = s.id;
  v.state = s.state;
  v.tokens = s.tokens;
  v.prompt_len = s.prompt_len;
  v.generated = s.generated;
  v.num_computed = s.num_computed;
  v.priority = s.priority;
  v.preemptions = s.preemptions;
  v.cached_tokens = s.cached_tokens;
  v.decoding = s.state == SeqState::kRunning && s.decoding();
  return v;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats st;
  st.running = num_running();
  st.waiting = num_waiting();
  st.waiting_prompt_tokens = waiting_prompt_tokens_;
  st.steps = steps_;
  st.admitted = admitted_;
  st.preemptions = preemptions_;
  st.rejected = rejected_;
  st.finished = finished_;
  st.draft_tokens = draft_tokens_;
  st.accepted_tokens = accepted_tokens_;
  st.kv = kv_->stats();
  return st;
}

}  // namespace kinfer
