// Engine: owns the model, runs generation on one engine thread, and streams tokens to callers.
//
// Threading model (llama.cpp server / vLLM engine core):
//   - One engine thread owns the model weights, the KV cache and all sequence state. Nothing else
//     touches them.
//   - Any thread (HTTP handlers) calls Submit(), which validates, enqueues and returns a
//     RequestStream at once. The caller reads events with RequestStream::Next() and may Cancel() at
//     any time (client disconnect); the engine stops that sequence at its next step.
//   - Stats() may be called from any thread (atomics).
// In this version the engine runs one sequence at a time, FCFS; the continuous-batching scheduler
// replaces the loop without changing this interface.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "runtime/engine/request.h"

namespace kinfer {

class KvCache;
class LlamaModel;
class Tokenizer;

// A request's output channel. Shared by the engine (producer) and the caller (consumer).
class RequestStream {
 public:
  // Blocks until an event is available, the stream ends, or `timeout` passes. Returns true and
  // fills *out with an event; false on timeout. After the final event (finish != kNone), further
  // calls return false immediately.
  bool Next(StreamEvent* out, std::chrono::milliseconds timeout);
  // Asks the engine to stop this request; the final event then has FinishReason::kCancelled
  // (unless it already finished). Safe from any thread, idempotent.
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  // Engine side.
  void Push(StreamEvent ev);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;  // guarded by mu_
  bool finished_ = false;           // final event popped; guarded by mu_
  std::atomic<bool> cancelled_{false};
};

struct EngineOptions {
  int n_threads = 2;
  int max_queued_requests = 256;  // Submit() returns RESOURCE_EXHAUSTED beyond this
  int context_length = 0;         // 0 = the model's trained context
};

struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_tokens_used = 0;
  int64_t kv_tokens_capacity = 0;
};

class Engine {
 public:
  // Takes ownership of nothing: model and tokenizer must outlive the Engine.
  Engine(LlamaModel* model, const Tokenizer* tokenizer, EngineOptions options);
  ~Engine();  // stops the engine thread; pending requests finish with kCancelled

  // Validates (non-empty prompt, ids in range, prompt + max_tokens <= context) and enqueues.
  // INVALID_ARGUMENT / OUT_OF_RANGE for bad requests, RESOURCE_EXHAUSTED when the queue is full.
  StatusOr<std::shared_ptr<RequestStream>> Submit(GenerationRequest request);

  EngineStats Stats() const;
  int context_length() const { return context_length_; }

 private:
  struct Pending {
    GenerationRequest request;
    std::shared_ptr<RequestStream> stream;
    std::chrono::steady_clock::time_point enqueued;
  };
  void Loop();
  void Run(Pending& p);

  LlamaModel* model_;
  const Tokenizer* tokenizer_;
  EngineOptions options_;
  int context_length_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  bool stopping_ = false;      // guarded by mu_
  std::atomic<int64_t> running_{0};
  std::atomic<int64_t> waiting_{0};
  std::atomic<int64_t> kv_used_{0};
  // Engine-thread state: the KV cache, allocated once for the whole context.
  std::unique_ptr<KvCache> cache_;
  std::thread thread_;
};

}  // namespace kinfer
