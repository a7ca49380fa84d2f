// DraftModelProposer: speculative drafts from a second model that shares the target's vocabulary.
//
// Each sequence keeps its own contiguous KV cache in the draft model, grown as the sequence grows
// (doubling, up to its max_positions), so draft KV follows the tokens running sequences hold. A proposal first brings that cache up to the sequence's
// history (keeping the longest common prefix with what it computed last time, so accepted drafts
// are not recomputed), then runs the draft model one token at a time, drawing each token with the
// request's sampling settings (greedy when the request is) and the noise the target's draw at
// that output index takes (DraftRequest::seed, first_index; runtime/sample/draw_noise.h):
// where the two models' distributions are close, their draws coincide and the draft is kept.
// Every token takes the prompt-path numerics, as the batching engine's target does, so a draft
// model that is the target itself proposes exactly the target's tokens, greedy or seeded (tests).
//
// Thread safety: none; the engine thread calls it, and the draft model is not used concurrently
// (it may be the target LlamaModel itself: both run on the engine thread, one after the other).
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/model/kv_cache.h"
#include "runtime/spec/draft_proposer.h"

namespace kinfer {

class LlamaModel;

class DraftModelProposer : public DraftProposer {
 public:
  // `draft` must outlive the proposer.
  explicit DraftModelProposer(LlamaModel* draft);
  ~DraftModelProposer() override;

  DraftProposal Propose(const DraftRequest& request) override;
  void Release(uint64_t seq) override { seqs_.erase(seq); }

  size_t num_sequences() const { return seqs_.size(); }
  // Positions the sequences' caches hold room for, together (they grow with the sequences).
  int64_t capacity_positions() const {
    int64_t n = 0;
    for (const auto& [seq, st] : seqs_) n += st.cache ? st.cache->capacity() : 0;
    return n;
  }

 private:
  struct SeqState {
    std::unique_ptr<KvCache> cache;
    std::vector<int32_t> computed;  // the tokens whose KV the cache holds, in order
    std::unique_ptr<Sampler> sampler;
  };
  LlamaModel* draft_;
  std::unordered_map<uint64_t, SeqState> seqs_;
};

}  // namespace kinfer
