#include "runtime/model/ops.h"

#include <cmath>

namespace kinfer {

void RmsNorm(const float* x, const float* weight, int n, int d, float eps, float* y) {
  for (int t = 0; t < n; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * d;
    float* yr = y + static_cast<int64_t>(t) * d;
    double sum = 0.0;
    for (int i = 0; i < d; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float mean = static_cast<float>(sum / d);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < d; ++i) yr[i] = (xr[i] * scale) * weight[i];
  }
}

void RopeNormal(float* x, int n, int n_heads, int head_dim, int rope_dim, int pos0,
                float freq_base, float freq_scale) {
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(rope_dim));
  std::vector<float> cos_cache(rope_dim / 2), sin_cache(rope_dim / 2);
  for (int t = 0; t < n; ++t) {
    float theta = static_cast<float>(pos0 + t) * freq_scale;
    for (int i = 0; i < rope_dim / 2; ++i) {
      cos_cache[i] = std::cos(theta);
      sin_cache[i] = std::sin(theta);
      theta *= theta_scale;
    }
    float* row = x + static_cast<int64_t>(t) * n_heads * head_dim;
    for (int h = 0; h < n_heads; ++h) {
      float* v = row + h * head_dim;
      for (int i = 0; i < rope_dim / 2; ++i) {
        const float x0 = v[2 * i];
        const float x1 = v[2 * i + 1];
        v[2 * i] = x0 * cos_cache[i] - x1 * sin_cache[i];
        v[2 * i + 1] = x0 * sin_cache[i] + x1 * cos_cache[i];
      }
    }
  }
}

void SwiGlu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

void AddInPlace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace kinfer
