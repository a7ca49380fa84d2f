// ModelBackend: the one interface the engine computes through, whatever the device.
//
//   engine thread --ForwardBatch(seqs)--> ModelBackend --+-- CpuBackend  (LlamaModel + PagedKvCache)
//                                                        +-- CudaBackend (weights, paged KV and
//                                                                          scratch in device memory)
//
// A backend owns the model's weights as its device needs them and the paged KV cache
// ([layer][block][slot][n_embd_kv], FP16, keys and values apart; runtime/model/kv_cache.h). The
// engine owns the block bookkeeping (runtime/kv/KvBlockManager) and passes block tables in each
// SequenceBatch; the backend never decides which block holds what.
//
// Sizing the cache: the engine asks KvMemoryBudgetBytes(fraction) and KvBlockBytes(block_size),
// picks num_blocks = budget / block bytes (at least one context's worth), then InitKvCache.
//
// Thread safety: one thread (the engine thread) calls every method; none is safe to call
// concurrently with another. hparams() and name() return values fixed at creation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/model/llama_hparams.h"
#include "runtime/model/llama_model.h"  // SequenceBatch, ForwardMode
#include "runtime/sample/draw.h"
#include "runtime/sample/penalties.h"
#include "runtime/sample/sampler.h"  // DrawnLogprobsOf

namespace kinfer {

class GgufFile;

class ModelBackend {  // one thread (the engine thread) calls everything
 public:
  virtual ~ModelBackend() = default;
  virtual const LlamaHParams& hparams() const = 0;
  virtual std::string name() const = 0;                   // "cpu" or "cuda"
  // Tokens one ForwardBatch computes at most (the engine clamps its step budget to it).
  virtual int max_batch_tokens() const = 0;
  virtual size_t KvBlockBytes(int block_size) const = 0;  // bytes of one KV block, all layers, K+V
  // CPU: fraction of MemAvailable; CUDA: fraction of free device memory after weights.
  virtual int64_t KvMemoryBudgetBytes(double fraction) const = 0;
  // Allocates the paged cache (replaces any; its contents are then undefined).
  // INVALID_ARGUMENT for block_size or num_blocks < 1; RESOURCE_EXHAUSTED when it does not fit.
  virtual Status InitKvCache(int block_size, int num_blocks) = 0;
  // Same contract as LlamaModel::ForwardBatch, SequenceBatch::num_logits included; logits on the
  // host, num_logits rows of n_vocab per sequence with want_logits, in sequence order.
  // FAILED_PRECONDITION before InitKvCache.
  virtual Status ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) = 0;
  // The same step, greedy: *tokens gets, for every logits row ForwardBatch would return (same
  // order), the index of its largest logit, the lowest on ties (Sampler's greedy rule): what
  // ForwardBatchSample gives for greedy rows (the benchmarks call it). This default runs
  // ForwardBatch and takes the argmax on the host; the CUDA backend takes it on the device, so
  // that only the ids cross PCIe.
  // (Defined here, inline: the CUDA library implements this interface without linking the
  // backend library.)
  virtual Status ForwardBatchArgmax(std::span<const SequenceBatch> seqs,
                                    std::vector<int32_t>* tokens) {
    // Kept across steps: a fresh n_vocab floats a row each step is a page fault per 4 KB.
    thread_local std::vector<float> logits;
    KINFER_RETURN_IF_ERROR(ForwardBatch(seqs, &logits));
    const size_t nv = static_cast<size_t>(hparams().n_vocab);
    tokens->resize(nv == 0 ? 0 : logits.size() / nv);
    for (size_t r = 0; r < tokens->size(); ++r) {
      const float* row = logits.data() + r * nv;
      (*tokens)[r] = static_cast<int32_t>(std::max_element(row, row + nv) - row);  // first maximum
    }
    return Status::Ok();
  }
  // Whether ForwardBatchSample draws rows with these settings (the noise key aside). The default,
  // on the host, draws any, and so does the CUDA backend's kernel (docs/cuda.md); a backend
  // whose device sampler covers less says so here, and the engine samples those on the host.
  virtual bool CanSample(const DrawParams& p) const { return true; }
  // The same step, every logits row's token drawn by DrawToken's rule (runtime/sample/draw.h)
  // with rows[r], r in ForwardBatch's row order, after the row's logit bias and penalties
  // (ApplyLogitAdjustments with the row's input token; runtime/sample/penalties.h) and its
  // constraint's mask (DrawParams::mask, ApplyTokenMask), and, for a row that asks
  // (DrawParams::logprobs), its logprobs written to its logprobs_out: the engine's path for
  // steps whose every sampled sequence is a plain draw (Sampler::IsPlainDraw), or one whose
  // mask goes with the draw (Sampler::MaskGoesWithTheDraw), that CanSample takes. INVALID_ARGUMENT when
  // rows.size() is not the step's number of logits rows. This default runs ForwardBatch and
  // draws on the host; the CUDA backend draws on the device, so that only the ids cross PCIe.
  virtual Status ForwardBatchSample(std::span<const SequenceBatch> seqs,
                                    std::span<const DrawParams> rows,
                                    std::vector<int32_t>* tokens) {
    // Kept across steps: a fresh n_vocab floats a row each step is a page fault per 4 KB.
    thread_local std::vector<float> logits;
    KINFER_RETURN_IF_ERROR(ForwardBatch(seqs, &logits));
    const size_t nv = static_cast<size_t>(hparams().n_vocab);
    const size_t n = nv == 0 ? 0 : logits.size() / nv;
    if (rows.size() != n) {
      return InvalidArgument("the step has " + std::to_string(n) + " logits rows but " +
                             std::to_string(rows.size()) + " draw settings");
    }
    tokens->resize(n);
    thread_local DrawCandidates candidates;
    thread_local std::vector<int32_t> inputs;
    RowInputTokens(seqs, &inputs);
    for (size_t r = 0; r < n; ++r) {
      (*tokens)[r] = DrawRow(std::span<float>(logits.data() + r * nv, nv), rows[r], inputs[r],
                             &candidates);
    }
    return Status::Ok();
  }
  // A step that mixes rows the backend draws with rows the host samples (the engine's path for a
  // batch where some requests are plain draws and others need their logits: a grammar). Rows listed in host_rows (ascending, each below the step's
  // number of rows) are not drawn: their logits come back in *host_logits, n_vocab floats a
  // row in host_rows order, and their entries of *tokens are -1 (their rows[] entries are read
  // but their draws thrown away). Every other row is drawn as ForwardBatchSample draws it. So
  // only the host rows' logits cross PCIe. Synchronous: FAILED_PRECONDITION while a step is
  // launched. INVALID_ARGUMENT as ForwardBatchSample, or for host_rows not ascending within the
  // step's rows. This default runs ForwardBatch and draws the other rows on the host.
  virtual Status ForwardBatchSampleMixed(std::span<const SequenceBatch> seqs,
                                         std::span<const DrawParams> rows,
                                         std::span<const int32_t> host_rows,
                                         std::vector<int32_t>* tokens,
                                         std::vector<float>* host_logits) {
    if (launched_ > 0) return FailedPrecondition("a step is launched (FinishSample first)");
    thread_local std::vector<float> logits;
    KINFER_RETURN_IF_ERROR(ForwardBatch(seqs, &logits));
    const size_t nv = static_cast<size_t>(hparams().n_vocab);
    const size_t n = nv == 0 ? 0 : logits.size() / nv;
    KINFER_RETURN_IF_ERROR(CheckMixedRows(n, rows.size(), host_rows));
    tokens->assign(n, -1);
    host_logits->resize(host_rows.size() * nv);
    thread_local DrawCandidates candidates;
    thread_local std::vector<int32_t> inputs;
    RowInputTokens(seqs, &inputs);
    size_t h = 0;
    for (size_t r = 0; r < n; ++r) {
      const std::span<float> row(logits.data() + r * nv, nv);
      if (h < host_rows.size() && static_cast<size_t>(host_rows[h]) == r) {
        std::copy(row.begin(), row.end(), host_logits->begin() + static_cast<std::ptrdiff_t>(h * nv));
        ++h;
      } else {
        (*tokens)[r] = DrawRow(row, rows[r], inputs[r], &candidates);
      }
    }
    return Status::Ok();
  }
  // ForwardBatchSample in two halves, so that the engine can work while the device computes:
  // LaunchSample checks and enqueues the step (ForwardBatchSample's contract and errors) and
  // may return before it is computed; FinishSample waits for it and gives its tokens. The
  // spans need stay valid only during LaunchSample. One step at a time: LaunchSample while a
  // step is launched, or FinishSample with none, is FAILED_PRECONDITION. After an error from
  // either half no step is launched.
  // The default computes the whole step in LaunchSample (ForwardBatchSample) and hands its
  // result over in FinishSample; the CUDA backend returns from LaunchSample once the step is
  // enqueued, and the engine plans the next step meanwhile (EngineOptions::plan_ahead).
  virtual Status LaunchSample(std::span<const SequenceBatch> seqs,
                              std::span<const DrawParams> rows) {
    if (launched_ > 0) return FailedPrecondition("a step is already launched (FinishSample first)");
    Status st = ForwardBatchSample(seqs, rows, &launched_tokens_[0]);
    launched_ = st.ok() ? 1 : 0;
    return st;
  }
  // Two steps at once (EngineOptions::chain_steps): with exactly one step launched, launches the
  // next before the launched one's tokens reach the host. chain[s] >= 0 says that the last token
  // of seqs[s] is the token the launched step draws for its logits row chain[s] (the value in
  // seqs[s].tokens there is not read); -1: the tokens as given. FinishSample then gives the
  // launched step's tokens, and the next FinishSample this step's. Errors: LaunchSample's;
  // FAILED_PRECONDITION unless exactly one step is launched; INVALID_ARGUMENT when chain.size()
  // is not seqs.size() or names a row the launched step does not have. After an error the
  // launched step is still launched, and nothing of this one is.
  // The default computes the step at once (the launched step's tokens, computed in its
  // LaunchSample, put in); the CUDA backend enqueues it behind the launched one and takes the
  // tokens from the device, so that the device never waits for the host between the two.
  virtual Status LaunchSampleChained(std::span<const SequenceBatch> seqs,
                                     std::span<const DrawParams> rows,
                                     std::span<const int32_t> chain) {
    const std::vector<int32_t>& prev = launched_tokens_[0];
    KINFER_RETURN_IF_ERROR(CheckChain(launched_, seqs, chain, prev.size()));
    WithChainedTokens(seqs, chain, [&](int32_t row) { return prev[static_cast<size_t>(row)]; },
                      &chained_seqs_, &chained_copy_);
    KINFER_RETURN_IF_ERROR(ForwardBatchSample(chained_seqs_, rows, &launched_tokens_[1]));
    launched_ = 2;
    return Status::Ok();
  }
  // True when LaunchSample returns before the step is computed (the engine then plans the next
  // step in between by default, and launches it chained).
  virtual bool LaunchIsAsync() const { return false; }
  // After a failed step: OK when the device can go on (the error was the step's own), or why it
  // cannot (a sticky CUDA error: an illegal address, an ECC error, an Xid), after which every
  // step fails until the process restarts. The engine then refuses requests and the runtime's
  // /health fails, so that Kubernetes restarts the container.
  virtual Status DeviceHealth() { return Status::Ok(); }
  // The tokens of the earliest launched step. An error (a device fault) ends every launched step.
  virtual Status FinishSample(std::vector<int32_t>* tokens) {
    if (launched_ == 0) return FailedPrecondition("no step is launched (LaunchSample first)");
    tokens->swap(launched_tokens_[0]);  // the buffers trade places: no copy, no allocation
    launched_tokens_[0].swap(launched_tokens_[1]);
    --launched_;
    return Status::Ok();
  }

 protected:
  // One row's draw on the host, as ForwardBatchSample's contract states it: its entries and its
  // mask applied (the row is scratch), DrawToken, and its logprobs written when asked.
  static int32_t DrawRow(std::span<float> row, const DrawParams& p, int32_t input,
                         DrawCandidates* candidates) {
    if (p.adjusted()) ApplyLogitAdjustments(p, input, row);
    if (p.masked()) ApplyTokenMask(p.mask, p.mask_fallback, row);
    const int32_t token = DrawToken(row, p, candidates);
    if (p.wants_logprobs()) DrawnLogprobsOf(row, token, p.logprobs, p.logprobs_out);
    return token;
  }
  // Each logits row's input token (the token whose output the row is), in ForwardBatch's row
  // order: what DrawParams::count_input counts.
  static void RowInputTokens(std::span<const SequenceBatch> seqs, std::vector<int32_t>* out) {
    out->clear();
    for (const SequenceBatch& s : seqs) {
      if (!s.want_logits) continue;
      const size_t n = s.tokens.size();
      for (size_t t = n - static_cast<size_t>(s.num_logits); t < n; ++t) out->push_back(s.tokens[t]);
    }
  }
  // ForwardBatchSampleMixed's checks on a step of `n` logits rows (a backend's own version calls
  // it too).
  static Status CheckMixedRows(size_t n, size_t draws, std::span<const int32_t> host_rows) {
    if (draws != n) {
      return InvalidArgument("the step has " + std::to_string(n) + " logits rows but " +
                             std::to_string(draws) + " draw settings");
    }
    for (size_t h = 0; h < host_rows.size(); ++h) {
      if (host_rows[h] < 0 || static_cast<size_t>(host_rows[h]) >= n ||
          (h > 0 && host_rows[h] <= host_rows[h - 1])) {
        return InvalidArgument("host row " + std::to_string(host_rows[h]) + " (entry " +
                               std::to_string(h) + ") is not ascending within the step's " +
                               std::to_string(n) + " rows");
      }
    }
    return Status::Ok();
  }
  // LaunchSampleChained's checks, with `launched` steps launched, the earliest of
  // `launched_rows` rows (a backend's own version calls it too).
  static Status CheckChain(int launched, std::span<const SequenceBatch> seqs,
                           std::span<const int32_t> chain, size_t launched_rows) {
    if (launched != 1) {
      return FailedPrecondition(launched == 0 ? "no step is launched to chain to (LaunchSample first)"
                                              : "two steps are already launched (FinishSample first)");
    }
    if (chain.size() != seqs.size()) {
      return InvalidArgument("chain has " + std::to_string(chain.size()) + " entries for " +
                             std::to_string(seqs.size()) + " sequences");
    }
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (chain[s] < 0) continue;
      if (static_cast<size_t>(chain[s]) >= launched_rows || seqs[s].tokens.empty()) {
        return InvalidArgument("sequence " + std::to_string(s) + " chains to row " +
                               std::to_string(chain[s]) + " of a step with " +
                               std::to_string(launched_rows) + " rows" +
                               (seqs[s].tokens.empty() ? ", and has no token to take it" : ""));
      }
    }
    return Status::Ok();
  }
  // *out = seqs, each chained sequence's last token replaced by token(chain[s]); the replaced
  // sequences' tokens are copied into *storage (kept by the caller: no allocation a step once
  // it has grown), which *out's spans point into.
  template <typename TokenOf>
  static void WithChainedTokens(std::span<const SequenceBatch> seqs, std::span<const int32_t> chain,
                                TokenOf token, std::vector<SequenceBatch>* out,
                                std::vector<int32_t>* storage) {
    size_t n = 0;
    for (size_t s = 0; s < seqs.size(); ++s) n += chain[s] >= 0 ? seqs[s].tokens.size() : 0;
    storage->clear();
    storage->reserve(n);  // (no reallocation below: the spans stay valid)
    out->assign(seqs.begin(), seqs.end());
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (chain[s] < 0) continue;
      const size_t at = storage->size();
      storage->insert(storage->end(), seqs[s].tokens.begin(), seqs[s].tokens.end());
      storage->back() = token(chain[s]);
      (*out)[s].tokens = std::span<const int32_t>(storage->data() + at, seqs[s].tokens.size());
    }
  }

 private:
  // The default LaunchSample's steps: how many are launched, and their tokens, earliest first.
  int launched_ = 0;
  std::vector<int32_t> launched_tokens_[2];
  // The default LaunchSampleChained's batch with the drawn tokens put in.
  std::vector<SequenceBatch> chained_seqs_;
  std::vector<int32_t> chained_copy_;
};

struct BackendOptions {
  // CUDA: the device ordinal.
  int cuda_device = 0;
  // Where the factory's one line about its choice goes ("auto" falling back to the CPU, the
  // device picked). Null: stderr.
  void (*log)(std::string_view line) = nullptr;
  // CUDA: the batch-invariant kernels (CudaBackendOptions::batch_invariant). The CPU backend's
  // products follow EngineOptions::batch_invariant instead.
  bool batch_invariant = false;
};

// device: "cpu", "cuda" or "auto" (CUDA when a device works, else CPU, saying so in one log line).
// "cuda" without a CUDA build or without a working device is FAILED_PRECONDITION naming the
// reason (e.g. "no CUDA device: CUDA driver version is insufficient for CUDA runtime version").
// Any other device string is INVALID_ARGUMENT. n_threads is the CPU backend's thread pool size.
// Errors loading the model (bad tensors) are returned as LlamaModel::Load returns them.
StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(std::string_view device,
                                                      std::shared_ptr<const GgufFile> file,
                                                      int n_threads,
                                                      const BackendOptions& options = {});

// Whether this binary was built with the CUDA backend (KINFER_HAVE_CUDA).
bool CudaBackendCompiled();

// OK when a CUDA device can be used (driver present, at least one device, `ordinal` exists);
// otherwise FAILED_PRECONDITION "no CUDA device: <reason>". Cheap; no model needed.
Status CudaDeviceUsable(int ordinal = 0);

}  // namespace kinfer
