#include "runtime/server/served_model.h"

#include <chrono>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "runtime/backend/cpu/weight_layout.h"
#include "runtime/backend/cpu_backend.h"
#include "runtime/backend/model_backend.h"
#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {

std::string ModelNameFromPath(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

ServedModel::~ServedModel() {
  engine_.reset();  // explicit: the engine thread uses the models and tokenizer
}

StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const ServedModelOptions& o) {
  std::unique_ptr<ServedModel> m(new ServedModel());  // private constructor
  m->name_ = o.name.empty() ? ModelNameFromPath(o.path) : o.name;

  // The CPU streams every weight each decode step: huge pages spare it the TLB misses. Decided
  // before the backend is, as CreateBackend's "auto" would (a CUDA backend that then fails to
  // start falls back to the CPU over the mapping).
  const bool on_cpu = o.device == "cpu" || (o.device == "auto" && !CudaDeviceUsable().ok());
  GgufLoad load = on_cpu && !o.mmap ? GgufLoad::kMemory : GgufLoad::kMmap;
  if (load == GgufLoad::kMemory) {
    // A copy that would take most of what the machine (or the pod's memory limit) has left would
    // leave the KV cache short or get the process OOM-killed; the mapping's pages can be dropped
    // under pressure instead.
    std::error_code ec;
    const auto size = static_cast<int64_t>(std::filesystem::file_size(o.path, ec));
    const int64_t avail = HostMemAvailableBytes();
    if (!ec && avail > 0 && size > avail / 2) {
      spdlog::warn("{}: {} MiB would take over half of the {} MiB of memory available; mapping "
                   "the file instead of reading it into memory",
                   o.path, size >> 20, avail >> 20);
      load = GgufLoad::kMmap;
    }
  }
  // In memory, the CPU kernels' preferred layout (weight_layout.h) is set up once, at load.
  const GgufPrepareFn prepare = PrepareTensorForCpu;
  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(o.path, load, prepare);
  if (!file.ok()) return file.status();  // its message names the path
  m->file_ = std::shared_ptr<const GgufFile>(std::move(file).value());
  m->weights_mapped_ = load == GgufLoad::kMmap;
  for (const GgufTensorInfo& t : m->file_->tensors()) m->regrouped_tensors_ += t.layout != 0;

  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(*m->file_);
  if (!tok.ok()) return tok.status().WithContext(o.path + ": tokenizer");
  m->tokenizer_ = std::move(tok).value();

  StatusOr<ChatPrompt> chat = ChatPrompt::FromTokenizer(*m->tokenizer_);
  if (!chat.ok()) return chat.status().WithContext(o.path);
  m->chat_ = std::make_unique<ChatPrompt>(std::move(chat).value());

  BackendOptions bo;
  bo.log = [](std::string_view line) { spdlog::info("{}", line); };
  bo.batch_invariant = o.batch_invariant.value_or(false);
  StatusOr<std::unique_ptr<ModelBackend>> backend =
      CreateBackend(o.device, m->file_, o.n_threads, bo);
  if (!backend.ok()) return backend.status().WithContext(o.path + ": model");
  m->backend_ = std::move(backend).value();

  EngineOptions eo = o.engine;
  const bool cuda = m->backend_->name() == "cuda";
  eo.batch_invariant = o.batch_invariant.value_or(!cuda && o.engine.batch_invariant);
  spdlog::info("batch invariance: {} ({}{})", eo.batch_invariant ? "on" : "off",
               o.batch_invariant ? "--batch-invariant" : "the default on ",
               o.batch_invariant ? "" : (cuda ? "cuda" : "the cpu"));
  if (!o.draft_path.empty()) {
    StatusOr<std::unique_ptr<GgufFile>> df = GgufFile::Open(o.draft_path, load, prepare);
    if (!df.ok()) return df.status().WithContext("draft model");
    m->draft_file_ = std::shared_ptr<const GgufFile>(std::move(df).value());
    StatusOr<std::unique_ptr<Tokenizer>> dtok = Tokenizer::FromGguf(*m->draft_file_);
    if (!dtok.ok()) return dtok.status().WithContext(o.draft_path + ": tokenizer");
    // The draft's token ids must mean what the target's mean.
    const Tokenizer& a = *m->tokenizer_;
    const Tokenizer& b = **dtok;
    bool same = a.vocab_size() == b.vocab_size();
    for (int32_t id = 0; same && id < a.vocab_size(); ++id) {
      same = a.TokenToPiece(id, true) == b.TokenToPiece(id, true);
    }
    if (!same) {
      return InvalidArgument(o.draft_path + ": the draft model's vocabulary (" +
                             std::to_string(b.vocab_size()) + " tokens) is not the served model's (" +
                             std::to_string(a.vocab_size()) + " tokens)");
    }
    StatusOr<std::unique_ptr<LlamaModel>> dm = LlamaModel::Load(m->draft_file_, o.n_threads);
    if (!dm.ok()) return dm.status().WithContext(o.draft_path + ": draft model");
    m->draft_model_ = std::move(dm).value();
    // Its logits must be as wide as the target's: an output layer padded wider (as some GGUF
    // conversions are) drafts ids the target cannot verify, and every step with one failed.
    const int32_t draft_vocab = m->draft_model_->hparams().n_vocab;
    const int32_t target_vocab = m->backend_->hparams().n_vocab;
    if (draft_vocab != target_vocab) {
      return InvalidArgument(o.draft_path + ": the draft model's logits cover " +
                             std::to_string(draft_vocab) + " token ids, the served model's " +
                             std::to_string(target_vocab) + "; a draft model must match them");
    }
    eo.spec.draft_model = m->draft_model_.get();
  }
  eo.n_threads = o.n_threads;
  eo.context_length = o.context_length;
  m->engine_ = std::make_unique<Engine>(m->backend_.get(), m->tokenizer_.get(), eo);
  m->created_ = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  return m;
}

}  // namespace kinfer
