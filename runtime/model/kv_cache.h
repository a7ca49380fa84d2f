// KvCache: the keys and values of one sequence, contiguous, in FP16 (as llama.cpp's default).
//
// Layout, per layer l:
//   k(l) : [capacity][n_embd_kv]  row p holds the (roped) keys of position p, heads side by side
//   v(l) : [capacity][n_embd_kv]  row p holds the values of position p
// size() positions are filled; the model appends at size() and the engine may Truncate() to reuse
// a common prefix. The paged, shared cache of the batching engine replaces this class.
//
// Thread safety: none; owned by the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/gguf/ggml_types.h"

namespace kinfer {

class KvCache {
 public:
  KvCache(int n_layer, int n_embd_kv, int capacity)
      : n_layer_(n_layer), n_embd_kv_(n_embd_kv), capacity_(capacity),
        k_(static_cast<size_t>(n_layer) * capacity * n_embd_kv),
        v_(static_cast<size_t>(n_layer) * capacity * n_embd_kv) {}

  int capacity() const { return capacity_; }
  int size() const { return size_; }
  int n_embd_kv() const { return n_embd_kv_; }
  // REQUIRES: n <= size().
  void Truncate(int n) { size_ = n; }
  // REQUIRES: size() + n <= capacity(). Called by the model after it wrote rows [size, size+n).
  void Advance(int n) { size_ += n; }

  ggml_fp16_t* k(int layer, int pos) { return &k_[Offset(layer, pos)]; }
  ggml_fp16_t* v(int layer, int pos) { return &v_[Offset(layer, pos)]; }
  const ggml_fp16_t* k(int layer, int pos) const { return &k_[Offset(layer, pos)]; }
  const ggml_fp16_t* v(int layer, int pos) const { return &v_[Offset(layer, pos)]; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(ggml_fp16_t); }

 private:
  size_t Offset(int layer, int pos) const {
    return (static_cast<size_t>(layer) * capacity_ + pos) * n_embd_kv_;
  }
  int n_layer_;
  int n_embd_kv_;
  int capacity_;
  int size_ = 0;
  std::vector<ggml_fp16_t> k_;
  std::vector<ggml_fp16_t> v_;
};

}  // namespace kinfer
