#include "runtime/tokenizer/special_partition.h"

#include <algorithm>

namespace kinfer {

std::vector<int32_t> SpecialTokensByPriority(const Vocab& vocab) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (vocab.attr(id) & (kAttrControl | kAttrUserDefined | kAttrUnknown)) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return vocab.text(a).size() > vocab.text(b).size(); });
  return ids;
}

void PartitionSpecialTokens(std::string_view text, const Vocab& vocab, const std::vector<int32_t>& special_tokens,
                            bool parse_special, std::vector<TextFragment>* fragments) {
  fragments->clear();
  if (text.empty()) return;
  fragments->push_back({-1, 0, text.size()});
  std::vector<TextFragment> next;
  for (int32_t id : special_tokens) {
    if (!parse_special && (vocab.attr(id) & (kAttrControl | kAttrUnknown))) continue;
    const std::string& needle = vocab.text(id);
    if (needle.empty()) continue;
    bool changed = false;
    next.clear();
    for (const TextFragment& f : *fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.offset, f.length);
      size_t pos = 0;
      while (true) {
        const size_t match = raw.find(needle, pos);
        if (match == std::string_view::npos) break;
        if (match > pos) next.push_back({-1, f.offset + pos, match - pos});
        next.push_back({id, 0, 0});
        pos = match + needle.size();
        changed = true;
      }
      if (pos < raw.size()) next.push_back({-1, f.offset + pos, raw.size() - pos});
    }
    if (changed) fragments->swap(next);
  }
}

}  // namespace kinfer
