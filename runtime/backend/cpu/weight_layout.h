// Weight layouts the CPU kernels read, and the repacking between them.
//
// kGguf: a tensor's bytes as the GGUF file stores them (ggml's blocks, one after another).
//
// kQ4Grouped8 (Q4_0 and Q4_1 only): each row's blocks regrouped eight at a time, so that one
// 32-byte load holds four bytes of each of eight blocks and the block scales of a group are
// contiguous halves. Group g (8 blocks) starts at byte 8 * g * block_bytes of the row and holds
//   4 chunks of 32 bytes: chunk k holds bytes qs[4k..4k+3] of blocks 0..7
//   8 fp16 d, then (Q4_1) 8 fp16 m
// A byte of chunk k holds element 4k+i of its block in the low nibble and 16+4k+i in the high one
// (ggml's nibble order), so the low nibbles of chunk k meet step k of the interleaved Q8
// activation row (kernels.h) and the high nibbles step k+4. A row's last nb % 8 blocks stay GGUF
// blocks. Same byte count as kGguf; a permutation of its bytes (RegroupQ4 / UngroupQ4 are
// inverses).
//
// Why: the AVX2 kernels then spend about 5 instructions a block instead of about 20 (no
// per-block fp16 scale conversions or broadcasts, and int16 accumulation over a group), and
// the decode step is bound by memory again, not by the kernel (docs/benchmarks.md).
#pragma once

#include <cstdint>
#include <string_view>

#include "runtime/gguf/ggml_types.h"

namespace kinfer {

enum class WeightLayout : uint32_t {
  kGguf = 0,
  kQ4Grouped8 = 1,
};

// True when the kernels of the active ISA are faster over kQ4Grouped8 than over kGguf (AVX2
// without AVX-512). Every ISA reads both layouts.
bool PreferQ4Grouped8();

// True for the types kQ4Grouped8 holds: Q4_0, Q4_1.
bool Q4Groupable(GgmlType type);

// Rewrites `rows` rows of `cols` (a multiple of 32) elements from kGguf to kQ4Grouped8, in place.
// REQUIRES: Q4Groupable(type).
void RegroupQ4(GgmlType type, uint8_t* data, int64_t rows, int64_t cols);
// The inverse (tests, and tools that need the file's bytes back).
void UngroupQ4(GgmlType type, uint8_t* data, int64_t rows, int64_t cols);

// The model tensors kinfer regroups when it holds the weights in memory for the CPU: the layers'
// projection matrices (blk.N.attn_q / attn_k / attn_v / attn_output / ffn_gate / ffn_up /
// ffn_down .weight) and output.weight, when 2-D and Q4_0 / Q4_1. Never token_embd.weight, which
// is also read row by row as the embedding.
bool RegroupableTensorName(std::string_view name);

struct GgufTensorInfo;
// The GgufPrepareFn (gguf_file.h) a model read into memory for the CPU is opened with: regroups
// a RegroupableTensorName tensor of type Q4_0 / Q4_1 to kQ4Grouped8 when PreferQ4Grouped8(), and
// returns its WeightLayout as the tag (kGguf for every other tensor, left as it is).
uint32_t PrepareTensorForCpu(const GgufTensorInfo& info, uint8_t* data);

}  // namespace kinfer
