// HugePageMemory: aligned, zeroed, writable until MakeReadOnly, and owned like a unique_ptr.
#include "common/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>

namespace kinfer {
namespace {

TEST(HugePageMemoryTest, IsAlignedZeroedAndWritable) {
  const size_t bytes = (size_t{3} << 20) + 17;  // not a multiple of 2 MiB
  StatusOr<HugePageMemory> m = HugePageMemory::Map(bytes);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->size(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % (size_t{2} << 20), 0u);
  EXPECT_EQ(m->data()[0], 0);
  EXPECT_EQ(m->data()[bytes - 1], 0);
  m->data()[bytes - 1] = 7;  // the last byte asked for is ours
  m->MakeReadOnly();
  EXPECT_EQ(m->data()[bytes - 1], 7);  // still readable
}

TEST(HugePageMemoryTest, MovesOwnership) {
  StatusOr<HugePageMemory> m = HugePageMemory::Map(4096);
  ASSERT_TRUE(m.ok());
  uint8_t* p = m->data();
  HugePageMemory a = std::move(m).value();
  EXPECT_EQ(a.data(), p);
  HugePageMemory b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_EQ(a.size(), 0u);       // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace kinfer
