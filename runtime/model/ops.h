// Element-wise and row operations of the forward pass, in llama.cpp's float order. Pure functions
// over caller-owned buffers; single-threaded (they are a small share of the step's work).
#pragma once

#include <cstdint>
#include <vector>

namespace kinfer {

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for n rows of width d. Accumulates in double.
// y may alias x.
void RmsNorm(const float* x, const float* weight, int n, int d, float eps, float* y);

// Rotary embedding, llama.cpp "normal" mode (adjacent pairs), in place on n rows of n_heads
// heads of head_dim, where row t is at position pos0 + t. Only the first rope_dim dims of each
// head rotate. The angle recurrence is ggml's: theta_{i+1} = theta_i * base^(-2/rope_dim).
void RopeNormal(float* x, int n, int n_heads, int head_dim, int rope_dim, int pos0,
                float freq_base, float freq_scale);

// gate[i] = silu(gate[i]) * up[i], for n elements.
void SwiGlu(float* gate, const float* up, int64_t n);

// y[i] += x[i], for n elements.
void AddInPlace(float* y, const float* x, int64_t n);

}  // namespace kinfer
