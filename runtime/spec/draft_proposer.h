// Speculative decoding's proposers: cheap guesses of the tokens that follow a sequence, which the
// engine verifies against the target model in one batched step (runtime/sched SetDraft): each row
// is drawn as without a draft, and draft tokens are kept while they are what was drawn
// (runtime/sample/sampler.h). A wrong guess costs only the compute of its positions; the output is
// the target's either way (lossless).
//
//   NgramProposer       prompt lookup (vLLM's "ngram", llama.cpp's lookup decoding): the tokens
//                       that followed the latest earlier occurrence of the sequence's last n tokens.
//                       Deterministic drafts (q = 1 at the draft). No model, no state.
//   DraftModelProposer  a second, smaller model sharing the target's vocabulary draws what it
//                       expects the target to draw: with the request's sampling settings and the
//                       target's noise (runtime/sample/draw_noise.h).
//
// Thread safety: none. The engine thread owns its proposer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sample/sampler.h"
#include "runtime/sample/sampling_params.h"

namespace kinfer {

struct DraftRequest {
  uint64_t seq = 0;                   // the engine's sequence id (proposers may keep state by it)
  std::span<const int32_t> history;   // prompt then generated tokens, non-empty
  int max_tokens = 0;                 // propose at most this many
  const SamplingParams* sampling = nullptr;  // the request's; null = greedy
  // The request's seed (Sampler::seed) and the output index of the first token to propose: a
  // proposer that samples draws token j with the key DrawKey(seed, first_index + j), the one the
  // target's draw there takes (runtime/sample/draw_noise.h).
  uint64_t seed = 0;
  uint64_t first_index = 0;
  int max_positions = 0;              // the sequence never grows past this (prompt + max_tokens)
};

struct DraftProposal {
  std::vector<int32_t> tokens;
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // Up to request.max_tokens tokens that may follow request.history; possibly none.
  virtual DraftProposal Propose(const DraftRequest& request) = 0;
  // The sequence ended: drop whatever is kept for it. Unknown ids are ignored.
  virtual void Release(uint64_t seq) {}
};

struct NgramOptions {
  int min_n = 2;  // shortest suffix looked up (vLLM prompt_lookup_min)
  int max_n = 4;  // longest suffix looked up first (vLLM prompt_lookup_max)
};

// Tries suffix lengths n = max_n down to min_n; for the first n whose last n tokens occurred
// earlier in the history, proposes the tokens that followed their latest earlier occurrence.
// O(history * max_n) per call.
class NgramProposer : public DraftProposer {
 public:
  explicit NgramProposer(NgramOptions options) : options_(options) {}
  DraftProposal Propose(const DraftRequest& request) override;

 private:
  NgramOptions options_;
};

}  // namespace kinfer
