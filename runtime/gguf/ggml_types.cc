// Block sizes, byte sizes and names of the ggml tensor types.
#include "runtime/gguf/ggml_types.h"

namespace kinfer {
namespace {

struct TypeTraits {
  int64_t block_size;  // 0: unknown id
  size_t type_size;
  std::string_view name;
  bool supported;
};

constexpr TypeTraits kUnknown{0, 0, "unknown", false};

TypeTraits Traits(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return {1, 4, "F32", true};
    case GgmlType::kF16:
      return {1, 2, "F16", true};
    case GgmlType::kQ4_0:
      return {kQK4_0, sizeof(BlockQ4_0), "Q4_0", true};
    case GgmlType::kQ4_1:
      return {kQK4_1, sizeof(BlockQ4_1), "Q4_1", true};
    case GgmlType::kQ5_0:
      return {32, 22, "Q5_0", false};
    case GgmlType::kQ5_1:
      return {32, 24, "Q5_1", false};
    case GgmlType::kQ8_0:
      return {kQK8_0, sizeof(BlockQ8_0), "Q8_0", true};
    case GgmlType::kQ8_1:
      return {kQK8_1, sizeof(BlockQ8_1), "Q8_1", false};
    case GgmlType::kQ2_K:
      return {kQK_K, 84, "Q2_K", false};
    case GgmlType::kQ3_K:
      return {kQK_K, 110, "Q3_K", false};
    case GgmlType::kQ4_K:
      return {kQK_K, sizeof(BlockQ4_K), "Q4_K", true};
    case GgmlType::kQ5_K:
      return {kQK_K, 176, "Q5_K", false};
    case GgmlType::kQ6_K:
      return {kQK_K, sizeof(BlockQ6_K), "Q6_K", true};
    case GgmlType::kQ8_K:
      return {kQK_K, sizeof(BlockQ8_K), "Q8_K", false};
    case GgmlType::kIQ2_XXS:
      return {kQK_K, 66, "IQ2_XXS", false};
    case GgmlType::kIQ2_XS:
      return {kQK_K, 74, "IQ2_XS", false};
    case GgmlType::kIQ3_XXS:
      return {kQK_K, 98, "IQ3_XXS", false};
    case GgmlType::kIQ1_S:
      return {kQK_K, 50, "IQ1_S", false};
    case GgmlType::kIQ4_NL:
      return {32, 18, "IQ4_NL", false};
    case GgmlType::kIQ3_S:
      return {kQK_K, 110, "IQ3_S", false};
    case GgmlType::kIQ2_S:
      return {kQK_K, 82, "IQ2_S", false};
    case GgmlType::kIQ4_XS:
      return {kQK_K, 136, "IQ4_XS", false};
    case GgmlType::kI8:
      return {1, 1, "I8", false};
    case GgmlType::kI16:
      return {1, 2, "I16", false};
    case GgmlType::kI32:
      return {1, 4, "I32", false};
    case GgmlType::kI64:
      return {1, 8, "I64", false};
    case GgmlType::kF64:
      return {1, 8, "F64", false};
    case GgmlType::kIQ1_M:
      return {kQK_K, 56, "IQ1_M", false};
    case GgmlType::kBF16:
      return {1, 2, "BF16", true};
    case GgmlType::kTQ1_0:
      return {kQK_K, 54, "TQ1_0", false};
    case GgmlType::kTQ2_0:
      return {kQK_K, 66, "TQ2_0", false};
    case GgmlType::kMXFP4:
      return {32, 17, "MXFP4", false};
    case GgmlType::kNVFP4:
      return {64, 36, "NVFP4", false};
    case GgmlType::kQ1_0:
      return {128, 18, "Q1_0", false};
  }
  return kUnknown;
}

}  // namespace

int64_t GgmlBlockSize(GgmlType type) { return Traits(type).block_size; }
size_t GgmlTypeSize(GgmlType type) { return Traits(type).type_size; }
std::string_view GgmlTypeName(GgmlType type) { return Traits(type).name; }
bool GgmlTypeSupported(GgmlType type) { return Traits(type).supported; }
bool GgmlTypeKnown(GgmlType type) { return Traits(type).block_size != 0; }

}  // namespace kinfer
