// CUDA emulation stand-in for <cublas_v2.h> (runtime/backend/cuda/emu/cuda_emu_cublas.h).
#pragma once
#include "runtime/backend/cuda/emu/cuda_emu_cublas.h"
