#include "runtime/server/served_model.h"

#include <chrono>
#include <filesystem>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace kinfer {

std::string ModelNameFromPath(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

ServedModel::~ServedModel() {
  engine_.reset();  // explicit: the engine thread uses the model and tokenizer
}

StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const ServedModelOptions& o) {
  std::unique_ptr<ServedModel> m(new ServedModel());  // private constructor
  m->name_ = o.name.empty() ? ModelNameFromPath(o.path) : o.name;

  StatusOr<std::unique_ptr<GgufFile>> file = GgufFile::Open(o.path);
  if (!file.ok()) return file.status();  // its message names the path
  m->file_ = std::shared_ptr<const GgufFile>(std::move(file).value());

  StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(*m->file_);
  if (!tok.ok()) return tok.status().WithContext(o.path + ": tokenizer");
  m->tokenizer_ = std::move(tok).value();

  StatusOr<ChatPrompt> chat = ChatPrompt::FromTokenizer(*m->tokenizer_);
  if (!chat.ok()) return chat.status().WithContext(o.path);
  m->chat_ = std::make_unique<ChatPrompt>(std::move(chat).value());

  StatusOr<std::unique_ptr<LlamaModel>> model = LlamaModel::Load(m->file_, o.n_threads);
  if (!model.ok()) return model.status().WithContext(o.path + ": model");
  m->model_ = std::move(model).value();

  EngineOptions eo = o.engine;
  eo.n_threads = o.n_threads;
  eo.context_length = o.context_length;
  m->engine_ = std::make_unique<Engine>(m->model_.get(), m->tokenizer_.get(), eo);
  m->created_ = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  return m;
}

}  // namespace kinfer
