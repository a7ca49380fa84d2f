// The process's open-file limit, which bounds how many connections a server can hold.
//
// RaiseOpenFileLimit lifts the soft RLIMIT_NOFILE to the hard one (as Go's runtime and nginx's
// worker_rlimit_nofile do): containers often start with a soft limit of 1024 under a hard one of
// 524288 or more, and a server that hits the soft limit cannot accept, so clients wait in the
// listen backlog with no answer. DefaultMaxConnections is the connection cap a server takes when
// none is configured: half the soft limit (a proxied connection holds a second descriptor
// upstream) less a reserve for model files, logs and the process's own sockets.
//
// Thread-safe (getrlimit / setrlimit); call RaiseOpenFileLimit once, early in main.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kinfer {

// Raises the soft limit to the hard one (at most 1 << 20). Returns the soft limit in force after.
uint64_t RaiseOpenFileLimit();

// The current soft limit (RLIM_INFINITY reads as 1 << 20).
uint64_t OpenFileLimit();

// (OpenFileLimit() - 128) / 2, at least 16 and at most 65536.
size_t DefaultMaxConnections();

}  // namespace kinfer
