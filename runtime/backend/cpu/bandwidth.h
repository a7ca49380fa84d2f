// Memory read bandwidth of this machine, the bound for memory-bound decode (benchmarks only).
//
// Thread safety: runs jobs on `pool`; call it from the pool's owner thread, outside Run().
#pragma once

#include "runtime/backend/cpu/thread_pool.h"

namespace kinfer {

// Reads a 512 MB buffer (allocated and touched once per call) `a few` times with the pool's
// first n_threads workers, each streaming its own slice, and returns the best pass in GB/s
// (1e9 bytes per second); 0 when the buffer cannot be had. The buffer is advised for transparent
// huge pages, as the runtime's weights are. REQUIRES: 1 <= n_threads <= pool.size().
double MeasureReadBandwidthGBs(int n_threads, ThreadPool& pool);

}  // namespace kinfer
