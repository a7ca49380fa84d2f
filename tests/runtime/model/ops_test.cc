#include "runtime/model/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace kinfer {
namespace {

TEST(RmsNormTest, NormalizesEachRowAndAppliesWeight) {
  const int d = 4;
  std::vector<float> x = {1, 2, 3, 4, -2, 0, 0, 2};
  std::vector<float> w = {1, 0.5f, 2, 1};
  std::vector<float> y(8);
  RmsNorm(x.data(), w.data(), 2, d, 1e-5f, y.data());
  const float s0 = 1.0f / std::sqrt((1 + 4 + 9 + 16) / 4.0f + 1e-5f);
  EXPECT_FLOAT_EQ(y[0], 1 * s0 * 1);
  EXPECT_FLOAT_EQ(y[1], 2 * s0 * 0.5f);
  EXPECT_FLOAT_EQ(y[2], 3 * s0 * 2);
  const float s1 = 1.0f / std::sqrt((4 + 0 + 0 + 4) / 4.0f + 1e-5f);
  EXPECT_FLOAT_EQ(y[4], -2 * s1);
  EXPECT_FLOAT_EQ(y[7], 2 * s1);
}

TEST(RopeTest, PositionZeroIsIdentity) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  auto orig = x;
  RopeNormal(x.data(), 1, 2, 4, 4, 0, 10000.0f, 1.0f);
  EXPECT_EQ(x, orig);
}

TEST(RopeTest, RotatesAdjacentPairsByPositionTimesFrequency) {
  const int hd = 4;
  std::vector<float> x = {1, 0, 0, 1};
  RopeNormal(x.data(), 1, 1, hd, hd, 3, 100.0f, 1.0f);
  // pair 0: theta = 3; pair 1: theta = 3 * 100^(-2/4) = 0.3
  EXPECT_NEAR(x[0], std::cos(3.0f), 1e-6);
  EXPECT_NEAR(x[1], std::sin(3.0f), 1e-6);
  EXPECT_NEAR(x[2], -std::sin(0.3f), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.3f), 1e-6);
}

// The one-token step rotates a row in pieces (each worker its rows): the pieces must give the
// whole row's bits, partial rotary dims included.
TEST(RopeTest, RotatingARowInPiecesGivesTheWholeRowsBits) {
  const int hd = 16, heads = 3;
  for (int rope_dim : {16, 8}) {
    std::vector<float> whole(heads * hd);
    for (size_t i = 0; i < whole.size(); ++i) whole[i] = std::sin(static_cast<float>(i) * 0.7f);
    std::vector<float> pieces = whole;
    const std::vector<float> before = whole;
    RopeNormal(whole.data(), 1, heads, hd, rope_dim, 37, 10000.0f, 1.0f);
    for (int h = 0; h < heads; ++h) {
      for (int i = rope_dim; i < hd; ++i) EXPECT_EQ(whole[h * hd + i], before[h * hd + i]);
    }
    std::vector<float> c(rope_dim / 2), s(rope_dim / 2);
    RopeAngles(37, rope_dim, 10000.0f, 1.0f, c.data(), s.data());
    const std::vector<int64_t> bounds = {0, 4, 6, 20, 34, heads * hd};  // pieces across heads
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      RopeNormalRange(pieces.data(), hd, rope_dim, c.data(), s.data(), bounds[i], bounds[i + 1]);
    }
    EXPECT_EQ(pieces, whole) << "rope_dim " << rope_dim;
  }
}

TEST(RopeTest, PreservesNormAndUsesRowPositions) {
  const int hd = 8, n = 3;
  std::vector<float> x(n * hd);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) - 2.0f;
  std::vector<float> single(x.begin() + 2 * hd, x.end());
  auto orig = x;
  RopeNormal(x.data(), n, 1, hd, hd, 10, 10000.0f, 1.0f);
  RopeNormal(single.data(), 1, 1, hd, hd, 12, 10000.0f, 1.0f);  // row 2 sits at position 12
  for (int i = 0; i < hd; ++i) EXPECT_FLOAT_EQ(x[2 * hd + i], single[i]);
  for (int t = 0; t < n; ++t) {
    double a = 0, b = 0;
    for (int i = 0; i < hd; ++i) {
      a += orig[t * hd + i] * orig[t * hd + i];
      b += x[t * hd + i] * x[t * hd + i];
    }
    EXPECT_NEAR(a, b, 1e-4);
  }
}

TEST(SwiGluTest, MatchesSiluTimesUp) {
  std::vector<float> g = {-3, -0.5f, 0, 0.5f, 4};
  std::vector<float> u = {1, 2, 3, -1, 0.25f};
  auto expect = g;
  for (size_t i = 0; i < g.size(); ++i) expect[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
  SwiGlu(g.data(), u.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], expect[i]);
}

}  // namespace
}  // namespace kinfer
