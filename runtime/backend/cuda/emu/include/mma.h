// CUDA emulation stand-in for <mma.h> (runtime/backend/cuda/emu/cuda_emu_wmma.h).
#pragma once
#include "runtime/backend/cuda/emu/cuda_emu_wmma.h"
