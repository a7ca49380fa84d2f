// KvCache: the keys and values of one sequence, contiguous, in FP16 (as llama.cpp's default).
//
// Layout, per layer l:
//   k(l) : [capacity][n_embd_kv]  row p holds the (roped) keys of position p, heads side by side
//   v(l) : [capacity][n_embd_kv]  row p holds the values of position p
// size() positions are filled; the model appends at size() and the engine may Truncate() to reuse
// a common prefix.
//
// PagedKvCache: the batching engine's cache, shared by every sequence: fixed-size blocks of
// block_size positions, per layer [num_blocks][block_size][n_embd_kv] for keys and for values.
// Which blocks hold a sequence's positions is its block table (runtime/kv/KvBlockManager decides
// it); position p of a sequence lives in block table[p / block_size], slot p % block_size.
//
// KvLayout is what the forward pass reads: both caches describe themselves as one (a KvCache is
// a paged cache with a single block as long as its capacity), so one attention kernel serves both.
//
// Thread safety: none; owned by the engine thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/gguf/ggml_types.h"

namespace kinfer {

struct KvLayout {
  ggml_fp16_t* k = nullptr;  // layer 0, block 0, slot 0
  ggml_fp16_t* v = nullptr;
  size_t layer_stride = 0;  // elements from one layer to the next
  int block_size = 0;
  int n_embd_kv = 0;
  ggml_fp16_t* KRow(int layer, int block, int slot) const { return k + Offset(layer, block, slot); }
  ggml_fp16_t* VRow(int layer, int block, int slot) const { return v + Offset(layer, block, slot); }
  size_t Offset(int layer, int block, int slot) const {
    return layer * layer_stride +
           (static_cast<size_t>(block) * block_size + slot) * static_cast<size_t>(n_embd_kv);
  }
};

class KvCache {
 public:
  KvCache(int n_layer, int n_embd_kv, int capacity)
      : n_layer_(n_layer),
        n_embd_kv_(n_embd_kv),
        capacity_(capacity),
        k_(static_cast<size_t>(n_layer) * capacity * n_embd_kv),
        v_(static_cast<size_t>(n_layer) * capacity * n_embd_kv) {}

  int capacity() const { return capacity_; }
  int size() const { return size_; }
  int n_embd_kv() const { return n_embd_kv_; }
  // REQUIRES: n <= size().
  void Truncate(int n) { size_ = n; }
  // Makes room for `capacity` positions, keeping the size() filled ones (layer by layer: the
  // rows move to the new layout). A no-op when capacity <= capacity(). The draft model's caches
  // grow this way as their sequences do, instead of holding a whole context each from the start.
  void Grow(int capacity) {
    if (capacity <= capacity_) return;
    std::vector<ggml_fp16_t> k(static_cast<size_t>(n_layer_) * capacity * n_embd_kv_);
    std::vector<ggml_fp16_t> v(k.size());
    const size_t rows = static_cast<size_t>(size_) * n_embd_kv_;
    for (int l = 0; l < n_layer_; ++l) {
      const size_t from = static_cast<size_t>(l) * capacity_ * n_embd_kv_;
      const size_t to = static_cast<size_t>(l) * capacity * n_embd_kv_;
      std::copy_n(k_.begin() + from, rows, k.begin() + to);
      std::copy_n(v_.begin() + from, rows, v.begin() + to);
    }
    k_ = std::move(k);
    v_ = std::move(v);
    capacity_ = capacity;
  }
  // REQUIRES: size() + n <= capacity(). Called by the model after it wrote rows [size, size+n).
  void Advance(int n) { size_ += n; }

  ggml_fp16_t* k(int layer, int pos) { return &k_[Offset(layer, pos)]; }
  ggml_fp16_t* v(int layer, int pos) { return &v_[Offset(layer, pos)]; }
  const ggml_fp16_t* k(int layer, int pos) const { return &k_[Offset(layer, pos)]; }
  const ggml_fp16_t* v(int layer, int pos) const { return &v_[Offset(layer, pos)]; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(ggml_fp16_t); }
  // One block of `capacity` positions (block table {0}).
  KvLayout layout() {
    return {k_.data(), v_.data(), static_cast<size_t>(capacity_) * n_embd_kv_, capacity_,
            n_embd_kv_};
  }

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

class PagedKvCache {
 public:
  PagedKvCache(int n_layer, int n_embd_kv, int block_size, int num_blocks)
      : n_layer_(n_layer),
        n_embd_kv_(n_embd_kv),
        block_size_(block_size),
        num_blocks_(num_blocks),
        k_(static_cast<size_t>(n_layer) * num_blocks * block_size * n_embd_kv),
        v_(k_.size()) {}

  int n_layer() const { return n_layer_; }
  int n_embd_kv() const { return n_embd_kv_; }
  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  size_t bytes() const { return (k_.size() + v_.size()) * sizeof(ggml_fp16_t); }
  // Bytes one block takes across all layers (keys and values): for sizing from a memory budget.
  static size_t BlockBytes(int n_layer, int n_embd_kv, int block_size) {
    return 2 * static_cast<size_t>(n_layer) * block_size * n_embd_kv * sizeof(ggml_fp16_t);
  }
  KvLayout layout() {
    return {k_.data(), v_.data(), static_cast<size_t>(num_blocks_) * block_size_ * n_embd_kv_,
            block_size_, n_embd_kv_};
  }

 private:
  int n_layer_;
  int n_embd_kv_;
  int block_size_;
  int num_blocks_;
  std::vector<ggml_fp16_t> k_;
  std::vector<ggml_fp16_t> v_;
};

}  // namespace kinfer
