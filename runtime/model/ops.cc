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

void RopeAngles(int pos, int rope_dim, float freq_base, float freq_scale, float* cos, float* sin) {
  const float theta_scale = std::pow(freq_base, -2.0f / static_cast<float>(rope_dim));
  float theta = static_cast<float>(pos) * freq_scale;
  for (int i = 0; i < rope_dim / 2; ++i) {
    cos[i] = std::cos(theta);
    sin[i] = std::sin(theta);
    theta *= theta_scale;
  }
}

void RopeNormalRange(float* row, int head_dim, int rope_dim, const float* cos, const float* sin,
                     int64_t e0, int64_t e1) {
  for (int64_t e = e0; e < e1; e += 2) {
    const int i = static_cast<int>(e % head_dim) / 2;
    if (i >= rope_dim / 2) continue;
    const float x0 = row[e];
    const float x1 = row[e + 1];
    row[e] = x0 * cos[i] - x1 * sin[i];
    row[e + 1] = x0 * sin[i] + x1 * cos[i];
  }
}

void RopeNormal(float* x, int n, int n_heads, int head_dim, int rope_dim, int pos0, float freq_base,
                float freq_scale) {
  std::vector<float> cos_cache(rope_dim / 2), sin_cache(rope_dim / 2);
  for (int t = 0; t < n; ++t) {
    RopeAngles(pos0 + t, rope_dim, freq_base, freq_scale, cos_cache.data(), sin_cache.data());
    RopeNormalRange(x + static_cast<int64_t>(t) * n_heads * head_dim, head_dim, rope_dim,
                    cos_cache.data(), sin_cache.data(), 0,
                    static_cast<int64_t>(n_heads) * head_dim);
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
