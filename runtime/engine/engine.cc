#include "runtime/engine/engine.h"

#include <pthread.h>

#include <algorithm>
#include <limits>
#include <string>

#include "runtime/backend/cpu/matmul.h"
#include "runtime/backend/cpu_backend.h"
#include "runtime/backend/model_backend.h"
#include "runtime/model/llama_model.h"
#include "runtime/sample/sampler.h"
#include "runtime/sample/stop_matcher.h"
#include "runtime/sched/scheduler.h"
#include "runtime/spec/draft_model_proposer.h"
#include "runtime/spec/draft_proposer.h"
#include "runtime/tokenizer/streaming_decoder.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {
namespace {

// The position of a sampled item's input token: the last token it feeds (no draft).
size_t InputPosition(const ScheduledSeq& item) {
  return static_cast<size_t>(item.start) + static_cast<size_t>(item.length) - 1;
}

// The position of the input token of an item's first sampled row: a draft's rows start at the
// item's first position, one per position; otherwise the one row is the last position's.
size_t FirstRowInput(const ScheduledSeq& item) {
  return item.draft.empty() ? InputPosition(item) : static_cast<size_t>(item.start);
}

// The output index (0: the first generated token) of the token the row whose input is at
// `input` draws: its noise key's (Sampler::Seek).
uint64_t OutputIndex(const GenerationRequest& req, size_t input) {
  return static_cast<uint64_t>(input + 1 - req.prompt_tokens.size());
}

// A request's draw settings with a mask, to ask a backend whether it takes masked draws.
DrawParams MaskedProbe(const Sampler& s) {
  static constexpr uint64_t kAll = ~uint64_t{0};
  DrawParams p = s.draw_params();
  p.mask = std::span<const uint64_t>(&kAll, 1);
  return p;
}

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "";
}

// ---- RequestStream --------------------------------------------------------------------------

bool RequestStream::Next(StreamEvent* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (finished_) return false;
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  if (out->finish != FinishReason::kNone) finished_ = true;
  return true;
}

void RequestStream::SetNotifier(std::shared_ptr<StreamNotifier> n) {
  std::lock_guard<std::mutex> lock(mu_);
  notifier_ = std::move(n);
}

void RequestStream::Push(StreamEvent ev) {
  std::shared_ptr<StreamNotifier> notifier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
    notifier = notifier_;
  }
  cv_.notify_all();
  if (notifier) notifier->Notify();
}

// ---- Engine ---------------------------------------------------------------------------------

// A submitted request's state, owned by the engine thread.
struct Engine::Active {
  Active(GenerationRequest r, std::shared_ptr<RequestStream> st, const Tokenizer& tok,
         std::chrono::steady_clock::time_point enq, std::unique_ptr<TokenConstraint> constraint)
      : req(std::move(r)),
        stream(std::move(st)),
        sampler(req.sampling, std::move(constraint)),
        stops(req.stop),
        decoder(tok, req.echo_special),
        history(req.prompt_tokens),
        enqueued(enq) {}

  GenerationRequest req;
  std::shared_ptr<RequestStream> stream;
  Sampler sampler;
  StopMatcher stops;
  StreamingDecoder decoder;
  std::vector<int32_t> history;  // prompt, then generated (the sampler's penalties read it)
  std::chrono::steady_clock::time_point enqueued;
  int generated = 0;
  bool started = false;  // the scheduler has planned it at least once
  double queue_seconds = -1;
  int cached_tokens = 0;  // prompt tokens the prefix cache served at its first admission
  bool first_event = true;
  bool cancel_sent = false;
  bool finished = false;  // its final event is pushed
  int spec_tokens = 0;    // draft tokens per step at most; 0 = no speculation
  // prompt_logprobs: those of prompt positions [1, prompt_scored), until the first token's event.
  std::vector<TokenLogprob> prompt_lps;
  size_t prompt_scored = 1;
  // EngineOptions::stream_interval: what is held back from the stream (`holding`), and whether
  // an event with tokens has gone out.
  StreamEvent held;
  bool holding = false;
  bool sent_tokens = false;
  // The constraint has taken the token the step before drew, ahead of its Emit
  // (Engine::FinishLateMasks), which then does not pass it again.
  bool accepted_ahead = false;
};

Engine::Engine(ModelBackend* backend, const Tokenizer* tokenizer, EngineOptions options)
    : backend_(backend), tokenizer_(tokenizer), options_(options) {
  Start();
}

Engine::Engine(LlamaModel* model, const Tokenizer* tokenizer, EngineOptions options)
    : owned_backend_(CpuBackend::Borrow(model)),
      backend_(owned_backend_.get()),
      tokenizer_(tokenizer),
      options_(options) {
  Start();
}

void Engine::Start() {
  context_length_ = options_.context_length > 0
                        ? std::min(options_.context_length, backend_->hparams().n_ctx_train)
                        : backend_->hparams().n_ctx_train;
  if (options_.overlap_streaming) pump_ = std::make_unique<EventPump>();
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "kinfer-engine");  // for top -H, perf and gdb
    Loop();
  });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  started_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  pump_.reset();  // pushes what the engine thread posted last
  for (Pending& p : inbox_) {
    StreamEvent ev;
    ev.finish = FinishReason::kCancelled;
    p.stream->Push(std::move(ev));
  }
}

StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(GenerationRequest request) {
  if (request.prompt_tokens.empty()) return InvalidArgument("the prompt is empty");
  const int vocab = backend_->hparams().n_vocab;
  for (int32_t id : request.prompt_tokens) {
    if (id < 0 || id >= vocab) {
      return InvalidArgument("prompt token id " + std::to_string(id) +
                             " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
    }
  }
  if (request.max_tokens <= 0) return InvalidArgument("max_tokens must be at least 1");
  const int64_t need = static_cast<int64_t>(request.prompt_tokens.size()) + request.max_tokens;
  if (need > context_length_) {
    return OutOfRange(
        "this model's maximum context length is " + std::to_string(context_length_) +
        " tokens, but the request has " + std::to_string(request.prompt_tokens.size()) +
        " prompt tokens and asks for " + std::to_string(request.max_tokens) + " more");
  }
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("the engine is shutting down");
    if (!broken_.ok()) return broken_;
    const int64_t waiting = waiting_.load() + static_cast<int64_t>(inbox_.size());
    if (waiting >= options_.max_queued_requests) {
      return ResourceExhausted("too many queued requests (" +
                               std::to_string(options_.max_queued_requests) + ")");
    }
    // The scheduler's waiting-token limit, judged here too: refused now, the HTTP layer answers
    // 503 before a stream's 200 (refused once queued, it could only end the stream in an error).
    const int64_t prompt = static_cast<int64_t>(request.prompt_tokens.size());
    const int64_t waiting_tokens = waiting_prompt_tokens_.load() + inbox_prompt_tokens_;
    if (waiting_tokens > 0 && waiting_tokens + prompt > max_waiting_prompt_tokens()) {
      return ResourceExhausted("too many waiting prompt tokens (" +
                               std::to_string(waiting_tokens) + " waiting, limit " +
                               std::to_string(max_waiting_prompt_tokens()) + ")");
    }
    inbox_prompt_tokens_ += prompt;
    inbox_.push_back(
        Pending{next_id_++, std::move(request), stream, std::chrono::steady_clock::now()});
  }
  cv_.notify_one();
  return stream;
}

Status Engine::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

Status Engine::WaitStarted() const {
  std::unique_lock<std::mutex> lock(mu_);
  started_cv_.wait(lock, [&] { return started_ || stopping_; });
  return broken_;
}

bool Engine::needs_restart() const {
  std::lock_guard<std::mutex> lock(mu_);
  return device_lost_;
}

EngineStats Engine::Stats() const {
  EngineStats s;
  s.running = running_.load();
  s.waiting = waiting_.load();
  s.kv_tokens_used = kv_used_.load();
  s.kv_tokens_capacity = kv_blocks_total_.load() * options_.kv_block_size;
  s.kv_blocks_used = kv_blocks_used_.load();
  s.kv_blocks_total = kv_blocks_total_.load();
  s.prefix_cache_queries_tokens = prefix_queries_.load();
  s.prefix_cache_hits_tokens = prefix_hits_.load();
  s.preemptions = preemptions_.load();
  s.spec_draft_tokens = spec_draft_.load();
  s.spec_accepted_tokens = spec_accepted_.load();
  s.steps = steps_.load();
  s.steps_planned_ahead = steps_ahead_.load();
  s.steps_chained = steps_chained_.load();
  s.steps_mixed = steps_mixed_.load();
  return s;
}

void Engine::Loop() {
  SetMatMulGemmEnabled(!options_.batch_invariant);
  const int bs = std::max(1, options_.kv_block_size);
  int64_t kv_tokens =
      options_.kv_cache_tokens > 0 ? options_.kv_cache_tokens : 2 * int64_t{context_length_};
  if (options_.kv_cache_fraction > 0) {
    const int64_t budget = backend_->KvMemoryBudgetBytes(options_.kv_cache_fraction);
    kv_tokens = budget / static_cast<int64_t>(backend_->KvBlockBytes(bs)) * bs;
  }
  kv_tokens = std::max<int64_t>(kv_tokens, context_length_);  // a full-length request must fit
  kv_tokens = std::min<int64_t>(kv_tokens, int64_t{1} << 30);
  const int num_blocks = static_cast<int>((kv_tokens + bs - 1) / bs);
  Status kv_status = backend_->InitKvCache(bs, num_blocks);

  SchedulerConfig sc;
  sc.max_batch_tokens = std::min(options_.max_batch_tokens, backend_->max_batch_tokens());
  sc.max_running = std::max(1, std::min(options_.max_running, sc.max_batch_tokens - 1));
  sc.max_prefill_chunk = PrefillChunkFor(sc.max_batch_tokens, sc.max_prefill_chunk);
  sc.max_waiting = options_.max_queued_requests;
  sc.max_waiting_prompt_tokens = max_waiting_prompt_tokens();
  sc.kv.num_blocks = num_blocks;
  sc.kv.block_size = bs;
  sc.kv.enable_prefix_caching = options_.prefix_caching;
  // Every token, prompt or generated, takes llama.cpp's batch-path numerics (what llama-server
  // itself uses when it batches several slots), so a token's keys do not depend on whether it was
  // generated or read in a prompt: blocks of a previous answer are shared exactly with the next
  // turn's prompt.
  sc.cache_generated_blocks = true;
  Status valid = kv_status.ok() ? ValidateSchedulerConfig(sc) : kv_status;
  if (!valid.ok()) {
    // Nothing can be served: requests already in the inbox end with the reason, and Submit refuses
    // the rest with it (health()).
    std::unique_lock<std::mutex> lock(mu_);
    broken_ = Internal("the engine cannot serve: " + valid.message());
    started_ = true;
    started_cv_.notify_all();
    for (;;) {
      for (Pending& p : inbox_) {
        StreamEvent ev;
        ev.finish = FinishReason::kError;
        ev.error = broken_;
        p.stream->Push(std::move(ev));
      }
      inbox_.clear();
      inbox_prompt_tokens_ = 0;
      cv_.wait(lock, [&] { return stopping_ || !inbox_.empty(); });
      if (stopping_) return;
    }
  }
  scheduler_ = std::make_unique<Scheduler>(sc);
  kv_blocks_total_.store(num_blocks);
  {
    std::lock_guard<std::mutex> lock(mu_);
    started_ = true;
  }
  started_cv_.notify_all();
  if (options_.spec.draft_model != nullptr) {
    proposer_ = std::make_unique<DraftModelProposer>(options_.spec.draft_model);
  } else {
    proposer_ = std::make_unique<NgramProposer>(
        NgramOptions{options_.spec.ngram_min, options_.spec.ngram_max});
  }

  // work_[0] is the step being computed (or none); work_[1] the one planned ahead of it.
  StepWork* cur = &work_[0];
  StepWork* next = &work_[1];
  bool in_flight = false;  // *cur is launched (or empty), its results not yet emitted
  for (;;) {
    std::deque<Pending> inbox;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!in_flight && !scheduler_->has_work()) {
        cv_.wait(lock, [&] { return stopping_ || !inbox_.empty(); });
      }
      if (stopping_) break;
      inbox.swap(inbox_);
      // Submit counts these as waiting from now on: otherwise, until the next PublishStats, they
      // are in neither inbox_ nor waiting_, Submit lets more in than max_queued_requests, and
      // the scheduler refuses them once queued instead.
      waiting_.store(waiting_.load() + static_cast<int64_t>(inbox.size()));
      waiting_prompt_tokens_.store(waiting_prompt_tokens_.load() + inbox_prompt_tokens_);
      inbox_prompt_tokens_ = 0;
    }
    Admit(&inbox);
    for (auto& [id, a] : active_) {
      if (!a->cancel_sent && a->stream->cancelled()) {
        scheduler_->Cancel(id);
        a->cancel_sent = true;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (!in_flight) {
      ProposeDrafts();
      cur->plan = scheduler_->Step(now);
      cur->ahead = false;
      EndPlanned(cur->plan.finished);
      if (!cur->plan.idle()) {
        Prepare(*cur, now);
        const Status st = Launch(*cur);
        if (st.ok()) {
          in_flight = true;
        } else {
          FailStep(st);
        }
      }
    }
    if (in_flight) {
      // Plan the next step while this one is computed, and prepare its batch.
      bool ahead = false;
      if (CanPlanAhead(*cur)) {
        next->plan = scheduler_->StepAhead(now);
        defer_ahead_ = next->plan.deferred;
        EndPlanned(next->plan.finished);
        ahead = !next->plan.idle();
        if (ahead) Prepare(*next, now, /*inputs_pending=*/true);
        next->ahead = true;
      } else {
        defer_ahead_ = false;
      }
      // Two steps on the backend: the next one goes in before this one's tokens are back.
      const bool chained = ahead && LaunchChained(*cur, *next);
      Status st = Collect(*cur);
      const bool collected = st.ok();  // (a failed collect ends every launched step)
      bool launched_next = chained;
      if (st.ok() && ahead) {
        // The tokens just drawn are the plan ahead's inputs.
        pending_result_.sampled.clear();
        for (size_t i = 0; i < cur->sampled.size(); ++i) {
          const Active* a = cur->sampled[i].active;
          if (a == nullptr || a->finished) continue;  // ended after it was planned
          pending_result_.sampled.push_back(
              SampledToken{cur->sampled[i].item->id, cur->chosen[i], false, 0});
        }
        st = scheduler_->SetPendingTokens(pending_result_);
        if (st.ok() && next->backend && !chained) {
          FinishLateMasks(*cur, *next);
          const Status launch = Launch(*next);
          if (!launch.ok()) {
            Emit(*cur);  // this step's tokens are good; the step ahead's sequences fail
            FailStep(launch);
            in_flight = false;
            FlushOutbox();
            PublishStats();
            continue;
          }
          launched_next = true;
        }
      }
      if (!st.ok()) {
        if (chained && collected) {
          // SetPendingTokens refused (a bug): the chained step is still on the backend.
          std::vector<int32_t> dropped;
          (void)backend_->FinishSample(&dropped);
        }
        FailStep(st);
        in_flight = false;
      } else if (!Emit(*cur)) {
        // The scheduler refused the result and every planned sequence failed with it: a step
        // launched ahead is collected and dropped (the backend must be left with none), and
        // nothing is planned on from the failed plans.
        if (launched_next) (void)Collect(*next);
        in_flight = false;
      } else {
        in_flight = false;
        if (ahead) {
          std::swap(cur, next);
          Status launch;
          if (!launched_next) {
            // Sampled on the host, so computed only now: Emit may have ended sequences the
            // prepared batch points into (late stops), so it is built again without them.
            Prepare(*cur, now);
            if (!cur->batch.empty()) launch = Launch(*cur);
          }
          if (launch.ok()) {
            in_flight = true;  // an empty step is answered empty
          } else {
            FailStep(launch);
          }
        }
      }
    }
    FlushOutbox();  // this iteration's events: the step's tokens, and requests that ended
    PublishStats();
  }
  if (in_flight) (void)Collect(*cur);  // leave the backend with no step launched
  for (auto& [id, a] : active_) {
    if (!a->finished) Finish(*a, FinishReason::kCancelled, Status::Ok());
  }
  active_.clear();
  retired_.clear();
  FlushOutbox();
}

std::shared_ptr<const ConstraintVocab> Engine::ConstraintVocabulary() {
  if (constraint_vocab_) return constraint_vocab_;
  auto v = std::make_shared<ConstraintVocab>();
  const int32_t n = tokenizer_->vocab_size();
  v->bytes.resize(static_cast<size_t>(n));
  v->kind.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    const size_t i = static_cast<size_t>(id);
    if (tokenizer_->IsEndOfGeneration(id)) {
      v->kind[i] = ConstraintVocab::kEndOfGeneration;
      continue;
    }
    v->bytes[i] = tokenizer_->TokenToPiece(id, /*special=*/false);
    v->kind[i] = tokenizer_->IsControl(id) || v->bytes[i].empty() ? ConstraintVocab::kNever
                                                                  : ConstraintVocab::kText;
  }
  v->Index();
  constraint_vocab_ = std::move(v);
  return constraint_vocab_;
}

void Engine::Admit(std::deque<Pending>* inbox) {
  const auto now = std::chrono::steady_clock::now();
  for (Pending& p : *inbox) {
    std::unique_ptr<TokenConstraint> constraint;
    if (p.request.json_object) {
      constraint = std::make_unique<JsonObjectConstraint>(ConstraintVocabulary());
    } else if (p.request.grammar) {
      constraint = std::make_unique<GrammarConstraint>(ConstraintVocabulary(), p.request.grammar);
    }
    auto a = std::make_unique<Active>(std::move(p.request), std::move(p.stream), *tokenizer_,
                                      p.enqueued, std::move(constraint));
    const int want = a->req.speculative_tokens;
    const int server_max = std::max(0, options_.spec.max_tokens);
    a->spec_tokens =
        want < 0 ? (options_.spec.default_on ? server_max : 0) : std::min(want, server_max);
    SchedRequest r;
    r.id = p.id;
    r.prompt = a->req.prompt_tokens;
    r.max_tokens = a->req.max_tokens;
    r.priority = a->req.priority;
    r.cache_salt = a->req.cache_salt;
    if (a->req.prompt_logprobs >= 0) {
      // Every prompt position must be computed: a salt no other request has, so no cached block
      // matches (the HTTP layer's private salts have bit 62 clear).
      r.cache_salt = (uint64_t{3} << 62) | private_salts_++;
    }
    r.deadline = a->req.deadline;
    Status st = scheduler_->Submit(std::move(r), now);
    if (!st.ok()) {
      Finish(*a, FinishReason::kError, st);
      continue;
    }
    if (a->spec_tokens > 0) ++num_spec_;
    active_.emplace(p.id, std::move(a));
  }
  inbox->clear();
}

void Engine::Send(Active& a, StreamEvent ev) {
  if (a.holding) {
    AppendStreamEvent(&a.held, std::move(ev));
    ev = std::move(a.held);
    a.held = StreamEvent{};
    a.holding = false;
  }
  if (ev.finish == FinishReason::kNone && a.sent_tokens &&
      ev.tokens.size() < static_cast<size_t>(options_.stream_interval)) {
    a.held = std::move(ev);
    a.holding = true;
    return;
  }
  if (!ev.tokens.empty()) a.sent_tokens = true;
  outbox_.push_back(EventPump::Event{a.stream, std::move(ev)});
}

void Engine::FlushOutbox() {
  if (pump_) {
    pump_->Post(&outbox_);
    return;
  }
  for (EventPump::Event& e : outbox_) e.stream->Push(std::move(e.event));
  outbox_.clear();
}

void Engine::Finish(Active& a, FinishReason reason, Status error) {
  if (a.finished) return;
  a.finished = true;
  StreamEvent ev;
  ev.finish = reason;
  ev.error = std::move(error);
  ev.prompt_tokens = static_cast<int>(a.req.prompt_tokens.size());
  ev.cached_prompt_tokens = a.cached_tokens;
  ev.completion_tokens = a.generated;
  if (a.first_event) {
    // Only a request the engine started has a queue time (one that ended while queued, by its
    // deadline or its client, would pull the histogram towards its own timeout).
    if (a.started) ev.queue_seconds = a.queue_seconds;
    a.first_event = false;
  }
  Send(a, std::move(ev));
}

bool Engine::EmitToken(Active& a, int32_t tok, TokenLogprob* lp) {
  const GenerationRequest& req = a.req;
  StreamEvent ev;
  ++a.generated;
  a.history.push_back(tok);
  FinishReason reason = FinishReason::kNone;
  const bool eog = !req.ignore_eos && tokenizer_->IsEndOfGeneration(tok);
  const bool stop_tok =
      std::find(req.stop_tokens.begin(), req.stop_tokens.end(), tok) != req.stop_tokens.end();
  if (eog || stop_tok) {
    reason = FinishReason::kStop;  // the stop token itself is not part of the text
    bool stopped = false;
    ev.text = a.stops.Push(a.decoder.Flush(), &stopped);
    if (!stopped) ev.text += a.stops.Flush();
  } else {
    // vLLM's min_tokens holds off stop strings too: one ends the text only once it completes
    // after the first min_tokens tokens.
    bool stopped = false;
    ev.text = a.stops.Push(a.decoder.Push(tok), &stopped, a.generated > req.min_tokens);
    if (stopped) reason = FinishReason::kStop;
  }
  ev.tokens.push_back(tok);
  if (req.sampling.logprobs >= 0 && lp != nullptr) {
    lp->token = tok;
    lp->text = tokenizer_->TokenToPiece(tok, true);
    for (TopLogprob& top : lp->top) top.text = tokenizer_->TokenToPiece(top.token, true);
    ev.logprobs.push_back(std::move(*lp));
  }
  if (reason == FinishReason::kNone && a.generated >= req.max_tokens) {
    reason = FinishReason::kLength;
  }
  if (reason == FinishReason::kLength) {
    bool stopped = false;
    ev.text += a.stops.Push(a.decoder.Flush(), &stopped, a.generated > req.min_tokens);
    if (!stopped) ev.text += a.stops.Flush();
    if (stopped) reason = FinishReason::kStop;
  }
  if (reason != FinishReason::kNone) {
    ev.finish = reason;
    ev.prompt_tokens = static_cast<int>(req.prompt_tokens.size());
    ev.cached_prompt_tokens = a.cached_tokens;
    ev.completion_tokens = a.generated;
    a.finished = true;
  }
  if (a.first_event) {
    ev.queue_seconds = a.queue_seconds;
    a.first_event = false;
  }
  if (a.generated == 1) ev.prompt_logprobs = std::move(a.prompt_lps);
  Send(a, std::move(ev));
  return reason != FinishReason::kNone;
}

void Engine::ScorePrompt(Active& a, const ScheduledSeq& item, const float* rows) {
  const size_t nv = backend_->hparams().n_vocab;
  const std::vector<int32_t>& prompt = a.req.prompt_tokens;
  // Row k (position start + k) predicts the token at start + k + 1.
  for (int k = 0; k < item.length; ++k) {
    const size_t next = static_cast<size_t>(item.start + k) + 1;
    if (next >= prompt.size()) break;
    if (next < a.prompt_scored) continue;  // scored before (a chunk recomputed after preemption)
    TokenLogprob lp;
    TokenLogprobOf(std::span<const float>(rows + static_cast<size_t>(k) * nv, nv), prompt[next],
                   a.req.prompt_logprobs, &lp);
    lp.text = tokenizer_->TokenToPiece(lp.token, true);
    for (TopLogprob& top : lp.top) top.text = tokenizer_->TokenToPiece(top.token, true);
    a.prompt_lps.push_back(std::move(lp));
    a.prompt_scored = next + 1;
  }
}

const std::vector<int32_t>& Engine::EndIds() {
  if (eog_ids_.empty()) {
    for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
      if (tokenizer_->IsEndOfGeneration(id)) eog_ids_.push_back(id);
    }
  }
  return eog_ids_;
}

void Engine::SuppressEnd(const Active& a, std::span<float> row) {
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  for (int32_t id : EndIds()) {
    if (static_cast<size_t>(id) < row.size()) row[static_cast<size_t>(id)] = kOff;
  }
  for (int32_t id : a.req.stop_tokens) {
    if (id >= 0 && static_cast<size_t>(id) < row.size()) row[static_cast<size_t>(id)] = kOff;
  }
}

void Engine::SampleItem(Active& a, const ScheduledSeq& item, float* rows, SampledToken* out) {
  const size_t nv = backend_->hparams().n_vocab;
  const bool want_lp = a.req.sampling.logprobs >= 0;
  out->id = item.id;
  out->accepted = 0;
  // Row j draws the token after position start + j exactly as without a draft (the sampler's
  // noise key is its output index's); draft token j is kept when that draw is it, and then
  // emitted as it is (its stop rules apply). The first draw that differs is emitted in the
  // draft's place, and a fully kept draft earns one more token from the last row.
  a.sampler.Seek(OutputIndex(a.req, FirstRowInput(item)));
  for (size_t j = 0;; ++j) {
    const std::span<float> row(rows + j * nv, nv);
    TokenLogprob lp;
    if (a.generated < a.req.min_tokens) SuppressEnd(a, row);
    const int32_t tok = a.sampler.Sample(row, a.history, want_lp ? &lp : nullptr);
    const bool accepted = j < item.draft.size() && tok == item.draft[j];
    const bool ended = EmitToken(a, tok, want_lp ? &lp : nullptr);
    if (ended || !accepted) {
      out->token = tok;
      out->stop = ended;
      break;
    }
    ++out->accepted;
  }
}

void Engine::EmitChosen(Active& a, const ScheduledSeq& item, std::span<const int32_t> toks,
                        std::span<const DrawParams> draws, SampledToken* out) {
  out->id = item.id;
  out->accepted = 0;
  // SampleItem's walk: row j's token (drawn as without a draft) keeps draft token j when it is
  // that token; the first that differs, or the row after a fully kept draft, ends it.
  for (size_t j = 0; j < toks.size(); ++j) {
    const int32_t tok = toks[j];
    const DrawParams& d = draws[j];
    TokenLogprob lp;
    if (d.wants_logprobs()) FromDrawnLogprobs(*d.logprobs_out, &lp);
    // A constraint whose mask went with the draw follows the token (unless it has already:
    // FinishLateMasks).
    if (j == 0 && a.accepted_ahead) {
      a.accepted_ahead = false;
    } else {
      a.sampler.Accepted(tok);
    }
    const bool ended = EmitToken(a, tok, d.wants_logprobs() ? &lp : nullptr);
    const bool accepted = j < item.draft.size() && tok == item.draft[j];
    if (ended || !accepted) {
      out->token = tok;
      out->stop = ended;
      break;
    }
    ++out->accepted;
  }
}

void Engine::ProposeDrafts() {
  if (num_spec_ == 0) return;
  for (auto& [id, a] : active_) {
    if (a->spec_tokens <= 0 || a->finished) continue;
    std::optional<SeqView> v = scheduler_->Find(id);
    if (!v || !v->decoding) continue;
    const int room = a->req.max_tokens - v->generated - 1;  // the last verified token is extra
    if (room <= 0) continue;
    DraftRequest dr;
    dr.seq = id;
    dr.history = v->tokens;
    dr.max_tokens = std::min(a->spec_tokens, room);
    dr.sampling = &a->req.sampling;
    dr.seed = a->sampler.seed();
    dr.first_index = OutputIndex(a->req, v->tokens.size() - 1);
    dr.max_positions = static_cast<int>(a->req.prompt_tokens.size()) + a->req.max_tokens;
    DraftProposal d = proposer_->Propose(dr);
    if (d.tokens.empty()) continue;
    scheduler_->SetDraft(id, std::move(d.tokens));
  }
}

void Engine::Retire(std::map<uint64_t, std::unique_ptr<Active>>::iterator it) {
  proposer_->Release(it->first);
  if (it->second->spec_tokens > 0) --num_spec_;
  retired_.push_back(std::move(it->second));
  active_.erase(it);
}

void Engine::EndPlanned(const std::vector<FinishedSeq>& finished) {
  for (const FinishedSeq& f : finished) {
    auto it = active_.find(f.id);
    if (it == active_.end()) continue;
    switch (f.reason) {
      case SeqEnd::kCancelled:
        Finish(*it->second, FinishReason::kCancelled, Status::Ok());
        break;
      case SeqEnd::kDeadlineExceeded:
        Finish(*it->second, FinishReason::kError,
               f.status.ok() ? DeadlineExceeded("the request's deadline passed") : f.status);
        break;
      case SeqEnd::kError:
        Finish(*it->second, FinishReason::kError, f.status);
        break;
      case SeqEnd::kStop:
        Finish(*it->second, FinishReason::kStop, Status::Ok());
        break;
      case SeqEnd::kLength:
        Finish(*it->second, FinishReason::kLength, Status::Ok());
        break;
    }
    Retire(it);
  }
}

bool Engine::CanPlanAhead(const StepWork& w) const {
  if (options_.plan_ahead == EngineOptions::PlanAhead::kOff) return false;
  if (options_.plan_ahead == EngineOptions::PlanAhead::kAuto && !backend_->LaunchIsAsync()) {
    return false;
  }
  // (A constrained row's next mask needs this step's token: FinishLateMasks adds it once the
  // token is back, before the step ahead is launched.)
  return w.backend && w.plan.num_draft_tokens == 0 && num_spec_ == 0 && !defer_ahead_;
}

void Engine::Prepare(StepWork& w, std::chrono::steady_clock::time_point now, bool inputs_pending) {
  const StepPlan& plan = w.plan;
  w.batch.clear();
  w.batch_ids.clear();
  w.sampled.clear();
  w.scored.clear();
  w.drafted.clear();
  size_t rows = 0;  // logits rows so far, in batch order
  if (plan.num_draft_tokens > 0) w.drafted.reserve(plan.decodes.size());
  for (const std::vector<ScheduledSeq>* items : {&plan.decodes, &plan.prefills}) {
    for (const ScheduledSeq& item : *items) {
      std::optional<SeqView> v = scheduler_->Find(item.id);
      if (!v) continue;  // cannot happen: planned sequences are live
      auto it = active_.find(item.id);
      Active* a = it != active_.end() ? it->second.get() : nullptr;
      if (a != nullptr && !a->started) {
        a->started = true;
        a->queue_seconds = std::chrono::duration<double>(now - a->enqueued).count();
        a->cached_tokens = v->cached_tokens;
      }
      SequenceBatch b;
      if (item.draft.empty()) {
        // Ahead, a decode's token may still be drawn: the span sees it once it is written.
        b.tokens = v->tokens.subspan(item.start, item.length);
      } else {
        std::vector<int32_t>& t = w.drafted.emplace_back();
        t.push_back(v->tokens[item.start]);
        t.insert(t.end(), item.draft.begin(), item.draft.end());
        b.tokens = t;
        b.num_logits = item.length;  // every position verifies the next one
      }
      b.pos0 = item.start;
      b.blocks = scheduler_->BlockTable(item.id);
      b.want_logits = item.sample;
      b.mode = ForwardMode::kPrompt;  // see cache_generated_blocks above
      // A prompt chunk of a request that scores its prompt: a row for every position.
      const bool score = a != nullptr && !a->finished && a->req.prompt_logprobs >= 0 &&
                         item.draft.empty() && a->prompt_scored < a->req.prompt_tokens.size() &&
                         static_cast<size_t>(item.start) + 1 < a->req.prompt_tokens.size() &&
                         static_cast<size_t>(item.start + item.length) >= a->prompt_scored;
      if (score) {
        b.want_logits = true;
        b.num_logits = item.length;
        w.scored.push_back(ScoredItem{&item, a, rows});
      }
      if (item.sample) {
        const size_t first = rows + static_cast<size_t>(b.num_logits) -
                             (item.draft.empty() ? 1 : static_cast<size_t>(b.num_logits));
        w.sampled.push_back(SampledItem{&item, a, first});
      }
      if (b.want_logits) rows += static_cast<size_t>(b.num_logits);
      w.batch.push_back(b);
      w.batch_ids.push_back(item.id);
    }
  }
  // A step whose every sampled sequence is a plain draw that the backend takes is drawn where
  // the logits are (EngineOptions::backend_sampling): on CUDA only the ids come back. A
  // draft is verified there too: each of its rows is drawn as without a draft, and Emit keeps
  // draft tokens while they are what was drawn (SampleItem's walk). A constraint (JSON mode, a
  // grammar) goes with the draw as a mask, which needs its state after the row's input token,
  // so not with a draft. Planned ahead of its input (inputs_pending: the step before draws it),
  // the row's mask is left to FinishLateMasks, once the token is back and before the step is
  // launched (so such a step is never chained). When only some rows are the backend's, and no
  // item has several rows (a draft, a scored prompt), the step is mixed: the backend draws
  // those, and only the others' logits come back, to be sampled here.
  // Planned ahead, a step with rows for the host is left unprepared: it is launched only after
  // the step before is emitted, and prepared again then.
  w.backend = false;
  w.mixed = false;
  w.host_rows.clear();
  w.draws.clear();
  w.masks.clear();
  w.mask_at.clear();
  w.late_masks.clear();
  if (!options_.backend_sampling || w.sampled.empty() || !w.scored.empty()) return;
  for (size_t i = 0; i < w.sampled.size(); ++i) {
    SampledItem& si = w.sampled[i];
    si.host = -1;
    if (si.active == nullptr) continue;
    const Sampler& smp = si.active->sampler;
    // A constraint's mask needs the grammar's state after the row's input token: known now,
    // or (planned ahead) once the step before has drawn it.
    const bool masked = !smp.IsPlainDraw();
    const bool input_known = si.active->history.size() > InputPosition(*si.item);
    const bool mask_ready = smp.MaskGoesWithTheDraw() && si.item->draft.empty() &&
                            (input_known || inputs_pending);
    if ((masked && !mask_ready) ||
        si.active->history.size() < (si.item->draft.empty() ? InputPosition(*si.item)
                                                             : si.item->start + size_t{1}) ||  // (cannot happen)
        !backend_->CanSample(masked ? MaskedProbe(smp) : smp.draw_params())) {
      si.host = static_cast<int>(w.host_rows.size());
      w.host_rows.push_back(static_cast<int32_t>(i));  // one row per item (checked below)
    }
  }
  if (w.host_rows.size() == w.sampled.size()) return;  // every row on the host
  if (!w.host_rows.empty() && inputs_pending) return;    // prepared again once the inputs are in
  if (!w.host_rows.empty()) {
    if (plan.num_draft_tokens > 0) return;  // rows are not one per item
    w.mixed = true;
  } else {
    w.backend = true;
  }
  // The logit bias and penalties go with the draw: their window is the history before the
  // row's input token, which (planned ahead) may still be on its way; the backend counts it.
  const int32_t vocab = backend_->hparams().n_vocab;
  w.adjust.clear();
  w.adjust_end.clear();
  for (const SampledItem& si : w.sampled) {
    const ScheduledSeq& item = *si.item;
    if (si.active == nullptr || si.host >= 0) {
      w.draws.push_back(DrawParams{});
      w.adjust_end.push_back(w.adjust.size());
      continue;
    }
    Active& a = *si.active;
    // The item's tokens with its draft after them: row j's input token is at start + j (a
    // draft's rows: one per position; otherwise one row, the last position's). Of the history
    // before a draft only the penalty window is copied: seq starts at position `offset`.
    std::span<const int32_t> seq = a.history;
    size_t offset = 0;
    const size_t first_input = FirstRowInput(item);
    if (!item.draft.empty()) {
      const size_t known = static_cast<size_t>(item.start) + 1;
      const int last_n = a.req.sampling.penalty_last_n;
      offset = last_n < 0 ? 0 : known - std::min(known, static_cast<size_t>(last_n));
      // Row 0's window ends at first_input: with penalty_last_n 0 the offset was past it, and
      // seq.first(first_input - offset) below wrapped to a huge count (undefined behaviour; an
      // abort in a build with library assertions).
      offset = std::min(offset, first_input);
      drafted_history_.assign(a.history.begin() + static_cast<std::ptrdiff_t>(offset),
                              a.history.begin() + static_cast<std::ptrdiff_t>(known));
      drafted_history_.insert(drafted_history_.end(), item.draft.begin(), item.draft.end());
      seq = drafted_history_;
    }
    a.sampler.Seek(OutputIndex(a.req, first_input));
    for (size_t j = 0; j <= item.draft.size(); ++j) {
      const size_t input = first_input + j;
      // min_tokens: the row's token is the (input + 1 - prompt)-th generated one, whatever the
      // step in flight brings (a.generated may be a step behind); until min_tokens, the end
      // and stop tokens go with the draw as banned (SuppressEnd's -infinity).
      std::span<const int32_t> banned;
      if (static_cast<int64_t>(input + 1) - static_cast<int64_t>(a.req.prompt_tokens.size()) <
          a.req.min_tokens) {
        banned_.assign(EndIds().begin(), EndIds().end());
        banned_.insert(banned_.end(), a.req.stop_tokens.begin(), a.req.stop_tokens.end());
        banned = banned_;
      }
      w.draws.push_back(a.sampler.NextDraw(seq.first(input - offset), vocab, &w.adjust, banned));
      w.adjust_end.push_back(w.adjust.size());
      if (!a.sampler.IsPlainDraw()) {  // (one row: a constraint's item has no draft here)
        if (a.history.size() > input) {
          const size_t at = w.masks.size();
          w.draws.back().mask_fallback = a.sampler.AppendMask(static_cast<size_t>(vocab), &w.masks);
          w.mask_at.emplace_back(w.draws.size() - 1, at);
        } else {
          w.late_masks.push_back(LateMask{w.draws.size() - 1, &a, item.id});
        }
      }
    }
  }
  PointMasks(w);
  bool logprobs = false;
  for (size_t i = 0; i < w.draws.size(); ++i) {  // w.adjust has stopped growing
    const size_t begin = i == 0 ? 0 : w.adjust_end[i - 1];
    w.draws[i].adjust = std::span<const LogitAdjust>(w.adjust).subspan(begin, w.adjust_end[i] - begin);
    logprobs = logprobs || w.draws[i].logprobs >= 0;
  }
  // Logprobs come back with the tokens: the backend writes each asking row's into w.lps.
  if (logprobs) {
    w.lps.resize(w.draws.size());
    for (size_t i = 0; i < w.draws.size(); ++i) {
      if (w.draws[i].logprobs >= 0) w.draws[i].logprobs_out = &w.lps[i];
    }
  }
}

void Engine::PointMasks(StepWork& w) {
  const size_t words = (static_cast<size_t>(backend_->hparams().n_vocab) + 63) / 64;
  for (const auto& [row, at] : w.mask_at) {  // w.masks has stopped growing
    w.draws[row].mask = std::span<const uint64_t>(w.masks).subspan(at, words);
  }
}

void Engine::FinishLateMasks(const StepWork& cur, StepWork& next) {
  if (next.late_masks.empty()) return;
  const int32_t vocab = backend_->hparams().n_vocab;
  const size_t n = std::min(cur.sampled.size(), cur.chosen.size());
  size_t hint = 0;  // (the two steps mostly list their sequences in the same order)
  for (const LateMask& m : next.late_masks) {
    Active& a = *m.active;
    if (a.finished) continue;  // (cancelled meanwhile: its row is thrown away)
    int32_t tok = -1;          // (always found: a late mask's input is drawn by cur)
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (hint + k) % n;
      if (cur.sampled[i].item->id == m.seq) {
        tok = cur.chosen[i];
        hint = i + 1;
        break;
      }
    }
    // Every token is taken (an end of generation changes nothing): a sequence that ends on it
    // has its row thrown away, one that goes on (ignore_eos) gets the mask Emit would give.
    if (tok >= 0 && !a.accepted_ahead) {
      a.sampler.Accepted(tok);
      a.accepted_ahead = true;
    }
    const size_t at = next.masks.size();
    next.draws[m.row].mask_fallback = a.sampler.AppendMask(static_cast<size_t>(vocab), &next.masks);
    next.mask_at.emplace_back(m.row, at);
  }
  PointMasks(next);
}

Status Engine::Launch(StepWork& w) {
  Status st = w.backend ? backend_->LaunchSample(w.batch, w.draws)
              : w.mixed ? backend_->ForwardBatchSampleMixed(w.batch, w.draws, w.host_rows,
                                                            &w.chosen, &step_logits_)
                        : backend_->ForwardBatch(w.batch, &step_logits_);
  if (st.ok() && w.mixed && w.chosen.size() != w.sampled.size()) {
    st = Internal("the backend's mixed step returned " + std::to_string(w.chosen.size()) +
                  " tokens for " + std::to_string(w.sampled.size()) + " sequences");
  }
  if (st.ok()) {
    steps_.fetch_add(1, std::memory_order_relaxed);
    if (w.ahead) steps_ahead_.fetch_add(1, std::memory_order_relaxed);
    if (w.mixed) steps_mixed_.fetch_add(1, std::memory_order_relaxed);
  }
  return st;
}

bool Engine::LaunchChained(StepWork& cur, StepWork& next) {
  if (!next.backend || !cur.backend) return false;
  if (!next.late_masks.empty()) return false;  // they need cur's tokens on the host
  // (A step with a draft is never planned ahead: CanPlanAhead.)
  if (cur.draws.size() != cur.sampled.size()) return false;
  if (options_.chain_steps == EngineOptions::ChainSteps::kOff) return false;
  if (options_.chain_steps == EngineOptions::ChainSteps::kAuto && !backend_->LaunchIsAsync()) {
    return false;
  }
  // A backend step has one logits row per sampled item, in order (Prepare).
  drawn_rows_.clear();
  for (size_t i = 0; i < cur.sampled.size(); ++i) {
    drawn_rows_.emplace(cur.sampled[i].item->id, static_cast<int32_t>(i));
  }
  next.chain.assign(next.batch.size(), -1);
  for (size_t s = 0; s < next.batch.size(); ++s) {
    const std::span<const int32_t> t = next.batch[s].tokens;
    // The pending token is a sequence's newest, so it can only be the last of its entry.
    if (t.empty() || t.back() != kPendingToken) continue;
    auto it = drawn_rows_.find(next.batch_ids[s]);
    if (it == drawn_rows_.end()) return false;  // pending, yet not cur's: cannot happen
    next.chain[s] = it->second;
  }
  if (!backend_->LaunchSampleChained(next.batch, next.draws, next.chain).ok()) return false;
  steps_.fetch_add(1, std::memory_order_relaxed);
  steps_ahead_.fetch_add(1, std::memory_order_relaxed);
  steps_chained_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

Status Engine::Collect(StepWork& w) {
  if (!w.backend) return Status::Ok();  // computed in Launch
  Status st = backend_->FinishSample(&w.chosen);
  if (st.ok() && w.chosen.size() != w.draws.size()) {
    st = Internal("the backend's sampling step returned " + std::to_string(w.chosen.size()) +
                  " tokens for " + std::to_string(w.draws.size()) + " rows");
  }
  return st;
}

void Engine::FailStep(const Status& error) {
  for (const FinishedSeq& f : scheduler_->OnStepFailed(error)) {
    auto it = active_.find(f.id);
    if (it == active_.end()) continue;
    Finish(*it->second, FinishReason::kError, f.status);
    Retire(it);
  }
  // A device that failed for good fails every step from now on: refuse requests with the reason
  // (the queued ones end at their first step) and say so, so the process is restarted.
  if (Status device = backend_->DeviceHealth(); !device.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = Internal(device.message());
    device_lost_ = true;
  }
}

bool Engine::Emit(StepWork& w) {
  // What was retired before now cannot be in a step prepared after this one was emitted.
  const size_t retired_before = retired_.size();
  const size_t nv = backend_->hparams().n_vocab;
  StepResult& result = step_result_;
  result.sampled.clear();
  // Prompt logprobs first: they go out with the first token, which this step may sample.
  for (const ScoredItem& sc : w.scored) {
    if (!sc.active->finished) ScorePrompt(*sc.active, *sc.item, step_logits_.data() + sc.row * nv);
  }
  for (size_t i = 0; i < w.sampled.size(); ++i) {
    const SampledItem& si = w.sampled[i];
    const ScheduledSeq& item = *si.item;
    // A sequence that ended after this step was planned (a late stop ahead): its row is thrown
    // away.
    if (si.active != nullptr && !si.active->finished) {
      SampledToken t;
      if (w.backend || (w.mixed && si.host < 0)) {
        // One row per item, or (a draft) one per position from si.row.
        const size_t n = item.draft.size() + 1;
        EmitChosen(*si.active, item, std::span<const int32_t>(w.chosen).subspan(si.row, n),
                   std::span<const DrawParams>(w.draws).subspan(si.row, n), &t);
      } else {
        const size_t row = w.mixed ? static_cast<size_t>(si.host) : si.row;
        SampleItem(*si.active, item, step_logits_.data() + row * nv, &t);
      }
      result.sampled.push_back(t);
    }
  }
  if (options_.before_step_done_for_tests) options_.before_step_done_for_tests(&result);
  StatusOr<std::vector<FinishedSeq>> done = scheduler_->OnStepDone(result);
  if (!done.ok()) {  // a mismatch between plan and result is a bug: fail the step's sequences
    FailStep(done.status());
  } else {
    for (const FinishedSeq& f : *done) {
      auto it = active_.find(f.id);
      if (it == active_.end()) continue;
      Finish(*it->second, f.reason == SeqEnd::kLength ? FinishReason::kLength : FinishReason::kStop,
             Status::Ok());
      Retire(it);
    }
  }
  retired_.erase(retired_.begin(), retired_.begin() + static_cast<std::ptrdiff_t>(retired_before));
  return done.ok();
}

void Engine::PublishStats() {
  SchedulerStats s = scheduler_->stats();
  running_.store(s.running);
  waiting_.store(s.waiting);
  waiting_prompt_tokens_.store(s.waiting_prompt_tokens);
  kv_blocks_used_.store(s.kv.used_blocks);
  kv_used_.store(int64_t{s.kv.used_blocks} * options_.kv_block_size);
  prefix_queries_.store(s.kv.prefix_query_tokens);
  prefix_hits_.store(s.kv.prefix_hit_tokens);
  preemptions_.store(s.preemptions);
  spec_draft_.store(s.draft_tokens);
  spec_accepted_.store(s.accepted_tokens);
}

}  // namespace kinfer
