#include "bench/sim/replica.h"

#include <algorithm>
#include <cassert>

namespace kinfer::sim {

Replica::Replica(int id, double created_s, double ready_s, const ServiceModel* model,
                 ReplicaLimits limits, const std::vector<TraceRequest>* requests,
                 std::vector<RequestOutcome>* outcomes, const std::vector<double>* ttft_edges)
    : id_(id),
      created_s_(created_s),
      ready_s_(ready_s),
      model_(model),
      limits_(limits),
      requests_(requests),
      outcomes_(outcomes),
      ttft_edges_(ttft_edges),
      ttft_counts_(ttft_edges->size() + 1, 0) {}

void Replica::Enqueue(int r, double now) {
  (*outcomes_)[r].pod = id_;
  pending_prefill_tokens_ += (*requests_)[r].input_tokens;
  queue_.push_back({r, now});
  Admit(now);
}

void Replica::ShedExpired(double now) {
  if (limits_.queue_deadline_s <= 0) return;
  while (!queue_.empty() && now - queue_.front().enqueued_s > limits_.queue_deadline_s) {
    (*outcomes_)[queue_.front().request].shed = true;
    pending_prefill_tokens_ -= (*requests_)[queue_.front().request].input_tokens;
    ++shed_;
    queue_.pop_front();
  }
}

void Replica::Admit(double now) {
  ShedExpired(now);
  while (!queue_.empty() && in_flight() < limits_.max_running) {
    prefill_wait_.push_back(queue_.front().request);
    queue_.pop_front();
  }
}

std::optional<double> Replica::StartIteration(double now) {
  if (busy_) return std::nullopt;
  double duration = 0;
  if (!prefill_wait_.empty()) {
    int64_t tokens = 0;
    prefill_batch_.clear();
    while (!prefill_wait_.empty()) {
      const int r = prefill_wait_.front();
      const int64_t len = (*requests_)[r].input_tokens;
      if (!prefill_batch_.empty() && tokens + len > limits_.max_prefill_tokens) break;
      tokens += len;
      prefill_batch_.push_back(r);
      prefill_wait_.pop_front();
    }
    iteration_is_prefill_ = true;
    duration = model_->PrefillSeconds(tokens);
  } else if (!decoding_.empty()) {
    iteration_is_prefill_ = false;
    duration = model_->DecodeStepSeconds(static_cast<int>(decoding_.size()));
  } else {
    return std::nullopt;
  }
  busy_ = true;
  iteration_start_s_ = now;
  return now + duration;
}

void Replica::FinishIteration(double now, std::vector<double>* new_ttfts) {
  assert(busy_);
  busy_ = false;
  busy_seconds_ += now - iteration_start_s_;
  if (iteration_is_prefill_) {
    for (int r : prefill_batch_) {
      RequestOutcome& out = (*outcomes_)[r];
      pending_prefill_tokens_ -= (*requests_)[r].input_tokens;
      out.ttft_s = now - (*requests_)[r].arrival_s;
      const auto& edges = *ttft_edges_;
      const size_t bucket =
          std::lower_bound(edges.begin(), edges.end(), out.ttft_s) - edges.begin();
      ++ttft_counts_[bucket];
      if (new_ttfts) new_ttfts->push_back(out.ttft_s);
      const int remaining = (*requests_)[r].output_tokens - 1;
      if (remaining <= 0) {
        out.done_s = now;
      } else {
        decoding_.push_back({r, remaining});
      }
    }
    prefill_batch_.clear();
  } else {
    // One token each; finished requests leave (order kept, so runs are reproducible).
    size_t kept = 0;
    for (size_t i = 0; i < decoding_.size(); ++i) {
      Decoding d = decoding_[i];
      if (--d.remaining <= 0) {
        (*outcomes_)[d.request].done_s = now;
      } else {
        decoding_[kept++] = d;
      }
    }
    decoding_.resize(kept);
  }
  Admit(now);
}

std::vector<uint64_t> Replica::TakeTtftCounts() {
  std::vector<uint64_t> out(ttft_counts_.size(), 0);
  out.swap(ttft_counts_);
  return out;
}

}  // namespace kinfer::sim
