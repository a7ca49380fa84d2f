// CUDA emulation stand-in for <cuda.h> (runtime/backend/cuda/emu/cuda_emu.h).
#pragma once
#include "runtime/backend/cuda/emu/cuda_emu.h"
#include "runtime/backend/cuda/emu/cuda_emu_fp16.h"
