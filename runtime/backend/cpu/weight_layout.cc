#include "runtime/backend/cpu/weight_layout.h"

#include <cassert>
#include <cstring>

#include "runtime/backend/cpu/kernels.h"
#include "runtime/gguf/gguf_file.h"

namespace kinfer {
namespace {

struct Q4Shape {
  int block_bytes;  // 18 (Q4_0) or 20 (Q4_1)
  int scales;       // fp16 values before qs: 1 (d) or 2 (d, m)
};

Q4Shape ShapeOf(GgmlType type) {
  assert(Q4Groupable(type));
  return type == GgmlType::kQ4_1 ? Q4Shape{20, 2} : Q4Shape{18, 1};
}

// One group of 8 blocks between the two layouts; `to_grouped` picks the direction.
void ConvertGroup(const Q4Shape& s, uint8_t* group, bool to_grouped) {
  uint8_t tmp[8 * 20];
  std::memcpy(tmp, group, 8 * static_cast<size_t>(s.block_bytes));
  const int qs_off = 2 * s.scales;
  for (int b = 0; b < 8; ++b) {
    const int gguf_block = b * s.block_bytes;
    for (int k = 0; k < 4; ++k) {
      const int grouped = k * 32 + b * 4;
      const int gguf = gguf_block + qs_off + 4 * k;
      if (to_grouped) {
        std::memcpy(group + grouped, tmp + gguf, 4);
      } else {
        std::memcpy(group + gguf, tmp + grouped, 4);
      }
    }
    for (int j = 0; j < s.scales; ++j) {
      const int grouped = 128 + j * 16 + b * 2;
      const int gguf = gguf_block + 2 * j;
      if (to_grouped) {
        std::memcpy(group + grouped, tmp + gguf, 2);
      } else {
        std::memcpy(group + gguf, tmp + grouped, 2);
      }
    }
  }
}

void ConvertRows(GgmlType type, uint8_t* data, int64_t rows, int64_t cols, bool to_grouped) {
  const Q4Shape s = ShapeOf(type);
  const int64_t nb = cols / 32;
  const size_t row_bytes = static_cast<size_t>(nb) * s.block_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = data + r * row_bytes;
    for (int64_t g = 0; g < nb / 8; ++g) ConvertGroup(s, row + g * 8 * s.block_bytes, to_grouped);
  }
}

}  // namespace

bool PreferQ4Grouped8() { return cpu_internal::Kernels().prefer_q4_grouped8; }

bool Q4Groupable(GgmlType type) { return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1; }

void RegroupQ4(GgmlType type, uint8_t* data, int64_t rows, int64_t cols) {
  ConvertRows(type, data, rows, cols, true);
}

void UngroupQ4(GgmlType type, uint8_t* data, int64_t rows, int64_t cols) {
  ConvertRows(type, data, rows, cols, false);
}

bool RegroupableTensorName(std::string_view name) {
  if (name == "output.weight") return true;
  if (!name.starts_with("blk.")) return false;
  name.remove_prefix(4);
  size_t digits = 0;
  while (digits < name.size() && name[digits] >= '0' && name[digits] <= '9') ++digits;
  if (digits == 0 || digits >= name.size() || name[digits] != '.') return false;
  name.remove_prefix(digits + 1);
  for (std::string_view m : {"attn_q.weight", "attn_k.weight", "attn_v.weight",
                             "attn_output.weight", "ffn_gate.weight", "ffn_up.weight",
                             "ffn_down.weight"}) {
    if (name == m) return true;
  }
  return false;
}

uint32_t PrepareTensorForCpu(const GgufTensorInfo& info, uint8_t* data) {
  if (!PreferQ4Grouped8() || !Q4Groupable(info.type) || info.dims.size() != 2 ||
      !RegroupableTensorName(info.name)) {
    return static_cast<uint32_t>(WeightLayout::kGguf);
  }
  RegroupQ4(info.type, data, info.dims[1], info.dims[0]);
  return static_cast<uint32_t>(WeightLayout::kQ4Grouped8);
}

}  // namespace kinfer
