// CUDA emulation: cublasGemmEx (cuda_emu_cublas.h), column-major as cuBLAS, FP32 compute:
// C = alpha * op(A) * op(B) + beta * C with op(A) m x k and op(B) k x n. Half and bf16 inputs are
// widened exactly; dot products sum in float, eight partial sums over k (cuBLAS' order is its
// own, so results agree to rounding, not bit for bit).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/backend/cuda/emu/cuda_emu_cublas.h"
#include "runtime/backend/cuda/emu/cuda_emu_fp16.h"
#include "runtime/backend/cuda/emu/emu_internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

namespace {

float Load(const void* p, cudaDataType_t t, size_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16F: return ::kinfer::Fp16ToFp32(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16BF: {
      __nv_bfloat16 b;
      b.__x = static_cast<const uint16_t*>(p)[i];
      return __bfloat162float(b);
    }
  }
  return 0.0f;
}

size_t ElemBytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
bool Known(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

// Column-major element (r, c) of op(M) where M is stored with leading dimension ld.
size_t Index(cublasOperation_t op, int r, int c, int ld) {
  return op == CUBLAS_OP_N ? static_cast<size_t>(c) * ld + r : static_cast<size_t>(r) * ld + c;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes && !kinfer_cudaemu::IsDeviceRange(workspace, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda,
                            const void* B, cudaDataType_t Btype, int ldb, const void* beta, void* C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t /*algo*/) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::lock_guard<std::recursive_mutex> lock(kinfer_cudaemu::DeviceMutex());
  if (kinfer_cudaemu::StickyError() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (m < 0 || n < 0 || k < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, transa == CUBLAS_OP_N ? m : k) || ldb < std::max(1, transb == CUBLAS_OP_N ? k : n) ||
      ldc < std::max(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!Known(Atype) || !Known(Btype) || !Known(Ctype) || computeType != CUBLAS_COMPUTE_32F ||
      transa == CUBLAS_OP_C || transb == CUBLAS_OP_C || Ctype == CUDA_R_16BF) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // The last element each matrix reaches must be device memory.
  const size_t a_cols = transa == CUBLAS_OP_N ? k : m, b_cols = transb == CUBLAS_OP_N ? n : k;
  if ((k > 0 && (!kinfer_cudaemu::IsDeviceRange(A, (a_cols - 1) * lda * ElemBytes(Atype) + ElemBytes(Atype)) ||
                 !kinfer_cudaemu::IsDeviceRange(B, (b_cols - 1) * ldb * ElemBytes(Btype) + ElemBytes(Btype)))) ||
      !kinfer_cudaemu::IsDeviceRange(C, (static_cast<size_t>(n) - 1) * ldc * ElemBytes(Ctype) + ElemBytes(Ctype))) {
    std::fprintf(stderr, "cuda-emu: cublasGemmEx: a matrix is not (wholly) in device memory\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const cudaError_t e = kinfer_cudaemu::StreamDo(handle->stream, [=] {
    // op(B) columns widened once: bt[j][p].
    std::vector<float> bt(static_cast<size_t>(n) * k), arow(k);
    for (int j = 0; j < n; ++j) {
      for (int p = 0; p < k; ++p) bt[static_cast<size_t>(j) * k + p] = Load(B, Btype, Index(transb, p, j, ldb));
    }
    for (int i = 0; i < m; ++i) {
      for (int p = 0; p < k; ++p) arow[p] = Load(A, Atype, Index(transa, i, p, lda));
      for (int j = 0; j < n; ++j) {
        const float* b = bt.data() + static_cast<size_t>(j) * k;
        float part[8] = {};
        int p = 0;
        for (; p + 8 <= k; p += 8) {
          for (int q = 0; q < 8; ++q) part[q] += arow[p + q] * b[p + q];
        }
        for (; p < k; ++p) part[0] += arow[p] * b[p];
        const float dot = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        const size_t ci = static_cast<size_t>(j) * ldc + i;
        if (Ctype == CUDA_R_32F) {
          float* c = static_cast<float*>(C);
          c[ci] = al * dot + (be != 0.0f ? be * c[ci] : 0.0f);
        } else {
          uint16_t* c = static_cast<uint16_t*>(C);
          const float old = be != 0.0f ? be * ::kinfer::Fp16ToFp32(c[ci]) : 0.0f;
          c[ci] = ::kinfer::Fp32ToFp16(al * dot + old);
        }
      }
    }
  }, cudaGraphNodeTypeKernel);
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
