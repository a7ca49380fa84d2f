// Hyper-parameters of a llama-architecture model, read from GGUF metadata (`llama.*` keys).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace kinfer {

class GgufFile;

struct LlamaHParams {
  std::string architecture;  // "llama"
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;        // n_embd / n_head unless attention.key_length says otherwise
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  int rope_dim = 0;        // rotated dims per head (rope.dimension_count), <= head_dim
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;

  int n_embd_kv() const { return n_head_kv * head_dim; }
  int n_gqa() const { return n_head / n_head_kv; }
};

// Reads and validates the hyper-parameters. INVALID_ARGUMENT naming the key for a missing or
// inconsistent value (e.g. n_head not a multiple of n_head_kv), UNIMPLEMENTED for an
// architecture other than llama.
StatusOr<LlamaHParams> ReadLlamaHParams(const GgufFile& file);

}  // namespace kinfer
