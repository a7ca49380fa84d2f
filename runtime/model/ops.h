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
void RopeNormal(float* x, int n, int n_heads, int head_dim, int rope_dim, int pos0, float freq_base,
                float freq_scale);

// The same rotation in two steps, for callers that rotate one position's row in pieces:
// RopeAngles fills cos[i], sin[i] (i < rope_dim / 2) for position pos by that recurrence, and
// RopeNormalRange rotates elements [e0, e1) of a row of heads of head_dim with them (e0 and e1
// even). Rotating a row's pieces gives the bits RopeNormal gives for the whole row.
void RopeAngles(int pos, int rope_dim, float freq_base, float freq_scale, float* cos, float* sin);
void RopeNormalRange(float* row, int head_dim, int rope_dim, const float* cos, const float* sin,
                     int64_t e0, int64_t e1);

// gate[i] = silu(gate[i]) * up[i], for n elements.
void SwiGlu(float* gate, const float* up, int64_t n);

// y[i] += x[i], for n elements.
void AddInPlace(float* y, const float* x, int64_t n);

}  // namespace kinfer
