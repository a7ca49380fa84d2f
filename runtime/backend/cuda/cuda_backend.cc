// CudaBackend: memory plan, weight upload, the step's metadata and the layer loop on the stream.
#include "runtime/backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <string_view>

#include "runtime/backend/cuda/cuda_kernels.h"
#include "runtime/gguf/gguf_file.h"

namespace kinfer {

Status CudaDeviceUsable(int ordinal) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    return FailedPrecondition(std::string("no CUDA device: ") + cudaGetErrorString(e));
  }
  if (count == 0) return FailedPrecondition("no CUDA device: cudaGetDeviceCount found none");
  if (ordinal < 0 || ordinal >= count) {
    return FailedPrecondition("no CUDA device: ordinal " + std::to_string(ordinal) + " but " +
                              std::to_string(count) + " device(s)");
  }
  return Status::Ok();
}

namespace {

using cuda::ActBuffers;
using cuda::DevMatrix;

Status CudaError(cudaError_t e, std::string_view what) {
  return Internal(std::string(what) + ": " + cudaGetErrorString(e));
}
#define KINFER_CUDA_RETURN(expr, what)                       \
  do {                                                       \
    const cudaError_t _e = (expr);                           \
    if (_e != cudaSuccess) return CudaError(_e, what);       \
  } while (0)

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::atoi(v);
}

size_t Align256(size_t n) { return (n + 255) & ~size_t{255}; }

// One cudaMalloc; pieces handed out 256-byte aligned.
class Arena {
 public:
  ~Arena() {
    if (base_) cudaFree(base_);
  }
  Status Allocate(size_t bytes, std::string_view what) {
    if (bytes == 0) bytes = 256;
    const cudaError_t e = cudaMalloc(&base_, bytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      base_ = nullptr;
      return ResourceExhausted(std::string(what) + ": cudaMalloc of " + std::to_string(bytes) +
                               " bytes failed: " + cudaGetErrorString(e));
    }
    size_ = bytes;
    used_ = 0;
    return Status::Ok();
  }
  template <typename T>
  T* Take(size_t count) {
    const size_t bytes = Align256(count * sizeof(T));
    if (used_ + bytes > size_) return nullptr;
    T* p = reinterpret_cast<T*>(static_cast<uint8_t*>(base_) + used_);
    used_ += bytes;
    return p;
  }
  size_t size() const { return size_; }

 private:
  void* base_ = nullptr;
  size_t size_ = 0;
  size_t used_ = 0;
};

struct Layer {
  float* attn_norm = nullptr;
  float* ffn_norm = nullptr;
  DevMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
  // Q|K|V and gate|up stored back to back when each group has one type: one product each on the
  // matrix-vector path (null data: not fused).
  DevMatrix wqkv, w_gate_up;
};

struct HostTensor {
  const GgufTensorInfo* info = nullptr;
  int64_t rows = 0, cols = 0;
};

}  // namespace

struct CudaBackend::Impl {
  std::shared_ptr<const GgufFile> file;
  LlamaHParams hp;
  CudaBackendOptions opt;
  CudaDeviceInfo info;
  cudaStream_t stream = nullptr;  // the step's kernels
  // The step's uploads and its ids' copy back (CudaBackendOptions::copy_stream; else `stream`):
  // a chained step's upload runs while the step before computes, and that step's ids go back
  // while the chained one computes. uploaded[slot] (on copy) orders a step's kernels after its
  // upload; computed[slot] (on stream) its ids' copy after its kernels.
  cudaStream_t copy = nullptr;
  cudaEvent_t uploaded[2] = {nullptr, nullptr};
  cudaEvent_t computed[2] = {nullptr, nullptr};
  bool two_streams() const { return copy != stream; }
  // Waits for everything on both streams.
  cudaError_t SyncStreams() {
    const cudaError_t a = cudaStreamSynchronize(stream);
    const cudaError_t b = two_streams() ? cudaStreamSynchronize(copy) : cudaSuccess;
    return a != cudaSuccess ? a : b;
  }
  cublasHandle_t cublas = nullptr;
  void* cublas_ws = nullptr;

  Arena weights, copies, scratch;
  int64_t fp16_bytes = 0;
  size_t weight_bytes_per_token = 0;
  // Bytes the products read, per path: the layers' matrices and the output matrix, quantized
  // and as FP16 (WeightBytesRead).
  size_t layer_q_bytes = 0, layer_f16_bytes = 0, output_q_bytes = 0, output_f16_bytes = 0;
  size_t WeightBytesRead(int tokens, int logits_rows) const;
  DevMatrix tok_embd, output;
  float* output_norm = nullptr;
  std::vector<Layer> layers;
  uint16_t* w16_scratch = nullptr;  // when there are no fp16 copies
  // Split decode attention's partial states and per-token counts (cuda_kernels.h).
  float* split_partial = nullptr;
  int32_t* split_counters = nullptr;
  int split_blocks = 0;  // (token, KV head, split) blocks the scratch holds
  int step_max_pos = 0;  // the largest position count of the step being enqueued's tokens

  // Scratch activations, [max_tokens][...].
  int T = 0;  // max tokens
  int R = 0;  // logits rows per pass
  float *x = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr,
        *gate = nullptr, *up = nullptr, *tmp = nullptr, *xo = nullptr, *logits = nullptr;
  uint16_t* x16 = nullptr;
  ActBuffers act;
  int32_t* input_ids_dev = nullptr;  // T: the step's tokens as the embedding read them
  bool step_adjusted = false;        // the step being enqueued has rows with AdjustLogitsRows' entries
  bool step_logprobs = false;        // ... rows that report logprobs (LogprobRows)
  // Device buffers a step's kernels read from the host or write for it come in pairs too (the
  // slot's): the copy stream fills the next step's and empties the step before's while a step
  // computes. The pointers without _buf are the current slot's; prev_argmax_dev is the other
  // slot's ids, which a chained step's embedding reads.
  int32_t* argmax_dev_buf[2] = {nullptr, nullptr};            // T: every row's id of the step
  cuda::DeviceDraw* draws_dev_buf[2] = {nullptr, nullptr};    // T rows: a sampling step's settings
  cuda::DeviceLogprobs* lps_dev_buf[2] = {nullptr, nullptr};  // T rows: LogprobRows' reports
  int32_t* argmax_dev = nullptr;
  int32_t* prev_argmax_dev = nullptr;
  cuda::DeviceDraw* draws_dev = nullptr;
  cuda::DeviceLogprobs* lps_dev = nullptr;

  // Host buffers a step is enqueued from or returns into come in pairs (slot = launch count mod
  // 2), so that a chained step (two on the stream: LaunchSampleChained) never rewrites a buffer
  // the step before it still reads from or writes into; step_done[slot] is recorded after a
  // step's ids are copied back. The pointers without _buf are the current slot's.
  int slot = 0;
  cuda::DeviceDraw* draws_host_buf[2] = {nullptr, nullptr};  // pinned, T rows
  int32_t* meta_host_buf[2] = {nullptr, nullptr};            // pinned, meta_cap
  int32_t* argmax_host_buf[2] = {nullptr, nullptr};          // pinned, T
  cuda::DeviceLogprobs* lps_host_buf[2] = {nullptr, nullptr};  // pinned, T rows
  // The step's rows that report logprobs, and where (DrawParams::logprobs_out): Collect fills them.
  std::vector<std::pair<size_t, DrawnLogprobs*>> lps_out_buf[2];
  cudaEvent_t step_done[2] = {nullptr, nullptr};
  cuda::DeviceDraw* draws_host = nullptr;
  int32_t* argmax_host = nullptr;
  int32_t* meta_host = nullptr;
  void UseSlot(int s) {
    slot = s;
    draws_host = draws_host_buf[s];
    meta_host = meta_host_buf[s];
    argmax_host = argmax_host_buf[s];
    meta_dev = meta_dev_buf[s];
    argmax_dev = argmax_dev_buf[s];
    prev_argmax_dev = argmax_dev_buf[s ^ 1];
    draws_dev = draws_dev_buf[s];
    lps_dev = lps_dev_buf[s];
  }

  // Step metadata: regions of S int32s (S = ms, the step's number of tokens) in a device
  // buffer and its pinned mirror (a pair of each), so that a step uploads what it uses (a decode step of one
  // sequence: 9 values and its block table):
  //   [0,S) tokens  [S,2S) pos  [2S,3S) tok_seq  [3S,4S) slot_rows  [4S,5S) logit_rows
  //   [5S,6S) seq_table_off  [6S,7S) tiles  [7S,8S) tile_len  [8S,9S) decode tokens  [9S,..) tables
  //   then the draws' logit bias and penalty entries (DeviceDraw::adjust_begin).
  // A graph (keyed by S and the slot) holds the addresses of its step size's regions.
  // A chained step's token (LaunchSampleChained) is -1 - its row in the step before, whose
  // draws prev_argmax_dev holds.
  int32_t* meta_dev_buf[2] = {nullptr, nullptr};
  int32_t* meta_dev = nullptr;
  size_t meta_cap = 0;           // int32 elements
  int ms = 0;                    // the stride S of the step being enqueued
  float* logits_host = nullptr;  // pinned, R * n_vocab

  // KV cache.
  uint16_t* kc = nullptr;
  uint16_t* vc = nullptr;
  int block_size = 0, num_blocks = 0;
  int64_t kv_bytes = 0;

  // Graphs by decode batch size.
  std::map<int, cudaGraphExec_t> graphs;
  float theta_scale = 1.0f;
  // The first cuBLAS failure of the step being enqueued (reported when the step ends).
  cublasStatus_t gemm_status = CUBLAS_STATUS_SUCCESS;

  ~Impl() {
    ClearGraphs();
    if (kc) cudaFree(kc);
    if (vc) cudaFree(vc);
    if (logits_host) cudaFreeHost(logits_host);
    for (int b = 0; b < 2; ++b) {
      if (meta_dev_buf[b]) cudaFree(meta_dev_buf[b]);
      if (uploaded[b]) cudaEventDestroy(uploaded[b]);
      if (computed[b]) cudaEventDestroy(computed[b]);
      if (meta_host_buf[b]) cudaFreeHost(meta_host_buf[b]);
      if (argmax_host_buf[b]) cudaFreeHost(argmax_host_buf[b]);
      if (draws_host_buf[b]) cudaFreeHost(draws_host_buf[b]);
      if (lps_host_buf[b]) cudaFreeHost(lps_host_buf[b]);
      if (step_done[b]) cudaEventDestroy(step_done[b]);
    }
    if (cublas) cublasDestroy(cublas);
    if (cublas_ws) cudaFree(cublas_ws);
    if (copy && copy != stream) cudaStreamDestroy(copy);
    if (stream) cudaStreamDestroy(stream);
  }

  void ClearGraphs() {
    for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
    graphs.clear();
  }

  Status Init(std::shared_ptr<const GgufFile> f, const CudaBackendOptions& o);
  Status UploadWeights();
  Status PlanScratch();
  Status EnsureMeta(size_t elems);
  // The 64-bit words of a token mask over the vocabulary (DrawParams::mask).
  size_t MaskWords() const { return (static_cast<size_t>(hp.n_vocab) + 63) / 64; }
  // What a step returns: every logits row, each row's argmax, or each row's draw (draws[r]).
  enum class Out { kLogits, kArgmax, kSample };
  // Enqueues a step. kLogits: also waits for it and copies every logits row into *logits (the
  // passes share one pinned buffer). kArgmax / kSample: returns once it is enqueued, its ids
  // in argmax_dev and on their way into argmax_host; *rows gets their number, for Collect.
  // chain: LaunchSampleChained's (empty: none), already checked. *slot_out: the step's slot.
  Status Enqueue(std::span<const SequenceBatch> seqs, Out out, std::span<const DrawParams> draws,
                 std::span<const int32_t> chain, std::vector<float>* logits, size_t* rows,
                 int* slot_out);
  Status EnqueueStep(std::span<const SequenceBatch> seqs, Out out,
                     std::span<const DrawParams> draws, std::span<const int32_t> chain,
                     std::vector<float>* logits, size_t* rows);
  // Waits for the step enqueued in `slot` and reads its rows' ids.
  Status Collect(int slot, size_t rows, std::vector<int32_t>* ids);
  // ForwardBatchSampleMixed's rows whose logits go back to the host (ascending), and where
  // (null: a step without). Set around its Enqueue; EnqueueStep checks them.
  std::span<const int32_t> host_rows;
  std::vector<float>* host_logits = nullptr;
  // Enqueues the copy of the step's ids (and its logprobs' reports) into the slot's pinned
  // buffers.
  Status CopyIdsBack(size_t rows);
  // The host rows among the logits rows [r0, r0 + nr) of the pass just enqueued, copied through
  // the pinned buffer into *host_logits (waits for the stream).
  Status CopyHostRows(int r0, int nr);
  // The steps LaunchSample / LaunchSampleChained enqueued and FinishSample has not collected,
  // earliest first: their slots and rows.
  struct LaunchedStep {
    int slot = 0;
    size_t rows = 0;
  };
  LaunchedStep launched[2];
  int num_launched = 0;
  // EnqueueStep's copy of a chained batch for validation (kept: no allocation a step).
  std::vector<SequenceBatch> chain_check_seqs;
  std::vector<int32_t> chain_check_tokens;
  bool UseGemm(int n) const { return opt.gemm_min_tokens > 0 && n >= opt.gemm_min_tokens; }
  // Whether a matrix-vector product of w at n tokens computes its own activations (MatVecFrom).
  bool FuseActivations(const DevMatrix& w, int n) const {
    return opt.fused_activations && cuda::MatVecFromApplies(w, n);
  }
  int from_blocks = 0;   // MatVecFrom's grid cap: 8 x the multiprocessor count
  int last_graph_kernels = 0;
  int last_graph_programmatic_edges = 0;
  void Products(const float* x_in, int n,
                std::initializer_list<std::pair<const DevMatrix*, cuda::MatOut>> ws);
  void Gemm(const uint16_t* x16_in, int n, const DevMatrix& w, const cuda::MatOut& out);
  void Layers(int n, int n_dec, int n_tiles, bool one_token_each);
  void Output(int row0, int rows, Out out);
};

namespace {

// Validates a matrix as LlamaModel::Load does (ReadWeightMatrix), then what the CUDA kernels need.
StatusOr<HostTensor> FindMatrix(const GgufFile& f, const std::string& name, int64_t cols,
                                int64_t rows) {
  KINFER_RETURN_IF_ERROR(ReadWeightMatrix(f, name, cols, rows).status());
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t->layout != 0) {
    return InvalidArgument("tensor '" + name + "' was regrouped for the CPU kernels; the CUDA backend "
                           "reads the file's own layout (open the file mapped)");
  }
  if (!cuda::CudaMatMulSupports(t->type)) {
    return Unimplemented("tensor '" + name + "' has type " + std::string(GgmlTypeName(t->type)) +
                         ", which the CUDA backend cannot read");
  }
  if (cols % 32 != 0) {
    return InvalidArgument("tensor '" + name + "': row width is not a multiple of 32");
  }
  return HostTensor{t, rows, cols};
}

}  // namespace

Status CudaBackend::Impl::Init(std::shared_ptr<const GgufFile> f, const CudaBackendOptions& o) {
  file = std::move(f);
  opt = o;
  opt.gemm_min_tokens = EnvInt("KINFER_CUDA_GEMM_MIN_TOKENS", opt.gemm_min_tokens);
  opt.cuda_graphs = opt.cuda_graphs && EnvInt("KINFER_CUDA_GRAPHS", 1) != 0;
  opt.tensor_core_attention = EnvInt("KINFER_CUDA_TC_ATTENTION", opt.tensor_core_attention ? 1 : 0) != 0;
  opt.fused_activations = opt.fused_activations && EnvInt("KINFER_CUDA_FUSED_ACTIVATIONS", 1) != 0;
  opt.programmatic_launch = EnvInt("KINFER_CUDA_PDL", opt.programmatic_launch ? 1 : 0) != 0;
  opt.copy_stream = opt.copy_stream && EnvInt("KINFER_CUDA_COPY_STREAM", 1) != 0;
  opt.batch_invariant = EnvInt("KINFER_CUDA_BATCH_INVARIANT", opt.batch_invariant ? 1 : 0) != 0;
  if (opt.batch_invariant) {  // the kernels whose bits depend only on the token (cuda_backend.h)
    opt.gemm_min_tokens = 0;
    opt.prefill_min_tokens = std::numeric_limits<int>::max();
  }
  if (const char* e = std::getenv("KINFER_CUDA_DECODE_ATTENTION");
      e && std::string(e) == "per_head") {
    opt.shared_kv_decode = false;
  }
  KINFER_RETURN_IF_ERROR(CudaDeviceUsable(opt.device));
  KINFER_ASSIGN_OR_RETURN(hp, ReadLlamaHParams(*file));
  if (hp.head_dim % 32 != 0 || hp.head_dim > 256) {
    return Unimplemented("the CUDA backend needs head_dim a multiple of 32 up to 256, got " +
                         std::to_string(hp.head_dim));
  }
  if (hp.rope_dim % 2 != 0) return Unimplemented("odd rope dimension");
  KINFER_CUDA_RETURN(cudaSetDevice(opt.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  KINFER_CUDA_RETURN(cudaGetDeviceProperties(&prop, opt.device), "cudaGetDeviceProperties");
  info.name = prop.name;
  info.ordinal = opt.device;
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  from_blocks = 8 * info.sm_count;
  info.l2_bytes = prop.l2CacheSize;
  info.smem_per_block_optin = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  info.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, opt.device);
  info.mem_clock_khz = clock_khz;
  cudaDeviceGetAttribute(&info.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, opt.device);
  size_t free_b = 0, total_b = 0;
  KINFER_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  info.free_bytes_at_start = static_cast<int64_t>(free_b);
  KINFER_CUDA_RETURN(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  copy = stream;
  if (opt.copy_stream) {
    KINFER_CUDA_RETURN(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) {
    return FailedPrecondition("no CUDA device: cublasCreate failed");
  }
  if (cublasSetStream(cublas, stream) != CUBLAS_STATUS_SUCCESS) {
    return Internal("cublasSetStream failed");
  }
  // An explicit workspace, so that GEMMs inside captured graphs allocate nothing.
  const size_t ws_bytes = 32u << 20;
  KINFER_CUDA_RETURN(cudaMalloc(&cublas_ws, ws_bytes), "cuBLAS workspace");
  if (cublasSetWorkspace(cublas, cublas_ws, ws_bytes) != CUBLAS_STATUS_SUCCESS) {
    return Internal("cublasSetWorkspace failed");
  }
  theta_scale = std::pow(hp.rope_freq_base, -2.0f / static_cast<float>(hp.rope_dim));
  KINFER_RETURN_IF_ERROR(UploadWeights());
  KINFER_RETURN_IF_ERROR(PlanScratch());
  return Status::Ok();
}

Status CudaBackend::Impl::UploadWeights() {
  const GgufFile& f = *file;
  const int64_t d = hp.n_embd, dq = static_cast<int64_t>(hp.n_head) * hp.head_dim,
                dkv = hp.n_embd_kv(), ff = hp.n_ff, nv = hp.n_vocab;
  struct Pending {
    HostTensor t;
    DevMatrix* dst;
  };
  // Matrices uploaded back to back (a group), optionally viewed as one fused matrix.
  struct Group {
    std::vector<Pending> mats;
    DevMatrix* fused = nullptr;
  };
  std::vector<Group> groups;
  struct PendingVec {
    std::vector<float> v;
    float** dst;
  };
  std::vector<PendingVec> vecs;
  layers.resize(hp.n_layer);

  KINFER_ASSIGN_OR_RETURN(HostTensor embd, FindMatrix(f, "token_embd.weight", d, nv));
  groups.push_back({{{embd, &tok_embd}}, nullptr});
  const bool tied = f.FindTensor("output.weight") == nullptr;
  if (!tied) {
    KINFER_ASSIGN_OR_RETURN(HostTensor out, FindMatrix(f, "output.weight", d, nv));
    groups.push_back({{{out, &output}}, nullptr});
  }
  KINFER_ASSIGN_OR_RETURN(std::vector<float> onorm, ReadNormVector(f, "output_norm.weight", d));
  vecs.push_back({std::move(onorm), &output_norm});
  for (int l = 0; l < hp.n_layer; ++l) {
    Layer& L = layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    KINFER_ASSIGN_OR_RETURN(std::vector<float> an, ReadNormVector(f, p + "attn_norm.weight", d));
    vecs.push_back({std::move(an), &L.attn_norm});
    KINFER_ASSIGN_OR_RETURN(std::vector<float> fn, ReadNormVector(f, p + "ffn_norm.weight", d));
    vecs.push_back({std::move(fn), &L.ffn_norm});
    auto get = [&](const char* name, int64_t cols, int64_t rows) {
      return FindMatrix(f, p + name, cols, rows);
    };
    KINFER_ASSIGN_OR_RETURN(HostTensor tq, get("attn_q.weight", d, dq));
    KINFER_ASSIGN_OR_RETURN(HostTensor tk, get("attn_k.weight", d, dkv));
    KINFER_ASSIGN_OR_RETURN(HostTensor tv, get("attn_v.weight", d, dkv));
    KINFER_ASSIGN_OR_RETURN(HostTensor to, get("attn_output.weight", dq, d));
    KINFER_ASSIGN_OR_RETURN(HostTensor tg, get("ffn_gate.weight", d, ff));
    KINFER_ASSIGN_OR_RETURN(HostTensor tu, get("ffn_up.weight", d, ff));
    KINFER_ASSIGN_OR_RETURN(HostTensor td, get("ffn_down.weight", ff, d));
    const bool qkv_one_type = tq.info->type == tk.info->type && tk.info->type == tv.info->type;
    groups.push_back({{{tq, &L.wq}, {tk, &L.wk}, {tv, &L.wv}}, qkv_one_type ? &L.wqkv : nullptr});
    groups.push_back({{{to, &L.wo}}, nullptr});
    groups.push_back({{{tg, &L.w_gate}, {tu, &L.w_up}}, tg.info->type == tu.info->type ? &L.w_gate_up : nullptr});
    groups.push_back({{{td, &L.w_down}}, nullptr});
  }
  std::vector<Pending> mats;
  size_t total = 0, f16_total = 0, largest = 0;
  layer_q_bytes = layer_f16_bytes = output_q_bytes = output_f16_bytes = 0;
  // A fused group's matrices are one matrix, back to back; those of an unfused group (types
  // differ) each start 256-byte aligned, as the kernels' wide loads need whatever size the matrix
  // before has (a Q8_0 matrix of an odd number of rows ends 2 bytes off a 4-byte boundary).
  auto stride = [](const Group& g, const Pending& m) {
    return g.fused ? static_cast<size_t>(m.t.info->size_bytes) : Align256(m.t.info->size_bytes);
  };
  // An untied model's token embedding is only looked up (DequantizeRows reads its quantized
  // rows): no product reads it, so it gets no FP16 copy (1 GB saved for Llama-3-8B).
  auto needs_f16 = [&](const Group& g) { return tied || g.mats[0].dst != &tok_embd; };
  for (const Group& g : groups) {
    size_t bytes = 0, group_elems = 0;
    for (const Pending& m : g.mats) {
      bytes += stride(g, m);
      const size_t e = static_cast<size_t>(m.t.rows * m.t.cols);
      const size_t q = m.t.info->size_bytes;
      group_elems += e;
      if (needs_f16(g)) largest = std::max(largest, e);
      if (m.dst == &output || (m.dst == &tok_embd && tied)) {
        output_q_bytes += q;
        output_f16_bytes += e * 2;
      } else if (m.dst != &tok_embd) {
        layer_q_bytes += q;
        layer_f16_bytes += e * 2;
      }
      mats.push_back(m);
    }
    total += Align256(bytes);
    if (needs_f16(g)) f16_total += Align256(group_elems * 2);
  }
  weight_bytes_per_token = layer_q_bytes + output_q_bytes;
  for (const PendingVec& v : vecs) total += Align256(v.v.size() * sizeof(float));
  KINFER_RETURN_IF_ERROR(weights.Allocate(total, "weights"));
  for (const Group& g : groups) {
    size_t bytes = 0;
    for (const Pending& m : g.mats) bytes += stride(g, m);
    uint8_t* p = weights.Take<uint8_t>(bytes);
    uint8_t* at = p;
    int64_t rows = 0;
    for (const Pending& m : g.mats) {
      KINFER_CUDA_RETURN(cudaMemcpy(at, m.t.info->data, m.t.info->size_bytes, cudaMemcpyHostToDevice),
                         "weight upload");
      *m.dst = DevMatrix{m.t.info->type, at, m.t.rows, m.t.cols,
                         static_cast<size_t>(m.t.info->size_bytes / m.t.rows), nullptr};
      at += stride(g, m);
      rows += m.t.rows;
    }
    if (g.fused) {
      const DevMatrix& first = *g.mats[0].dst;
      *g.fused = DevMatrix{first.type, p, rows, first.cols, first.row_bytes, nullptr};
    }
  }
  for (const PendingVec& v : vecs) {
    float* p = weights.Take<float>(v.v.size());
    KINFER_CUDA_RETURN(cudaMemcpy(p, v.v.data(), v.v.size() * sizeof(float), cudaMemcpyHostToDevice),
                       "norm upload");
    *v.dst = p;
  }
  if (tied) output = tok_embd;
  // cudaMemcpy from pageable memory may return before its DMA lands, and it runs on the legacy
  // default stream, which does not order with our non-blocking stream: wait for it before any
  // kernel on `stream` reads the weights.
  KINFER_CUDA_RETURN(cudaDeviceSynchronize(), "weight upload");
  // The launches below are checked with cudaGetLastError: an earlier call's error, handled where
  // it happened, must not read as theirs.
  (void)cudaGetLastError();

  // FP16 copies for the cuBLAS path when they take at most a quarter of what is free.
  size_t free_b = 0, total_b = 0;
  KINFER_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  const bool copies_fit = opt.gemm_min_tokens > 0 && opt.fp16_weight_copies && f16_total <= free_b / 4;
  if (copies_fit) {
    KINFER_RETURN_IF_ERROR(copies.Allocate(f16_total, "fp16 weight copies"));
    for (const Group& g : groups) {
      if (!needs_f16(g)) continue;
      size_t group_elems = 0;
      for (const Pending& m : g.mats) group_elems += static_cast<size_t>(m.t.rows * m.t.cols);
      uint16_t* p = copies.Take<uint16_t>(group_elems);
      if (!p) return Internal("fp16 weight copy plan too small (a bug)");
      // A group's copies back to back too: its fused matrix (Q|K|V, gate|up) is one GEMM.
      if (g.fused) g.fused->f16 = p;
      for (const Pending& m : g.mats) {
        cuda::DequantizeToF16(*m.dst, p, stream);
        m.dst->f16 = p;
        p += static_cast<size_t>(m.t.rows * m.t.cols);
      }
    }
    if (tied) output.f16 = tok_embd.f16;
    fp16_bytes = static_cast<int64_t>(f16_total);
  } else if (opt.gemm_min_tokens > 0) {
    // Take rounds up to 256 bytes: allocate the rounded size, or Take returns null.
    KINFER_RETURN_IF_ERROR(copies.Allocate(Align256(largest * 2), "fp16 matrix scratch"));
    w16_scratch = copies.Take<uint16_t>(largest);
    if (!w16_scratch) return Internal("fp16 matrix scratch plan too small (a bug)");
    fp16_bytes = static_cast<int64_t>(largest * 2);
  }
  KINFER_CUDA_RETURN(cudaStreamSynchronize(stream), "weight dequantization");
  // A launch refused (no kernel image for this device, say) is no stream error: the sync above
  // passes, and the first step would fail instead, after --device auto had chosen this backend.
  KINFER_CUDA_RETURN(cudaGetLastError(), "weight dequantization kernels");
  return Status::Ok();
}

Status CudaBackend::Impl::PlanScratch() {
  T = std::max(1, opt.max_batch_tokens);
  R = std::max(1, std::min(opt.max_logits_rows, T));
  const size_t d = hp.n_embd, dq = static_cast<size_t>(hp.n_head) * hp.head_dim,
               dkv = hp.n_embd_kv(), ff = hp.n_ff, nv = hp.n_vocab;
  const size_t maxc = std::max({d, dq, ff});
  const size_t t = T;
  const size_t floats = t * d + t * std::max(d, dq) + t * dq + 2 * t * dkv + t * dq + 2 * t * ff +
                        t * std::max(d, dq) + R * d + R * nv + t * maxc + t * maxc / 16;
  split_blocks = opt.batch_invariant ? cuda::InvariantSplitBlocks(info.sm_count)
                                     : cuda::DecodeSplitBlocks(info.sm_count);
  const size_t split_floats = static_cast<size_t>(split_blocks) * (hp.n_head / std::max(1, hp.n_head_kv)) *
                              (hp.head_dim + 2);
  const size_t bytes = Align256(floats * 4) + 32 * 256 + t * maxc /* qs */ +
                       t * maxc * 2 /* x16 */ + 3 * Align256(t * 4) + 2 * Align256(t * sizeof(cuda::DeviceDraw)) +
                       2 * Align256(t * sizeof(cuda::DeviceLogprobs)) +
                       Align256(split_floats * 4) + Align256(split_blocks * 4) + 3 * 256;
  KINFER_RETURN_IF_ERROR(scratch.Allocate(bytes, "activation scratch"));
  x = scratch.Take<float>(t * d);
  xn = scratch.Take<float>(t * std::max(d, dq));
  // q, k and v as one block: the fused Q|K|V GEMM writes [t][dq + 2 dkv] across the three.
  q = scratch.Take<float>(t * (dq + 2 * dkv));
  k = q ? q + t * dq : nullptr;
  v = q ? k + t * dkv : nullptr;
  attn = scratch.Take<float>(t * dq);
  // gate and up as one block: the fused gate|up GEMM writes [t][2 ff] across both.
  gate = scratch.Take<float>(2 * t * ff);
  up = gate ? gate + t * ff : nullptr;
  tmp = scratch.Take<float>(t * std::max(d, dq));
  xo = scratch.Take<float>(R * d);
  logits = scratch.Take<float>(R * nv);
  act.xr = scratch.Take<float>(t * maxc);
  act.d = scratch.Take<float>(t * maxc / 32);
  act.s = scratch.Take<float>(t * maxc / 32);
  act.qs = scratch.Take<int8_t>(t * maxc);
  x16 = scratch.Take<uint16_t>(t * maxc);
  input_ids_dev = scratch.Take<int32_t>(t);
  bool taken = input_ids_dev != nullptr;
  for (int b = 0; b < 2; ++b) {
    argmax_dev_buf[b] = scratch.Take<int32_t>(t);
    draws_dev_buf[b] = scratch.Take<cuda::DeviceDraw>(t);
    lps_dev_buf[b] = scratch.Take<cuda::DeviceLogprobs>(t);
    taken = taken && argmax_dev_buf[b] && draws_dev_buf[b] && lps_dev_buf[b];
  }
  split_partial = scratch.Take<float>(split_floats);
  split_counters = scratch.Take<int32_t>(split_blocks);
  if (!taken || !split_partial || !split_counters) {
    return Internal("scratch plan too small (a bug)");
  }
  KINFER_CUDA_RETURN(cudaMemsetAsync(split_counters, 0, split_blocks * sizeof(int32_t), stream),
                     "split counters");
  KINFER_CUDA_RETURN(cudaStreamSynchronize(stream), "split counters");
  for (int b = 0; b < 2; ++b) {
    KINFER_CUDA_RETURN(cudaMallocHost(&draws_host_buf[b], t * sizeof(cuda::DeviceDraw)), "pinned draws");
    KINFER_CUDA_RETURN(cudaMallocHost(&argmax_host_buf[b], T * sizeof(int32_t)), "pinned ids");
    KINFER_CUDA_RETURN(cudaMallocHost(&lps_host_buf[b], t * sizeof(cuda::DeviceLogprobs)), "pinned logprobs");
    KINFER_CUDA_RETURN(cudaEventCreateWithFlags(&step_done[b], cudaEventDisableTiming), "step events");
    KINFER_CUDA_RETURN(cudaEventCreateWithFlags(&uploaded[b], cudaEventDisableTiming), "step events");
    KINFER_CUDA_RETURN(cudaEventCreateWithFlags(&computed[b], cudaEventDisableTiming), "step events");
  }
  KINFER_CUDA_RETURN(cudaMallocHost(&logits_host, R * nv * sizeof(float)), "pinned logits");
  return EnsureMeta(static_cast<size_t>(10) * T);
}

Status CudaBackend::Impl::EnsureMeta(size_t elems) {
  if (elems <= meta_cap) return Status::Ok();
  elems = std::max(elems, meta_cap * 2);
  // A step still on the streams (a chained step's predecessor) reads the old buffers.
  KINFER_CUDA_RETURN(SyncStreams(), "step metadata");
  ClearGraphs();  // they hold the old buffers' addresses
  for (int b = 0; b < 2; ++b) {
    if (meta_dev_buf[b]) cudaFree(meta_dev_buf[b]);
    if (meta_host_buf[b]) cudaFreeHost(meta_host_buf[b]);
    meta_dev_buf[b] = nullptr;
    meta_host_buf[b] = nullptr;
  }
  meta_cap = 0;
  UseSlot(slot);
  for (int b = 0; b < 2; ++b) {
    KINFER_CUDA_RETURN(cudaMalloc(&meta_dev_buf[b], elems * sizeof(int32_t)), "step metadata");
    KINFER_CUDA_RETURN(cudaMallocHost(&meta_host_buf[b], elems * sizeof(int32_t)), "pinned step metadata");
  }
  meta_cap = elems;
  UseSlot(slot);
  return Status::Ok();
}

// Matrix-vector products of several matrices with the same input (fewer than gemm_min_tokens
// rows): the activations are quantized (or rounded) once per format. The cuBLAS path takes its
// FP16 activations from the op that makes them (RmsNormF16, SwiGluF16, AttnParams::out16) and
// calls Gemm.
void CudaBackend::Impl::Products(const float* x_in, int n,
                                 std::initializer_list<std::pair<const DevMatrix*, cuda::MatOut>> ws) {
  assert(!UseGemm(n));
  bool have_fmt = false;
  cuda::ActFormat fmt = cuda::ActFormat::kF32;
  for (const auto& [w, out] : ws) {
    const cuda::ActFormat f = cuda::ActFormatFor(w->type);
    if (!have_fmt || f != fmt) {
      cuda::QuantizeActivations(f, x_in, n, w->cols, act, stream);
      fmt = f;
      have_fmt = true;
    }
    cuda::MatVec(*w, act, n, out, stream);
  }
}

// out (one part; accumulate: beta = 1) = x16_in [n][w.cols] (FP16) x W^T on cuBLAS, from the
// matrix's FP16 copy or, without copies, the scratch it is dequantized into first.
void CudaBackend::Impl::Gemm(const uint16_t* x16_in, int n, const DevMatrix& w, const cuda::MatOut& out) {
  const uint16_t* w16 = w.f16;
  if (!w16) {
    cuda::DequantizeToF16(w, w16_scratch, stream);
    w16 = w16_scratch;
  }
  const float alpha = 1.0f, beta = out.accumulate ? 1.0f : 0.0f;
  // Row-major W [rows][cols] is column-major [cols x rows]: Y^T = W * X^T.
  const cublasStatus_t st = cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), n,
               static_cast<int>(w.cols), &alpha, w16, CUDA_R_16F, static_cast<int>(w.cols),
               x16_in, CUDA_R_16F, static_cast<int>(w.cols), &beta, out.y[0], CUDA_R_32F,
               static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS && gemm_status == CUBLAS_STATUS_SUCCESS) gemm_status = st;
}

// The layers over the step's n tokens; metadata already on the device.
// one_token_each: every sequence has one token in the step (none reads another's new K/V).
void CudaBackend::Impl::Layers(int n, int n_dec, int n_tiles, bool one_token_each) {
  const int d = hp.n_embd, dkv = hp.n_embd_kv(), dq = hp.n_head * hp.head_dim;
  const int32_t* tokens = meta_dev;
  const int32_t* pos = meta_dev + ms;
  const int32_t* slots = meta_dev + 3 * ms;
  cuda::DequantizeRows(tok_embd.type, tok_embd.data, tok_embd.row_bytes, d, tokens, n, x, stream,
                       prev_argmax_dev, input_ids_dev);
  cuda::AttnParams ap;
  ap.q = q;
  ap.out = attn;
  ap.tok_seq = meta_dev + 2 * ms;
  ap.tok_pos = pos;
  ap.seq_table_off = meta_dev + 5 * ms;
  ap.tables = meta_dev + 9 * ms;
  ap.tok_index = meta_dev + 8 * ms;
  ap.n_head = hp.n_head;
  ap.n_head_kv = hp.n_head_kv;
  ap.head_dim = hp.head_dim;
  ap.block_size = block_size;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
  ap.split_partial = split_partial;
  ap.split_counters = split_counters;
  ap.max_split_blocks = split_blocks;
  // Batch invariance: each token's positions split where its own count says.
  ap.invariant_max_pos = opt.batch_invariant ? step_max_pos : 0;
  ap.sm_count = info.sm_count;
  ap.per_head_decode = !opt.shared_kv_decode;
  // A decode step of one token per sequence: the decode kernel applies RoPE and writes the
  // cache itself (one launch fewer a layer).
  const bool shared_kv = cuda::SharedKvDecodeApplies(ap);
  ap.rope_on = one_token_each && n_dec == n && shared_kv;
  ap.slot_rows = slots;
  ap.rope_dim = hp.rope_dim;
  ap.theta_scale = theta_scale;
  ap.freq_scale = hp.rope_freq_scale;
  const size_t layer_elems = static_cast<size_t>(num_blocks) * block_size * dkv;
  using cuda::PlainOut;
  const bool gemm = UseGemm(n);
  // On the cuBLAS path the attention kernels write the output product's FP16 activations.
  ap.out16 = gemm ? x16 : nullptr;
  for (int l = 0; l < hp.n_layer; ++l) {
    const Layer& L = layers[l];
    // On cuBLAS with back-to-back FP16 copies, Q|K|V is one GEMM: its q, k and v rows then lie
    // in token rows of dq + 2 dkv floats, which RoPE and the attention read as they are.
    const bool fused_qkv = gemm && L.wqkv.f16 != nullptr;
    const int64_t qkv_row = fused_qkv ? dq + 2 * dkv : 0;
    float* const kq = fused_qkv ? q + dq : k;
    float* const vq = fused_qkv ? q + dq + dkv : v;
    // Likewise gate|up: token t's gate row at gate + 2 ff t, its up row right after.
    const bool fused_gate_up = gemm && L.w_gate_up.f16 != nullptr;
    const int64_t gate_up_row = fused_gate_up ? 2 * hp.n_ff : hp.n_ff;
    float* const upq = fused_gate_up ? gate + hp.n_ff : up;
    ap.qkv_row = qkv_row;
    ap.k_new = kq;
    ap.v_new = vq;
    // Attention block. The matrix-vector path: RmsNorm fused into the quantizer, one Q|K|V
    // product, RoPE fused with the cache write, the residual add fused into the output product.
    if (!gemm && L.wqkv.data) {
      cuda::MatOut o;
      o.y[0] = q;
      o.y[1] = k;
      o.y[2] = v;
      o.begin[1] = dq;
      o.begin[2] = dq + dkv;
      o.parts = 3;
      if (FuseActivations(L.wqkv, n)) {
        cuda::MatVecFrom(L.wqkv, cuda::RmsNormSource(x, L.attn_norm, hp.rms_eps), n, o, from_blocks, stream);
      } else {
        cuda::RmsNormQuantize(cuda::ActFormatFor(L.wqkv.type), x, L.attn_norm, n, d, hp.rms_eps, act, stream);
        cuda::MatVec(L.wqkv, act, n, o, stream);
      }
    } else if (gemm) {
      // cuBLAS: RmsNorm writes the FP16 activations itself.
      cuda::RmsNormF16(x, L.attn_norm, n, d, hp.rms_eps, x16, stream);
      if (fused_qkv) {
        Gemm(x16, n, L.wqkv, PlainOut(q));  // token t's q|k|v row at q + t (dq + 2 dkv)
      } else {
        Gemm(x16, n, L.wq, PlainOut(q));
        Gemm(x16, n, L.wk, PlainOut(k));
        Gemm(x16, n, L.wv, PlainOut(v));
      }
    } else {
      cuda::RmsNorm(x, L.attn_norm, n, d, hp.rms_eps, xn, stream);
      Products(xn, n, {{&L.wq, PlainOut(q)}, {&L.wk, PlainOut(k)}, {&L.wv, PlainOut(v)}});
    }
    uint16_t* kl = kc + l * layer_elems;
    uint16_t* vl = vc + l * layer_elems;
    if (!ap.rope_on) {
      cuda::RopeWriteKv(q, kq, vq, pos, slots, n, hp.n_head, hp.n_head_kv, hp.head_dim, hp.rope_dim,
                        theta_scale, hp.rope_freq_scale, kl, vl, stream, qkv_row);
    }
    ap.k = kl;
    ap.v = vl;
    ap.k_cache = kl;
    ap.v_cache = vl;
    ap.n_tok = n_dec;
    // Every token through the decode kernel, on the matrix-vector path with 32-block activations:
    // the kernel quantizes its output for the output product itself (one launch fewer a layer).
    const cuda::ActFormat wo_fmt = cuda::ActFormatFor(L.wo.type);
    ap.q8_out_on = !gemm && n_dec == n && n_tiles == 0 &&
                   (wo_fmt == cuda::ActFormat::kQ8_0 || wo_fmt == cuda::ActFormat::kQ8_1) &&
                   shared_kv;
    ap.q8_out = act;
    cuda::AttentionDecode(ap, stream);
    cuda::AttentionPrefill(ap, meta_dev + 6 * ms, meta_dev + 7 * ms, n_tiles, opt.tensor_core_attention, stream);
    if (ap.q8_out_on) {
      cuda::MatVec(L.wo, act, n, PlainOut(x, true), stream);
    } else if (gemm) {
      Gemm(x16, n, L.wo, PlainOut(x, true));
    } else {
      Products(attn, n, {{&L.wo, PlainOut(x, true)}});
    }
    // Feed-forward block.
    if (!gemm && L.w_gate_up.data) {
      cuda::MatOut o;
      o.y[0] = gate;
      o.y[1] = up;
      o.begin[1] = hp.n_ff;
      o.parts = 2;
      if (FuseActivations(L.w_gate_up, n)) {
        cuda::MatVecFrom(L.w_gate_up, cuda::RmsNormSource(x, L.ffn_norm, hp.rms_eps), n, o, from_blocks, stream);
      } else {
        cuda::RmsNormQuantize(cuda::ActFormatFor(L.w_gate_up.type), x, L.ffn_norm, n, d, hp.rms_eps, act, stream);
        cuda::MatVec(L.w_gate_up, act, n, o, stream);
      }
    } else if (gemm) {
      cuda::RmsNormF16(x, L.ffn_norm, n, d, hp.rms_eps, x16, stream);
      if (fused_gate_up) {
        Gemm(x16, n, L.w_gate_up, PlainOut(gate));
      } else {
        Gemm(x16, n, L.w_gate, PlainOut(gate));
        Gemm(x16, n, L.w_up, PlainOut(up));
      }
    } else {
      cuda::RmsNorm(x, L.ffn_norm, n, d, hp.rms_eps, xn, stream);
      Products(xn, n, {{&L.w_gate, PlainOut(gate)}, {&L.w_up, PlainOut(up)}});
    }
    if (!gemm && FuseActivations(L.w_down, n)) {
      cuda::MatVecFrom(L.w_down, cuda::SwiGluSource(gate, up), n, PlainOut(x, true), from_blocks, stream);
    } else if (!gemm) {
      cuda::SwiGluQuantize(cuda::ActFormatFor(L.w_down.type), gate, up, n, hp.n_ff, act, stream);
      cuda::MatVec(L.w_down, act, n, PlainOut(x, true), stream);
    } else {
      cuda::SwiGluF16(gate, upq, n, hp.n_ff, gate_up_row, x16, stream);
      Gemm(x16, n, L.w_down, PlainOut(x, true));
    }
  }
}

// Weights the products of a step read: the layers' at `tokens` rows, the output matrix once per
// pass of at most R logits rows. Quantized on the matrix-vector path; on cuBLAS's, the FP16
// copies, or without them the quantized matrix read and its FP16 scratch written and read.
size_t CudaBackend::Impl::WeightBytesRead(int tokens, int logits_rows) const {
  auto read = [&](size_t q, size_t f16, int n) -> size_t {
    if (!UseGemm(n)) return q;
    return w16_scratch ? q + 2 * f16 : f16;  // (the scratch exists only without copies)
  };
  size_t bytes = tokens > 0 ? read(layer_q_bytes, layer_f16_bytes, tokens) : 0;
  for (int row0 = 0; row0 < logits_rows; row0 += R) {
    bytes += read(output_q_bytes, output_f16_bytes, std::min(R, logits_rows - row0));
  }
  return bytes;
}

// Logits rows [row0, row0 + rows) of the step (indices into meta's logit_rows), into the pinned
// buffer (or their argmax, or their draws).
void CudaBackend::Impl::Output(int row0, int rows, Out out) {
  const int d = hp.n_embd;
  if (!UseGemm(rows) && FuseActivations(output, rows)) {
    // The gather, the final norm and the quantizer inside the output product.
    cuda::MatVecFrom(output, cuda::RmsNormSource(x, output_norm, hp.rms_eps, meta_dev + 4 * ms + row0),
                     rows, cuda::PlainOut(logits), from_blocks, stream);
  } else {
    cuda::GatherRows(x, meta_dev + 4 * ms + row0, rows, d, xo, stream);
    if (UseGemm(rows)) {
      cuda::RmsNormF16(xo, output_norm, rows, d, hp.rms_eps, x16, stream);
      Gemm(x16, rows, output, cuda::PlainOut(logits));
    } else {
      cuda::RmsNorm(xo, output_norm, rows, d, hp.rms_eps, xo, stream);
      Products(xo, rows, {{&output, cuda::PlainOut(logits)}});
    }
  }
  if (out != Out::kLogits) {
    // Every pass's ids stay on the device (a chained step's embedding reads them); the step
    // copies them back at its end, outside any graph (the pinned buffer alternates).
    if (out == Out::kArgmax) {
      cuda::ArgmaxRows(logits, rows, hp.n_vocab, argmax_dev + row0, stream);
    } else {
      if (step_adjusted) {
        cuda::AdjustLogitsRows(logits, rows, hp.n_vocab, draws_dev + row0, meta_dev, input_ids_dev,
                               stream);
      }
      cuda::SampleRows(logits, rows, hp.n_vocab, draws_dev + row0, argmax_dev + row0, stream);
      if (step_logprobs) {
        cuda::LogprobRows(logits, rows, hp.n_vocab, draws_dev + row0, argmax_dev + row0,
                          lps_dev + row0, stream);
      }
    }
  } else {
    cudaMemcpyAsync(logits_host, logits, static_cast<size_t>(rows) * hp.n_vocab * sizeof(float),
                    cudaMemcpyDeviceToHost, stream);
  }
}

// Kernel nodes of a captured graph (cuBLAS's included).
static int CountKernelNodes(cudaGraph_t graph) {
  size_t n = 0;
  if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess) return 0;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n == 0 || cudaGraphGetNodes(graph, nodes.data(), &n) != cudaSuccess) return 0;
  int kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) ++kernels;
  }
  return kernels;
}

// Whether a kernel node runs one of the backend's own kernels, which all begin with
// AwaitPrecedingKernels (cuda_common.cuh) and so may start before the node they depend on ends.
// They live in namespace kinfer::cuda, so their (mangled) names hold "kinfer"; cuBLAS's never do.
// (The CUDA emulation names each kernel it runs "kinfer_cudaemu::<kernel>".)
static bool AwaitsPrecedingKernels(cudaGraphNode_t node) {
  cudaGraphNodeType type;
  if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) return false;
  cudaKernelNodeParams params{};
  const char* name = nullptr;
  if (cudaGraphKernelNodeGetParams(node, &params) != cudaSuccess ||
      cudaFuncGetName(&name, params.func) != cudaSuccess || name == nullptr) {
    cudaGetLastError();  // a library's kernel may have no name here: not an error of the step's
    return false;
  }
  return std::strstr(name, "kinfer") != nullptr;
}

// Makes every edge from a kernel node into one of the backend's own kernels programmatic (the
// downstream kernel may launch once every block of the upstream one has started it, and waits
// on the device for the upstream one's completion). *count: the edges changed.
static cudaError_t MakeKernelEdgesProgrammatic(cudaGraph_t graph, int* count) {
  *count = 0;
  size_t n = 0;
  cudaError_t e = cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n);
  if (e != cudaSuccess || n == 0) return e;
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  e = cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n);
  for (size_t i = 0; e == cudaSuccess && i < n; ++i) {
    cudaGraphNodeType from_type;
    if (data[i].type != cudaGraphDependencyTypeDefault ||
        cudaGraphNodeGetType(from[i], &from_type) != cudaSuccess ||
        from_type != cudaGraphNodeTypeKernel || !AwaitsPrecedingKernels(to[i])) {
      continue;
    }
    cudaGraphEdgeData pdl{};
    pdl.from_port = cudaGraphKernelNodePortProgrammatic;
    pdl.type = cudaGraphDependencyTypeProgrammatic;
    e = cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1);
    if (e == cudaSuccess) e = cudaGraphAddDependencies(graph, &from[i], &to[i], &pdl, 1);
    if (e == cudaSuccess) ++*count;
  }
  return e;
}

// Launch-configuration errors (not sticky) and cuBLAS failures of the work just enqueued.
static Status EnqueueErrors(cublasStatus_t* gemm_status) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return CudaError(e, "kernel launch");
  if (*gemm_status != CUBLAS_STATUS_SUCCESS) {
    const int code = static_cast<int>(*gemm_status);
    *gemm_status = CUBLAS_STATUS_SUCCESS;
    return Internal("cublasGemmEx failed with status " + std::to_string(code));
  }
  return Status::Ok();
}

Status CudaBackend::Impl::Enqueue(std::span<const SequenceBatch> seqs, Out out,
                                  std::span<const DrawParams> draws, std::span<const int32_t> chain,
                                  std::vector<float>* out_logits, size_t* rows_out, int* slot_out) {
  // The engine calls from its own thread, whose current device is 0 until it is set.
  KINFER_CUDA_RETURN(cudaSetDevice(opt.device), "cudaSetDevice");
  // The other slot's buffers: the step before (if still on the stream) keeps its own.
  const int before = slot;
  UseSlot(slot ^ 1);
  *slot_out = slot;
  Status st = EnqueueStep(seqs, out, draws, chain, out_logits, rows_out);
  if (st.ok() && out != Out::kLogits) {
    const cudaError_t e = cudaEventRecord(step_done[slot], copy);
    if (e != cudaSuccess) st = CudaError(e, "step event");
  }
  if (!st.ok()) {
    // Work enqueued before an error must land before the next step rewrites the pinned buffers;
    // and the slot stays the launched step's other one (a refused chained step leaves it).
    SyncStreams();
    UseSlot(before);
  }
  return st;
}

Status CudaBackend::Impl::EnqueueStep(std::span<const SequenceBatch> seqs, Out out,
                                      std::span<const DrawParams> draws,
                                      std::span<const int32_t> chain,
                                      std::vector<float>* out_logits, size_t* rows_out) {
  if (!kc) return FailedPrecondition("ForwardBatch before InitKvCache");
  if (seqs.empty()) return InvalidArgument("empty step");
  if (seqs.size() > static_cast<size_t>(T)) return InvalidArgument("more sequences than tokens allowed");
  // Validation: LlamaModel::ForwardBatch's rules and messages (a chained token, not known yet,
  // checked as token 0: the step before drew it from the vocabulary).
  size_t rows = 0, table_entries = 0, adjust_entries = 0, mask_ints = 0;
  step_adjusted = false;
  step_logprobs = false;
  std::vector<std::pair<size_t, DrawnLogprobs*>>& lps_out = lps_out_buf[slot];
  lps_out.clear();
  if (chain.empty()) {
    KINFER_RETURN_IF_ERROR(ValidateSequenceBatches(seqs, hp.n_vocab, block_size, num_blocks, T, &rows));
  } else {
    ModelBackend::WithChainedTokens(seqs, chain, [](int32_t) { return 0; }, &chain_check_seqs,
                                    &chain_check_tokens);
    KINFER_RETURN_IF_ERROR(
        ValidateSequenceBatches(chain_check_seqs, hp.n_vocab, block_size, num_blocks, T, &rows));
  }
  if (out == Out::kSample) {
    if (draws.size() != rows) {
      return InvalidArgument("the step has " + std::to_string(rows) + " logits rows but " +
                             std::to_string(draws.size()) + " draw settings");
    }
    bool greedy = true;
    for (size_t r = 0; r < rows; ++r) {
      const DrawParams& p = draws[r];
      greedy = greedy && !(p.temperature > 0.0f) && !p.adjusted() && !p.wants_logprobs();
      cuda::DeviceDraw& d = draws_host[r];
      d = cuda::DeviceDraw{};
      d.noise_key = p.noise_key;
      d.temperature = p.temperature;
      d.top_p = p.top_p;
      d.min_p = p.min_p;
      d.log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : 0.0f;
      d.top_k = p.top_k <= 0 || p.top_k >= hp.n_vocab ? 0 : p.top_k;
      if (p.wants_logprobs()) {
        step_logprobs = true;
        d.logprobs = std::min(p.logprobs, cuda::kMaxDeviceLogprobs);
        lps_out.emplace_back(r, p.logprobs_out);
      }
      if (p.adjusted()) {
        step_adjusted = true;
        d.adjust_begin = static_cast<int>(adjust_entries);  // (the metadata's base added below)
        d.adjust_n = static_cast<int>(p.adjust.size());
        d.repetition = p.repetition;
        d.frequency = p.frequency;
        d.presence = p.presence;
        adjust_entries += p.adjust.size();
      }
      if (p.masked()) {  // its words as int32 pairs, then its fallback ids
        step_adjusted = true;
        d.mask_begin = static_cast<int>(mask_ints);  // (the metadata's base added below)
        d.fallback_n = static_cast<int>(p.mask_fallback.size());
        mask_ints += 2 * MaskWords() + p.mask_fallback.size();
      }
    }
    // Greedy rows without entries take the argmax kernel, and its graphs.
    if (greedy) out = Out::kArgmax;
  }
  if (host_logits != nullptr) {
    KINFER_RETURN_IF_ERROR(CudaBackend::CheckMixedRows(rows, draws.size(), host_rows));
    host_logits->resize(host_rows.size() * static_cast<size_t>(hp.n_vocab));
  }
  size_t step_tokens = 0;
  step_max_pos = 0;
  for (const SequenceBatch& s : seqs) {
    table_entries += (s.pos0 + s.tokens.size() + block_size - 1) / block_size;
    step_tokens += s.tokens.size();
    step_max_pos = std::max(step_max_pos, s.pos0 + static_cast<int>(s.tokens.size()));
  }
  ms = static_cast<int>(step_tokens);  // (at most T: validated)
  const size_t S = step_tokens;
  const size_t adjust_base = 9 * S + table_entries;
  const size_t mask_base = adjust_base + cuda::kAdjustInts * adjust_entries;
  KINFER_RETURN_IF_ERROR(EnsureMeta(mask_base + mask_ints));

  // Pack the metadata.
  int32_t* m = meta_host;
  int g = 0, n_dec = 0, n_tiles = 0, nrows = 0, tab = 0;
  bool pure_decode = true;
  bool one_token_each = true;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SequenceBatch& s = seqs[i];
    const int n = static_cast<int>(s.tokens.size());
    const int nb = (s.pos0 + n + block_size - 1) / block_size;
    m[5 * S + i] = tab;
    for (int b = 0; b < nb; ++b) m[9 * S + tab + b] = s.blocks[b];
    tab += nb;
    const bool tiled = n >= opt.prefill_min_tokens && cuda::AttentionPrefillSupports(hp.head_dim);
    pure_decode = pure_decode && n == 1 && s.want_logits && s.num_logits == 1;
    one_token_each = one_token_each && n == 1;
    for (int t = 0; t < n; ++t) {
      const int p = s.pos0 + t;
      m[g + t] = s.tokens[t];
      if (t == n - 1 && !chain.empty() && chain[i] >= 0) m[g + t] = -1 - chain[i];
      m[S + g + t] = p;
      m[2 * S + g + t] = static_cast<int32_t>(i);
      m[3 * S + g + t] = s.blocks[p / block_size] * block_size + p % block_size;
      if (!tiled) m[8 * S + n_dec++] = g + t;
    }
    if (tiled) {
      const int tile = cuda::PrefillTileSize(opt.tensor_core_attention);
      for (int t0 = 0; t0 < n; t0 += tile) {
        m[6 * S + n_tiles] = g + t0;
        m[7 * S + n_tiles] = std::min(tile, n - t0);
        ++n_tiles;
      }
    }
    if (s.want_logits) {
      for (int t = n - s.num_logits; t < n; ++t) m[4 * S + nrows++] = g + t;
    }
    g += n;
  }
  // The draws' entries after the tables (the draws' own settings follow them up).
  if (step_adjusted) {
    for (size_t r = 0; r < rows; ++r) {
      const DrawParams& p = draws[r];
      if (!p.adjusted()) continue;
      cuda::DeviceDraw& d = draws_host[r];
      d.adjust_begin = static_cast<int>(adjust_base) + cuda::kAdjustInts * d.adjust_begin;
      d.input = p.count_input ? m[4 * S + r] : -1;
      int32_t* e = m + d.adjust_begin;
      for (const LogitAdjust& a : p.adjust) {
        *e++ = a.id;
        std::memcpy(e++, &a.bias, sizeof(float));
        *e++ = a.count;
      }
    }
  }
  // The masks after the entries: each row's words (ApplyTokenMask's: a bit per id, an id past
  // the given words clear), then its fallback ids.
  for (size_t r = 0; r < rows && mask_ints > 0; ++r) {
    const DrawParams& p = draws[r];
    if (!p.masked()) continue;
    cuda::DeviceDraw& d = draws_host[r];
    d.mask_begin += static_cast<int>(mask_base);
    int32_t* e = m + d.mask_begin;
    const size_t words = MaskWords(), given = std::min(words, p.mask.size());
    std::memcpy(e, p.mask.data(), given * sizeof(uint64_t));
    std::memset(e + 2 * given, 0, (words - given) * sizeof(uint64_t));
    d.fallback_begin = d.mask_begin + static_cast<int>(2 * words);
    std::copy(p.mask_fallback.begin(), p.mask_fallback.end(), m + d.fallback_begin);
  }
  const size_t meta_used = mask_base + mask_ints;
  // The upload goes on the copy stream, behind the ids' copy of the step that last used the
  // slot (so after its kernels), and the step's kernels wait for it.
  KINFER_CUDA_RETURN(cudaMemcpyAsync(meta_dev, meta_host, meta_used * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, copy),
                     "step metadata upload");
  if (out == Out::kSample) {
    KINFER_CUDA_RETURN(cudaMemcpyAsync(draws_dev, draws_host, rows * sizeof(cuda::DeviceDraw),
                                       cudaMemcpyHostToDevice, copy),
                       "draw settings upload");
  }
  if (two_streams()) {
    KINFER_CUDA_RETURN(cudaEventRecord(uploaded[slot], copy), "upload event");
    KINFER_CUDA_RETURN(cudaStreamWaitEvent(stream, uploaded[slot], 0), "upload wait");
  }

  if (out_logits) out_logits->resize(rows * static_cast<size_t>(hp.n_vocab));
  *rows_out = rows;
  const bool use_graph = opt.cuda_graphs && pure_decode && nrows <= R;
  if (use_graph) {
    // (Batch invariance: the decode attention's splits, set by the longest token, are in it.)
    const int splits = opt.batch_invariant ? cuda::InvariantSplits(step_max_pos) : 0;
    const int key = ((((g * 3 + static_cast<int>(out)) * 2 + (step_adjusted ? 1 : 0)) * 2 +
                      (step_logprobs ? 1 : 0)) * 2 + slot) * (cuda::kMaxDecodeSplit + 1) + splits;
    auto it = graphs.find(key);
    if (it == graphs.end()) {
      // A capture that fails (an op that cannot be captured, say) turns graphs off for this
      // backend and the step runs as plain launches: graphs are a speed-up, never a requirement.
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
      if (e == cudaSuccess) {
        Layers(g, n_dec, n_tiles, one_token_each);
        Output(0, nrows, out);
        e = cudaStreamEndCapture(stream, &graph);
        const Status enq = EnqueueErrors(&gemm_status);
        if (e == cudaSuccess && !enq.ok()) e = cudaErrorStreamCaptureInvalidated;
      }
      if (e == cudaSuccess) last_graph_kernels = CountKernelNodes(graph);
      last_graph_programmatic_edges = 0;
      if (e == cudaSuccess && opt.programmatic_launch) {
        e = MakeKernelEdgesProgrammatic(graph, &last_graph_programmatic_edges);
      }
      if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
      if (graph) cudaGraphDestroy(graph);
      if (e != cudaSuccess) {
        cudaGetLastError();
        std::fprintf(stderr, "cuda backend: CUDA graph capture failed (%s); graphs off\n",
                     cudaGetErrorString(e));
        opt.cuda_graphs = false;
      } else {
        it = graphs.emplace(key, exec).first;
      }
    }
    if (it != graphs.end()) {
      KINFER_CUDA_RETURN(cudaGraphLaunch(it->second, stream), "graph launch");
      KINFER_RETURN_IF_ERROR(CopyHostRows(0, nrows));
      if (out != Out::kLogits) {
        KINFER_RETURN_IF_ERROR(CopyIdsBack(rows));
      }
      // A logits step ends here whoever reads its rows: the next step's upload into this
      // slot's buffers (on the copy stream) is ordered after a step's kernels only through its
      // ids' copy, which a logits step has not.
      if (out == Out::kLogits) KINFER_CUDA_RETURN(cudaStreamSynchronize(stream), "decode step");
      if (out_logits) std::memcpy(out_logits->data(), logits_host, rows * sizeof(float) * hp.n_vocab);
      return Status::Ok();
    }
  }

  Layers(g, n_dec, n_tiles, one_token_each);
  KINFER_RETURN_IF_ERROR(EnqueueErrors(&gemm_status));
  for (int r0 = 0; r0 < nrows; r0 += R) {
    const int nr = std::min(R, nrows - r0);
    Output(r0, nr, out);
    KINFER_RETURN_IF_ERROR(EnqueueErrors(&gemm_status));
    KINFER_RETURN_IF_ERROR(CopyHostRows(r0, nr));
    if (out_logits) {  // the next pass reuses the pinned logits
      KINFER_CUDA_RETURN(cudaStreamSynchronize(stream), "forward step");
      std::memcpy(out_logits->data() + static_cast<size_t>(r0) * hp.n_vocab, logits_host,
                  static_cast<size_t>(nr) * hp.n_vocab * sizeof(float));
    }
  }
  if (out != Out::kLogits) {
    KINFER_RETURN_IF_ERROR(CopyIdsBack(rows));
  }
  if (out == Out::kLogits) KINFER_CUDA_RETURN(cudaStreamSynchronize(stream), "forward step");  // (as above)
  return Status::Ok();
}

Status CudaBackend::Impl::CopyIdsBack(size_t rows) {
  // On the copy stream once the step's kernels are done: a chained step behind it computes
  // meanwhile (it writes the other slot's ids).
  if (two_streams()) {
    KINFER_CUDA_RETURN(cudaEventRecord(computed[slot], stream), "step event");
    KINFER_CUDA_RETURN(cudaStreamWaitEvent(copy, computed[slot], 0), "step wait");
  }
  KINFER_CUDA_RETURN(cudaMemcpyAsync(argmax_host, argmax_dev, rows * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, copy),
                     "ids copy");
  if (step_logprobs) {
    KINFER_CUDA_RETURN(cudaMemcpyAsync(lps_host_buf[slot], lps_dev, rows * sizeof(cuda::DeviceLogprobs),
                                       cudaMemcpyDeviceToHost, copy),
                       "logprobs copy");
  }
  return Status::Ok();
}

Status CudaBackend::Impl::CopyHostRows(int r0, int nr) {
  if (host_logits == nullptr) return Status::Ok();
  const size_t nv = static_cast<size_t>(hp.n_vocab);
  const auto lo = std::lower_bound(host_rows.begin(), host_rows.end(), r0);
  const auto hi = std::lower_bound(lo, host_rows.end(), r0 + nr);
  if (lo == hi) return Status::Ok();
  size_t k = 0;  // (at most nr <= R rows: the pinned buffer holds them)
  for (auto it = lo; it != hi; ++it, ++k) {
    KINFER_CUDA_RETURN(cudaMemcpyAsync(logits_host + k * nv, logits + static_cast<size_t>(*it - r0) * nv,
                                       nv * sizeof(float), cudaMemcpyDeviceToHost, stream),
                       "host rows' logits copy");
  }
  KINFER_CUDA_RETURN(cudaStreamSynchronize(stream), "forward step");
  std::memcpy(host_logits->data() + static_cast<size_t>(lo - host_rows.begin()) * nv, logits_host,
              k * nv * sizeof(float));
  return Status::Ok();
}

Status CudaBackend::Impl::Collect(int s, size_t rows, std::vector<int32_t>* ids) {
  // The step's own event: a chained step behind it goes on computing meanwhile.
  KINFER_CUDA_RETURN(cudaEventSynchronize(step_done[s]), "forward step");
  ids->resize(rows);
  if (rows > 0) std::memcpy(ids->data(), argmax_host_buf[s], rows * sizeof(int32_t));
  static_assert(cuda::kMaxDeviceLogprobs == kMaxDrawnLogprobs);
  for (const auto& [r, out] : lps_out_buf[s]) {
    const cuda::DeviceLogprobs& d = lps_host_buf[s][r];
    out->token = d.token;
    out->logprob = d.logprob;
    out->rank = d.rank;
    out->n_top = d.n_top;
    std::copy(d.top_ids, d.top_ids + kMaxDrawnLogprobs, out->top_ids);
    std::copy(d.top_logprobs, d.top_logprobs + kMaxDrawnLogprobs, out->top_logprobs);
  }
  lps_out_buf[s].clear();
  return Status::Ok();
}

// ---- CudaBackend ------------------------------------------------------------------------------

CudaBackend::CudaBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaBackend::~CudaBackend() = default;

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(std::shared_ptr<const GgufFile> file,
                                                           const CudaBackendOptions& options) {
  if (!file) return InvalidArgument("no model file");
  auto impl = std::make_unique<Impl>();
  KINFER_RETURN_IF_ERROR(impl->Init(std::move(file), options));
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::move(impl)));
}

const LlamaHParams& CudaBackend::hparams() const { return impl_->hp; }

size_t CudaBackend::KvBlockBytes(int block_size) const {
  return PagedKvCache::BlockBytes(impl_->hp.n_layer, impl_->hp.n_embd_kv(), block_size);
}

int64_t CudaBackend::KvMemoryBudgetBytes(double fraction) const {
  if (!(fraction > 0.0)) return 0;
  fraction = std::min(fraction, 1.0);
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(impl_->opt.device) != cudaSuccess) return 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  // A cache already allocated counts as free: InitKvCache replaces it.
  return static_cast<int64_t>(static_cast<double>(free_b + impl_->kv_bytes) * fraction);
}

Status CudaBackend::InitKvCache(int block_size, int num_blocks) {
  Impl& I = *impl_;
  if (block_size < 1 || num_blocks < 1) {
    return InvalidArgument("KV cache needs block_size >= 1 and num_blocks >= 1, got " +
                           std::to_string(block_size) + " and " + std::to_string(num_blocks));
  }
  KINFER_CUDA_RETURN(cudaSetDevice(I.opt.device), "cudaSetDevice");
  I.ClearGraphs();
  if (I.kc) cudaFree(I.kc);
  if (I.vc) cudaFree(I.vc);
  I.kc = I.vc = nullptr;
  I.kv_bytes = 0;
  const size_t half = KvBlockBytes(block_size) * static_cast<size_t>(num_blocks) / 2;
  cudaError_t e = cudaMalloc(&I.kc, half);
  if (e == cudaSuccess) e = cudaMalloc(&I.vc, half);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (I.kc) cudaFree(I.kc);
    I.kc = I.vc = nullptr;
    return ResourceExhausted("KV cache of " + std::to_string(num_blocks) + " blocks (" +
                             std::to_string(2 * half) + " bytes) does not fit on the device: " +
                             cudaGetErrorString(e));
  }
  I.block_size = block_size;
  I.num_blocks = num_blocks;
  I.kv_bytes = static_cast<int64_t>(2 * half);
  return Status::Ok();
}

// A launched step must be collected before the stream takes another: every entry point but
// FinishSample refuses while one is (the engine never interleaves them).
#define KINFER_CUDA_NOT_LAUNCHED()                                                  \
  do {                                                                              \
    if (impl_->num_launched > 0) {                                                  \
      return FailedPrecondition("a step is already launched (FinishSample first)"); \
    }                                                                               \
  } while (0)

Status CudaBackend::ForwardBatch(std::span<const SequenceBatch> seqs, std::vector<float>* logits) {
  KINFER_CUDA_NOT_LAUNCHED();
  size_t rows = 0;
  int slot = 0;
  return impl_->Enqueue(seqs, Impl::Out::kLogits, {}, {}, logits, &rows, &slot);
}

Status CudaBackend::ForwardBatchArgmax(std::span<const SequenceBatch> seqs,
                                       std::vector<int32_t>* tokens) {
  KINFER_CUDA_NOT_LAUNCHED();
  size_t rows = 0;
  int slot = 0;
  KINFER_RETURN_IF_ERROR(impl_->Enqueue(seqs, Impl::Out::kArgmax, {}, {}, nullptr, &rows, &slot));
  return impl_->Collect(slot, rows, tokens);
}


Status CudaBackend::ForwardBatchSample(std::span<const SequenceBatch> seqs,
                                       std::span<const DrawParams> rows,
                                       std::vector<int32_t>* tokens) {
  KINFER_CUDA_NOT_LAUNCHED();
  size_t n = 0;
  int slot = 0;
  KINFER_RETURN_IF_ERROR(impl_->Enqueue(seqs, Impl::Out::kSample, rows, {}, nullptr, &n, &slot));
  return impl_->Collect(slot, n, tokens);
}

Status CudaBackend::ForwardBatchSampleMixed(std::span<const SequenceBatch> seqs,
                                            std::span<const DrawParams> rows,
                                            std::span<const int32_t> host_rows,
                                            std::vector<int32_t>* tokens,
                                            std::vector<float>* host_logits) {
  KINFER_CUDA_NOT_LAUNCHED();
  Impl& I = *impl_;
  size_t n = 0;
  int slot = 0;
  I.host_rows = host_rows;
  I.host_logits = host_logits;
  const Status st = I.Enqueue(seqs, Impl::Out::kSample, rows, {}, nullptr, &n, &slot);
  I.host_rows = {};
  I.host_logits = nullptr;
  KINFER_RETURN_IF_ERROR(st);
  KINFER_RETURN_IF_ERROR(I.Collect(slot, n, tokens));
  for (int32_t r : host_rows) (*tokens)[static_cast<size_t>(r)] = -1;
  return Status::Ok();
}

Status CudaBackend::LaunchSample(std::span<const SequenceBatch> seqs,
                                 std::span<const DrawParams> rows) {
  KINFER_CUDA_NOT_LAUNCHED();
  Impl::LaunchedStep& l = impl_->launched[0];
  KINFER_RETURN_IF_ERROR(impl_->Enqueue(seqs, Impl::Out::kSample, rows, {}, nullptr, &l.rows, &l.slot));
  impl_->num_launched = 1;
  return Status::Ok();
}

Status CudaBackend::LaunchSampleChained(std::span<const SequenceBatch> seqs,
                                        std::span<const DrawParams> rows,
                                        std::span<const int32_t> chain) {
  Impl& I = *impl_;
  KINFER_RETURN_IF_ERROR(CheckChain(I.num_launched, seqs, chain, I.launched[0].rows));
  Impl::LaunchedStep l;
  // Enqueue uses the other slot than the launched step's, and syncs on an error: the launched
  // step stays launched either way.
  KINFER_RETURN_IF_ERROR(I.Enqueue(seqs, Impl::Out::kSample, rows, chain, nullptr, &l.rows, &l.slot));
  I.launched[1] = l;
  I.num_launched = 2;
  return Status::Ok();
}

Status CudaBackend::FinishSample(std::vector<int32_t>* tokens) {
  Impl& I = *impl_;
  if (I.num_launched == 0) return FailedPrecondition("no step is launched (LaunchSample first)");
  const Impl::LaunchedStep l = I.launched[0];
  I.launched[0] = I.launched[1];
  --I.num_launched;
  const Status st = I.Collect(l.slot, l.rows, tokens);
  if (!st.ok()) {  // a device fault: nothing launched is coming back
    I.SyncStreams();
    I.num_launched = 0;
  }
  return st;
}

Status CudaBackend::DeviceHealth() {
  // A sticky error is returned by every later call, a synchronisation too; an error of the
  // step's own (a launch refused, cuBLAS) was taken by EnqueueErrors and is not.
  cudaError_t e = cudaSetDevice(impl_->opt.device);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return Status::Ok();
  return Internal(std::string("the CUDA device failed (") + cudaGetErrorName(e) + ": " +
                  cudaGetErrorString(e) + "); every later step would fail: restart the runtime");
}

#undef KINFER_CUDA_NOT_LAUNCHED

const CudaDeviceInfo& CudaBackend::device_info() const { return impl_->info; }
int CudaBackend::max_batch_tokens() const { return impl_->T; }
size_t CudaBackend::weight_bytes_per_token() const { return impl_->weight_bytes_per_token; }
size_t CudaBackend::WeightBytesRead(int tokens, int logits_rows) const {
  return impl_->WeightBytesRead(tokens, logits_rows);
}
int64_t CudaBackend::weights_device_bytes() const { return static_cast<int64_t>(impl_->weights.size()); }
int64_t CudaBackend::fp16_copy_bytes() const { return impl_->fp16_bytes; }
int64_t CudaBackend::scratch_device_bytes() const { return static_cast<int64_t>(impl_->scratch.size()); }
int64_t CudaBackend::kv_device_bytes() const { return impl_->kv_bytes; }
int CudaBackend::graphs_captured() const { return static_cast<int>(impl_->graphs.size()); }
int CudaBackend::last_graph_kernels() const { return impl_->last_graph_kernels; }
int CudaBackend::last_graph_programmatic_edges() const { return impl_->last_graph_programmatic_edges; }

}  // namespace kinfer
