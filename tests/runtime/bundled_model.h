// Test helper: the bundled model loaded once per test binary (file, tokenizer, weights on 2
// threads), for suites that need the real model. Header-only; each binary links what it uses
// (kinfer_model, and kinfer_tokenizer for Tokenizer()).
//
// Thread safety: Get() may be called from any thread; the first call loads.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <mutex>

#include "runtime/gguf/gguf_file.h"
#include "runtime/model/llama_model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/runtime/test_model_path.h"

namespace kinfer::testing {

class BundledModel {
 public:
  // nullptr when the model file is absent (tests skip with KINFER_REQUIRE_MODEL first) or fails to
  // load (the failure is reported to gtest).
  static const BundledModel* Get() {
    static std::once_flag once;
    static BundledModel* instance = nullptr;
    std::call_once(once, [] {
      if (!ModelAvailable()) return;
      auto f = GgufFile::Open(ModelPath());
      if (!f.ok()) {
        ADD_FAILURE() << f.status().ToString();
        return;
      }
      auto* m = new BundledModel();
      m->file_ = std::shared_ptr<const GgufFile>(std::move(f).value());
      auto t = Tokenizer::FromGguf(*m->file_);
      if (!t.ok()) {
        ADD_FAILURE() << t.status().ToString();
        return;
      }
      m->tokenizer_ = std::move(t).value();
      auto model = LlamaModel::Load(m->file_, 2);
      if (!model.ok()) {
        ADD_FAILURE() << model.status().ToString();
        return;
      }
      m->model_ = std::move(model).value();
      instance = m;  // kept for the process's life
    });
    return instance;
  }
  LlamaModel* model() const { return model_.get(); }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<LlamaModel> model_;
};

}  // namespace kinfer::testing
