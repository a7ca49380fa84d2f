#include "runtime/backend/cpu/kernels.h"
