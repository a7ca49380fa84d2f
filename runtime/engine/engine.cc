#include "runtime/engine/engine.h"

#include <algorithm>
#include <string>

#include "runtime/model/llama_model.h"
#include "runtime/sample/sampler.h"
#include "runtime/sample/stop_matcher.h"
#include "runtime/tokenizer/streaming_decoder.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
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

void RequestStream::Push(StreamEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

// ---- Engine ---------------------------------------------------------------------------------

Engine::Engine(LlamaModel* model, const Tokenizer* tokenizer, EngineOptions options)
    : model_(model), tokenizer_(tokenizer), options_(options) {
  context_length_ = options_.context_length > 0
                        ? std::min(options_.context_length, model_->hparams().n_ctx_train)
                        : model_->hparams().n_ctx_train;
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (Pending& p : queue_) {
    StreamEvent ev;
    ev.finish = FinishReason::kCancelled;
    p.stream->Push(std::move(ev));
  }
}

StatusOr<std::shared_ptr<RequestStream>> Engine::Submit(GenerationRequest request) {
  if (request.prompt_tokens.empty()) return InvalidArgument("the prompt is empty");
  const int vocab = model_->hparams().n_vocab;
  for (int32_t id : request.prompt_tokens) {
    if (id < 0 || id >= vocab) {
      return InvalidArgument("prompt token id " + std::to_string(id) +
                             " is outside the vocabulary (0.." + std::to_string(vocab - 1) + ")");
    }
  }
  if (request.max_tokens <= 0) return InvalidArgument("max_tokens must be at least 1");
  const int64_t need = static_cast<int64_t>(request.prompt_tokens.size()) + request.max_tokens;
  if (need > context_length_) {
    return OutOfRange("this model's maximum context length is " + std::to_string(context_length_) +
                      " tokens, but the request has " +
                      std::to_string(request.prompt_tokens.size()) + " prompt tokens and asks for " +
                      std::to_string(request.max_tokens) + " more");
  }
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("the engine is shutting down");
    if (static_cast<int>(queue_.size()) >= options_.max_queued_requests) {
      return ResourceExhausted("too many queued requests (" +
                               std::to_string(options_.max_queued_requests) + ")");
    }
    queue_.push_back(Pending{std::move(request), stream, std::chrono::steady_clock::now()});
    waiting_.store(static_cast<int64_t>(queue_.size()));
  }
  cv_.notify_one();
  return stream;
}

EngineStats Engine::Stats() const {
  EngineStats s;
  s.running = running_.load();
  s.waiting = waiting_.load();
  s.kv_tokens_used = kv_used_.load();
  s.kv_tokens_capacity = context_length_;
  return s;
}

void Engine::Loop() {
  cache_ = model_->NewKvCache(context_length_);
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      p = std::move(queue_.front());
      queue_.pop_front();
      waiting_.store(static_cast<int64_t>(queue_.size()));
    }
    running_.store(1);
    Run(p);
    running_.store(0);
    kv_used_.store(0);
  }
}

void Engine::Run(Pending& p) {
  const GenerationRequest& req = p.request;
  RequestStream& stream = *p.stream;
  const double queue_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - p.enqueued).count();
  const int prompt_n = static_cast<int>(req.prompt_tokens.size());
  int generated = 0;
  bool first_event = true;

  auto finish = [&](FinishReason reason, std::string text, Status error) {
    StreamEvent ev;
    ev.text = std::move(text);
    ev.finish = reason;
    ev.error = std::move(error);
    ev.prompt_tokens = prompt_n;
    ev.completion_tokens = generated;
    if (first_event) ev.queue_seconds = queue_s;
    stream.Push(std::move(ev));
  };
  if (stream.cancelled()) return finish(FinishReason::kCancelled, "", Status::Ok());

  // Every request is computed from an empty cache. Reusing the previous request's common prefix
  // would save prefill time, but the CPU kernels round differently for a few tokens (matrix-vector)
  // than for many (GEMM), so the logits of a reused prompt would differ in the last bits from a
  // cold one, and the same seeded request could give another output. Prefix caching comes with the
  // paged KV cache, on batch-invariant kernels.
  cache_->Truncate(0);

  std::vector<float> logits;
  // Prefill in chunks so that a cancelled request stops within one chunk.
  for (size_t pos = 0; pos < req.prompt_tokens.size(); pos += LlamaModel::kMaxBatch) {
    if (stream.cancelled()) return finish(FinishReason::kCancelled, "", Status::Ok());
    const size_t n = std::min<size_t>(LlamaModel::kMaxBatch, req.prompt_tokens.size() - pos);
    std::span<const int32_t> chunk(req.prompt_tokens.data() + pos, n);
    Status st = model_->Forward(chunk, cache_.get(), false, &logits);
    if (!st.ok()) {
      cache_->Truncate(0);
      return finish(FinishReason::kError, "", st);
    }
    kv_used_.store(cache_->size());
  }

  Sampler sampler(req.sampling);
  StopMatcher stops(req.stop);
  StreamingDecoder decoder(*tokenizer_, req.echo_special);
  std::vector<int32_t> history = req.prompt_tokens;
  FinishReason reason = FinishReason::kNone;

  while (reason == FinishReason::kNone) {
    if (stream.cancelled()) {
      reason = FinishReason::kCancelled;
      break;
    }
    StreamEvent ev;
    TokenLogprob lp;
    const int32_t tok = sampler.Sample(std::span<float>(logits), history,
                                       req.sampling.logprobs >= 0 ? &lp : nullptr);
    ++generated;
    history.push_back(tok);
    const bool eog = !req.ignore_eos && tokenizer_->IsEndOfGeneration(tok);
    const bool stop_tok =
        std::find(req.stop_tokens.begin(), req.stop_tokens.end(), tok) != req.stop_tokens.end();
    if (eog || stop_tok) {
      reason = FinishReason::kStop;  // the stop token itself is not part of the text
      bool stopped = false;
      ev.text = stops.Push(decoder.Flush(), &stopped);
      if (!stopped) ev.text += stops.Flush();
    } else {
      bool stopped = false;
      ev.text = stops.Push(decoder.Push(tok), &stopped);
      if (stopped) reason = FinishReason::kStop;
    }
    ev.tokens.push_back(tok);
    if (req.sampling.logprobs >= 0) {
      lp.token = tok;
      lp.text = tokenizer_->TokenToPiece(tok, true);
      for (TopLogprob& top : lp.top) top.text = tokenizer_->TokenToPiece(top.token, true);
      ev.logprobs.push_back(std::move(lp));
    }
    if (reason == FinishReason::kNone && generated >= req.max_tokens) {
      reason = FinishReason::kLength;
    }
    if (reason == FinishReason::kNone && cache_->size() >= cache_->capacity()) {
      reason = FinishReason::kLength;
    }
    if (reason == FinishReason::kLength) {
      bool stopped = false;
      ev.text += stops.Push(decoder.Flush(), &stopped);
      if (!stopped) ev.text += stops.Flush();
      if (stopped) reason = FinishReason::kStop;
    }
    if (reason != FinishReason::kNone) {
      ev.finish = reason;
      ev.prompt_tokens = prompt_n;
      ev.completion_tokens = generated;
    }
    if (first_event) {
      ev.queue_seconds = queue_s;
      first_event = false;
    }
    stream.Push(std::move(ev));
    if (reason != FinishReason::kNone) return;

    std::span<const int32_t> next(&history.back(), 1);
    Status st = model_->Forward(next, cache_.get(), false, &logits, ForwardMode::kDecode);
    if (!st.ok()) return finish(FinishReason::kError, "", st);
    kv_used_.store(cache_->size());
  }
  finish(reason, "", Status::Ok());
}

}  // namespace kinfer
