#include "runtime/tokenizer/vocab.h"

#include <utility>

namespace kinfer {

uint32_t TokenAttrFromType(int64_t token_type) {
  switch (token_type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

Vocab::Vocab(std::vector<std::string> texts, std::vector<uint32_t> attrs)
    : texts_(std::move(texts)), attrs_(std::move(attrs)) {
  index_.reserve(texts_.size());
  for (size_t i = 0; i < texts_.size(); ++i) index_.insert_or_assign(texts_[i], static_cast<int32_t>(i));
}

}  // namespace kinfer
