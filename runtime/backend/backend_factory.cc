// CreateBackend: picks the CPU or the CUDA backend from --device.
#include <cstdio>
#include <string>

#include "runtime/backend/cpu_backend.h"
#include "runtime/backend/model_backend.h"
#if defined(KINFER_HAVE_CUDA)
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace kinfer {
namespace {

void Log(const BackendOptions& o, const std::string& line) {
  if (o.log) {
    o.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

}  // namespace

bool CudaBackendCompiled() {
#if defined(KINFER_HAVE_CUDA)
  return true;
#else
  return false;
#endif
}

#if !defined(KINFER_HAVE_CUDA)
Status CudaDeviceUsable(int /*ordinal*/) {
  return FailedPrecondition("no CUDA device: this build has no CUDA backend (built without nvcc)");
}
#endif

StatusOr<std::unique_ptr<ModelBackend>> CreateBackend(std::string_view device,
                                                      std::shared_ptr<const GgufFile> file,
                                                      int n_threads,
                                                      const BackendOptions& options) {
  if (device != "cpu" && device != "cuda" && device != "auto") {
    return InvalidArgument("unknown device '" + std::string(device) +
                           "': expected cpu, cuda or auto");
  }
  if (device == "cuda" || device == "auto") {
    const Status usable = CudaDeviceUsable(options.cuda_device);
    if (usable.ok()) {
#if defined(KINFER_HAVE_CUDA)
      CudaBackendOptions co;
      co.device = options.cuda_device;
      co.batch_invariant = options.batch_invariant;
      auto b = CudaBackend::Create(file, co);
      if (b.ok()) {
        Log(options, "backend: cuda (" + (*b)->device_info().name + ", device " +
                         std::to_string(options.cuda_device) + ")");
        return std::unique_ptr<ModelBackend>(std::move(b).value());
      }
      if (device == "cuda") return b.status();
      Log(options, "backend: cpu (auto: the CUDA backend failed: " + b.status().ToString() + ")");
#endif
    } else {
      if (device == "cuda") return usable;
      Log(options, "backend: cpu (auto: " + usable.message() + ")");
    }
  }
  KINFER_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu, CpuBackend::Create(std::move(file), n_threads));
  return std::unique_ptr<ModelBackend>(std::move(cpu));
}

}  // namespace kinfer
