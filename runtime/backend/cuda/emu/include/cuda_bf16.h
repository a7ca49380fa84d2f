// CUDA emulation stand-in for <cuda_bf16.h> (runtime/backend/cuda/emu/cuda_emu_fp16.h).
#pragma once
#include "runtime/backend/cuda/emu/cuda_emu_fp16.h"
