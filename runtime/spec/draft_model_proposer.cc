#include "runtime/spec/draft_model_proposer.h"

#include <algorithm>

#include "runtime/model/llama_model.h"

namespace kinfer {

DraftModelProposer::DraftModelProposer(LlamaModel* draft) : draft_(draft) {}
DraftModelProposer::~DraftModelProposer() = default;

DraftProposal DraftModelProposer::Propose(const DraftRequest& request) {
  DraftProposal out;
  const std::span<const int32_t> h = request.history;
  const int len = static_cast<int>(h.size());
  if (request.max_tokens <= 0 || len == 0) return out;
  SeqState& st = seqs_[request.seq];
  // The cache grows with the sequence (in steps of at least kGrowStep positions, doubling), up to
  // what it may ever hold: allocated whole at the first draft, every running sequence held a
  // full context of draft KV (max_tokens defaults to the context's rest), outside the KV budget.
  constexpr int kGrowStep = 256;
  const int limit = std::min(std::max(request.max_positions, len + request.max_tokens),
                             draft_->hparams().n_ctx_train);
  const int needed = std::min(limit, len + request.max_tokens);
  if (!st.cache) {
    st.cache = draft_->NewKvCache(std::min(limit, std::max(needed, kGrowStep)));
    st.computed.clear();
  } else if (st.cache->capacity() < needed) {
    st.cache->Grow(std::min(limit, std::max({needed, 2 * st.cache->capacity(), kGrowStep})));
  }
  if (!st.sampler) {
    SamplingParams p = request.sampling != nullptr ? *request.sampling : SamplingParams{};
    if (request.sampling == nullptr) p.temperature = 0.0f;
    p.seed = request.seed;  // the target's noise: the draws coincide where p ~ q
    p.logprobs = -1;
    st.sampler = std::make_unique<Sampler>(p);
  }
  // Keep the common prefix, but always feed at least the last token: its logits are needed.
  size_t keep = 0;
  while (keep < st.computed.size() && keep < h.size() && st.computed[keep] == h[keep]) ++keep;
  keep = std::min(keep, h.size() - 1);
  st.cache->Truncate(static_cast<int>(keep));
  st.computed.resize(keep);

  const int k = std::min(request.max_tokens, st.cache->capacity() - len);
  if (k <= 0) return out;
  std::vector<float> logits;
  if (!draft_->Forward(h.subspan(keep), st.cache.get(), false, &logits, ForwardMode::kPrompt).ok()) {
    seqs_.erase(request.seq);  // an inconsistent cache is worse than a missed draft
    return out;
  }
  st.computed.assign(h.begin(), h.end());
  std::vector<int32_t> context(h.begin(), h.end());
  st.sampler->Seek(request.first_index);
  for (int j = 0; j < k; ++j) {
    const int32_t t = st.sampler->Sample(logits, context, nullptr);
    out.tokens.push_back(t);
    context.push_back(t);
    if (j + 1 == k) break;
    const int32_t one[1] = {t};
    if (!draft_->Forward(one, st.cache.get(), false, &logits, ForwardMode::kPrompt).ok()) break;
    st.computed.push_back(t);
  }
  return out;
}

}  // namespace kinfer
