// ServedModel: everything loaded for the one model kinfer-runtime serves: the GGUF file, the
// tokenizer, the chat prompt renderer, the weights and the Engine that runs them.
//
// Thread safety: immutable after Load except the Engine, which is itself thread-safe
// (Submit/Stats from any thread). Destruction stops the engine first (pending requests end with
// FinishReason::kCancelled), then frees the weights and the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "runtime/engine/engine.h"
#include "runtime/server/chat_prompt.h"

namespace kinfer {

class GgufFile;
class LlamaModel;
class ModelBackend;
class Tokenizer;

struct ServedModelOptions {
  std::string path;  // the .gguf file
  std::string name;  // the API model id; empty = the file's stem
  int n_threads = 2;
  int context_length = 0;  // 0 = the model's trained context
  std::string device = "auto";  // cpu | cuda | auto (CreateBackend, runtime/backend)
  // Map the model file (GgufLoad::kMmap) even when the CPU computes. By default a model that
  // runs on the CPU is read into huge-page memory (GgufLoad::kMemory: faster decode) and one that
  // runs on CUDA is mapped (its weights are copied to the device; a host copy would be waste),
  // and so is one larger than half the memory available (HostMemAvailableBytes: the pod's
  // limit counts), with a warning.
  bool mmap = false;
  EngineOptions engine;    // batching settings; n_threads and context_length are taken from above
  // --batch-invariant: a request's output does not depend on its batch (EngineOptions::
  // batch_invariant on the CPU, CudaBackendOptions::batch_invariant on CUDA). Unset: the
  // device's default, on for the CPU (its cost is the prompt GEMM) and off on CUDA (its cost is
  // cuBLAS and the tiled and split attention); engine.batch_invariant is then set from it.
  std::optional<bool> batch_invariant;
  // Speculative decoding with a draft model: a second GGUF file whose vocabulary is the served
  // model's (checked at load). Empty = n-gram prompt lookup.
  std::string draft_path;
};

// "models/smollm2.Q4_1.gguf" -> "smollm2.Q4_1".
std::string ModelNameFromPath(const std::string& path);

class ServedModel {
 public:
  // Opens and validates the file, loads the tokenizer, chat template and weights, and starts the
  // engine. Errors come from the part that failed, with the path as context.
  static StatusOr<std::unique_ptr<ServedModel>> Load(const ServedModelOptions& options);
  ~ServedModel();

  const std::string& name() const { return name_; }
  int64_t created() const { return created_; }  // Unix seconds when loaded
  Engine& engine() { return *engine_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatPrompt& chat() const { return *chat_; }
  const ModelBackend& backend() const { return *backend_; }
  // True when the model file is mapped, false when it was read into memory (ServedModelOptions).
  bool weights_mapped() const { return weights_mapped_; }
  // Tensors regrouped for the CPU kernels at load (weight_layout.h); 0 when mapped.
  int regrouped_tensors() const { return regrouped_tensors_; }

 private:
  ServedModel() = default;

  std::string name_;
  int64_t created_ = 0;
  std::shared_ptr<const GgufFile> file_;
  bool weights_mapped_ = true;
  int regrouped_tensors_ = 0;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatPrompt> chat_;
  std::unique_ptr<ModelBackend> backend_;
  std::shared_ptr<const GgufFile> draft_file_;
  std::unique_ptr<LlamaModel> draft_model_;
  std::unique_ptr<Engine> engine_;  // declared last: destroyed first
};

}  // namespace kinfer
