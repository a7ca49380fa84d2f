// GgufFile parsing: every value type, accessors, tensor layout, and rejection of truncated,
// corrupt and hostile files (never a crash, always a Status naming the problem).
#include "runtime/gguf/gguf_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <limits>

#include "tests/runtime/gguf/gguf_test_writer.h"

namespace kinfer {
namespace {

using ::kinfer::testing::Enc;
using ::kinfer::testing::GgufTestWriter;
using ::kinfer::testing::TestTensor;
using ::testing::HasSubstr;

using VT = GgufValueType;

StatusOr<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromBuffer(bytes.data(), bytes.size());
}

// Adds one key of each of the 13 value types, plus arrays (empty, strings, nested).
void AddAllValueTypes(GgufTestWriter& w) {
  w.AddKv("v.u8", VT::kUint8, Enc().Pod<uint8_t>(250));
  w.AddKv("v.i8", VT::kInt8, Enc().Pod<int8_t>(-7));
  w.AddKv("v.u16", VT::kUint16, Enc().Pod<uint16_t>(65000));
  w.AddKv("v.i16", VT::kInt16, Enc().Pod<int16_t>(-32000));
  w.AddKv("v.u32", VT::kUint32, Enc().Pod<uint32_t>(4000000000u));
  w.AddKv("v.i32", VT::kInt32, Enc().Pod<int32_t>(-2000000000));
  w.AddKv("v.f32", VT::kFloat32, Enc().Pod<float>(0.25f));
  w.AddKv("v.bool", VT::kBool, Enc().Pod<uint8_t>(1));
  w.AddKv("v.str", VT::kString, Enc().Str("llama"));
  w.AddKv("v.u64", VT::kUint64, Enc().Pod<uint64_t>(std::numeric_limits<uint64_t>::max()));
  w.AddKv("v.i64", VT::kInt64, Enc().Pod<int64_t>(std::numeric_limits<int64_t>::min()));
  w.AddKv("v.f64", VT::kFloat64, Enc().Pod<double>(-1.5e300));
  w.AddKv("v.arr_str", VT::kArray, Enc().ArrayHeader(VT::kString, 3).Str("a").Str("").Str("ccc"));
  w.AddKv("v.arr_f32", VT::kArray, Enc().ArrayHeader(VT::kFloat32, 2).Pod(1.5f).Pod(-2.0f));
  w.AddKv("v.arr_i32", VT::kArray,
          Enc().ArrayHeader(VT::kInt32, 2).Pod<int32_t>(-1).Pod<int32_t>(7));
  w.AddKv("v.arr_empty", VT::kArray, Enc().ArrayHeader(VT::kUint64, 0));
  // [[1, 2], [], [3]] as arrays of uint16.
  w.AddKv("v.nested", VT::kArray,
          Enc()
              .ArrayHeader(VT::kArray, 3)
              .ArrayHeader(VT::kUint16, 2)
              .Pod<uint16_t>(1)
              .Pod<uint16_t>(2)
              .ArrayHeader(VT::kUint16, 0)
              .ArrayHeader(VT::kUint16, 1)
              .Pod<uint16_t>(3));
  // [["x", "yz"]]
  w.AddKv("v.nested_str", VT::kArray,
          Enc().ArrayHeader(VT::kArray, 1).ArrayHeader(VT::kString, 2).Str("x").Str("yz"));
}

void AddSomeTensors(GgufTestWriter& w) {
  w.AddTensor("f32", {8}, GgmlType::kF32);
  w.AddTensor("f16", {4, 3}, GgmlType::kF16);
  w.AddTensor("bf16", {2, 1, 1, 3}, GgmlType::kBF16);
  w.AddTensor("q8_0", {64, 2}, GgmlType::kQ8_0);
  w.AddTensor("q4_0", {32}, GgmlType::kQ4_0);
  w.AddTensor("q4_1", {32, 3}, GgmlType::kQ4_1);
  w.AddTensor("q4_k", {256}, GgmlType::kQ4_K);
  w.AddTensor("q6_k", {256, 2}, GgmlType::kQ6_K);
}

std::vector<uint8_t> RichFile() {
  GgufTestWriter w;
  AddAllValueTypes(w);
  AddSomeTensors(w);
  return w.Build();
}

TEST(GgufFileTest, ParsesEveryMetadataValueType) {
  const std::vector<uint8_t> bytes = RichFile();
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.metadata().size(), 18u);
  EXPECT_EQ(g.metadata().front().first, "v.u8");  // file order kept

  EXPECT_EQ(*g.GetInt("v.u8"), 250);
  EXPECT_EQ(*g.GetInt("v.i8"), -7);
  EXPECT_EQ(*g.GetInt("v.u16"), 65000);
  EXPECT_EQ(*g.GetInt("v.i16"), -32000);
  EXPECT_EQ(*g.GetInt("v.u32"), 4000000000);
  EXPECT_EQ(*g.GetInt("v.i32"), -2000000000);
  EXPECT_EQ(*g.GetFloat("v.f32"), 0.25);
  EXPECT_EQ(*g.GetBool("v.bool"), true);
  EXPECT_EQ(*g.GetString("v.str"), "llama");
  EXPECT_EQ(*g.Find("v.u64")->AsUint(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*g.GetInt("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*g.GetFloat("v.f64"), -1.5e300);
  EXPECT_EQ(g.Find("v.f64")->type, VT::kFloat64);
  EXPECT_EQ(g.Find("v.i16")->type, VT::kInt16);

  EXPECT_THAT(*g.GetStringArray("v.arr_str"), ::testing::ElementsAre("a", "", "ccc"));
  EXPECT_THAT(*g.GetFloatArray("v.arr_f32"), ::testing::ElementsAre(1.5f, -2.0f));
  EXPECT_THAT(*g.GetIntArray("v.arr_i32"), ::testing::ElementsAre(-1, 7));
  EXPECT_TRUE(g.GetIntArray("v.arr_empty")->empty());
  const auto& empty = std::get<GgufValue::Array>(g.Find("v.arr_empty")->data);
  EXPECT_EQ(empty.element_type, VT::kUint64);

  const auto& nested = std::get<GgufValue::Array>(g.Find("v.nested")->data);
  ASSERT_EQ(nested.element_type, VT::kArray);
  ASSERT_EQ(nested.items.size(), 3u);
  const auto& first = std::get<GgufValue::Array>(nested.items[0].data);
  EXPECT_EQ(first.element_type, VT::kUint16);
  ASSERT_EQ(first.items.size(), 2u);
  EXPECT_EQ(*first.items[1].AsInt(), 2);
  EXPECT_TRUE(std::get<GgufValue::Array>(nested.items[1].data).items.empty());
  const auto& nested_str = std::get<GgufValue::Array>(g.Find("v.nested_str")->data);
  EXPECT_EQ(*std::get<GgufValue::Array>(nested_str.items[0].data).items[1].AsString(), "yz");
}

TEST(GgufFileTest, TypedLookupsReportMissingAndMismatchedTypes) {
  const std::vector<uint8_t> bytes = RichFile();
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok());
  const GgufFile& g = **f;
  EXPECT_EQ(g.Find("nope"), nullptr);
  EXPECT_EQ(g.GetInt("nope").status().code(), StatusCode::kNotFound);
  EXPECT_THAT(g.GetInt("nope").status().message(), HasSubstr("'nope'"));
  EXPECT_EQ(g.GetInt("v.str").status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(g.GetInt("v.str").status().message(), HasSubstr("v.str"));
  EXPECT_EQ(g.GetInt("v.u64").status().code(), StatusCode::kInvalidArgument);         // > INT64_MAX
  EXPECT_EQ(g.Find("v.i8")->AsUint().status().code(), StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ(*g.GetFloat("v.i32"), -2000000000.0);  // any numeric reads as a float
  EXPECT_EQ(g.GetBool("v.u8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetString("v.f32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetStringArray("v.str").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetStringArray("v.arr_i32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetIntArray("v.arr_f32").status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(*g.GetFloatArray("v.arr_i32"), ::testing::ElementsAre(-1.0f, 7.0f));
}

TEST(GgufFileTest, TensorInfosPointAtAlignedBytesInsideTheBuffer) {
  const std::vector<uint8_t> bytes = RichFile();
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufFile& g = **f;
  ASSERT_EQ(g.tensors().size(), 8u);
  EXPECT_EQ(g.alignment(), 32u);
  for (const GgufTensorInfo& t : g.tensors()) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.offset % 32, 0u);
    EXPECT_EQ((t.data - bytes.data()) % 32, 0);
    EXPECT_LE(t.data + t.size_bytes, bytes.data() + bytes.size());
    EXPECT_EQ(g.FindTensor(t.name), &t);
  }
  const GgufTensorInfo* q6 = g.FindTensor("q6_k");
  ASSERT_NE(q6, nullptr);
  EXPECT_EQ(q6->type, GgmlType::kQ6_K);
  EXPECT_THAT(q6->dims, ::testing::ElementsAre(256, 2));
  EXPECT_EQ(q6->num_elements(), 512);
  EXPECT_EQ(q6->size_bytes, 2 * sizeof(BlockQ6_K));
  EXPECT_EQ(q6->data + q6->size_bytes, bytes.data() + bytes.size());  // last tensor ends the file
  EXPECT_EQ(g.FindTensor("bf16")->num_elements(), 6);
  EXPECT_EQ(g.FindTensor("missing"), nullptr);
}

TEST(GgufFileTest, AcceptsVersion2AndCustomAlignment) {
  GgufTestWriter w;
  w.version = 2;
  w.WriteAlignment(256);
  w.AddTensor("a", {3}, GgmlType::kF32);
  w.AddTensor("b", {5}, GgmlType::kF16);
  const std::vector<uint8_t> bytes = w.Build();
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->version(), 2u);
  EXPECT_EQ((*f)->alignment(), 256u);
  EXPECT_EQ((*f)->FindTensor("b")->offset, 256u);
  EXPECT_EQ(((*f)->FindTensor("a")->data - bytes.data()) % 256, 0);
}

TEST(GgufFileTest, KnownButUnsupportedTypeIsListed) {
  GgufTestWriter w;
  w.AddTensor("q5_k", {256}, GgmlType::kQ5_K);
  w.AddTensor("iq4_xs", {512}, GgmlType::kIQ4_XS);
  const std::vector<uint8_t> bytes = w.Build();
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufTensorInfo* t = (*f)->FindTensor("q5_k");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->size_bytes, 176u);
  EXPECT_FALSE(GgmlTypeSupported(t->type));
  EXPECT_EQ(GgmlTypeName(t->type), "Q5_K");
  EXPECT_EQ((*f)->FindTensor("iq4_xs")->size_bytes, 2 * 136u);
}

TEST(GgufFileTest, EmptyFileWithNoTensorsParses) {
  GgufTestWriter w;
  const std::vector<uint8_t> bytes = w.Build();
  EXPECT_EQ(bytes.size(), 24u);
  auto f = Parse(bytes);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE((*f)->metadata().empty());
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufFileTest, EveryTruncationFailsCleanly) {
  const std::vector<uint8_t> full = RichFile();
  ASSERT_TRUE(Parse(full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    // An exactly-sized heap copy, so a sanitizer build catches any read past `len`.
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    auto f = GgufFile::FromBuffer(prefix.empty() ? nullptr : prefix.data(), prefix.size());
    ASSERT_FALSE(f.ok()) << "prefix of " << len << " bytes parsed";
    EXPECT_TRUE(f.status().code() == StatusCode::kDataLoss ||
                f.status().code() == StatusCode::kInvalidArgument)
        << f.status().ToString();
    EXPECT_FALSE(f.status().message().empty());
  }
}

// ---- corrupt headers and metadata ----

void ExpectRejected(const std::vector<uint8_t>& bytes, StatusCode code, std::string_view substr) {
  auto f = Parse(bytes);
  ASSERT_FALSE(f.ok()) << "expected an error containing '" << substr << "'";
  EXPECT_EQ(f.status().code(), code) << f.status().ToString();
  EXPECT_THAT(f.status().message(), HasSubstr(std::string(substr)));
}

TEST(GgufFileTest, RejectsBadMagic) {
  GgufTestWriter w;
  w.magic = 0x46554746;
  ExpectRejected(w.Build(), StatusCode::kInvalidArgument, "offset 0: bad magic");
}

TEST(GgufFileTest, RejectsVersion1And99AndBigEndian) {
  for (uint32_t v : {0u, 1u, 4u, 99u, 0x03000000u}) {
    GgufTestWriter w;
    w.version = v;
    ExpectRejected(w.Build(), StatusCode::kInvalidArgument,
                   "offset 4: unsupported GGUF version " + std::to_string(v));
  }
}

TEST(GgufFileTest, RejectsCountsLargerThanTheFile) {
  GgufTestWriter kv;
  kv.n_kv_override = uint64_t{1} << 60;
  ExpectRejected(kv.Build(), StatusCode::kDataLoss, "metadata count");
  GgufTestWriter tensors;
  tensors.n_tensors_override = std::numeric_limits<uint64_t>::max();
  ExpectRejected(tensors.Build(), StatusCode::kDataLoss, "tensor count");
  GgufTestWriter off_by_one;  // one more tensor than written
  off_by_one.AddTensor("a", {4}, GgmlType::kF32);
  off_by_one.n_tensors_override = 2;
  auto f = Parse(off_by_one.Build());
  EXPECT_FALSE(f.ok());
}

TEST(GgufFileTest, RejectsHugeStringLength) {
  GgufTestWriter w;
  w.AddKv("k", VT::kString, Enc().U64(uint64_t{1} << 62).Pod<uint32_t>(0));
  ExpectRejected(w.Build(), StatusCode::kDataLoss, "length 4611686018427387904 exceeds");
  GgufTestWriter key;
  key.AddKv("k", VT::kUint8, Enc().Pod<uint8_t>(0));
  std::vector<uint8_t> bytes = key.Build();
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  std::memcpy(bytes.data() + 24, &huge, 8);  // the key's length
  ExpectRejected(bytes, StatusCode::kDataLoss, "offset 24: metadata key 0 length");
}

TEST(GgufFileTest, RejectsHugeArrayCount) {
  GgufTestWriter w;
  w.AddKv("arr", VT::kArray, Enc().ArrayHeader(VT::kUint32, uint64_t{1} << 61).U32(1));
  ExpectRejected(w.Build(), StatusCode::kDataLoss, "array count 2305843009213693952");
  GgufTestWriter nested;  // the inner count lies
  nested.AddKv("arr", VT::kArray,
               Enc().ArrayHeader(VT::kArray, 1).ArrayHeader(VT::kString, 1000000).Str("x"));
  ExpectRejected(nested.Build(), StatusCode::kDataLoss, "array count 1000000");
}

TEST(GgufFileTest, RejectsUnknownValueTypes) {
  GgufTestWriter w;
  w.AddKvRawType("k", 13, Enc().U32(0));
  ExpectRejected(w.Build(), StatusCode::kInvalidArgument, "'k': unknown value type 13");
  GgufTestWriter arr;
  arr.AddKv("a", VT::kArray, Enc().U32(77).U64(1).U32(0));
  ExpectRejected(arr.Build(), StatusCode::kInvalidArgument, "unknown array element type 77");
}

TEST(GgufFileTest, RejectsArraysNestedTooDeep) {
  Enc e;
  for (int i = 0; i < 40; ++i) e.ArrayHeader(VT::kArray, 1);
  e.ArrayHeader(VT::kUint8, 0);
  GgufTestWriter w;
  w.AddKv("deep", VT::kArray, e);
  ExpectRejected(w.Build(), StatusCode::kInvalidArgument, "nested deeper");
}

TEST(GgufFileTest, RejectsDuplicateKeys) {
  GgufTestWriter w;
  w.AddU32("a", 1);
  w.AddU32("a", 2);
  ExpectRejected(w.Build(), StatusCode::kInvalidArgument, "duplicate metadata key 'a'");
}

TEST(GgufFileTest, RejectsBadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufTestWriter w;
    w.AddU32("general.alignment", a);
    ExpectRejected(w.Build(), StatusCode::kInvalidArgument,
                   "'general.alignment' must be a non-zero power of two, got " + std::to_string(a));
  }
  GgufTestWriter s;
  s.AddString("general.alignment", "32");
  ExpectRejected(s.Build(), StatusCode::kInvalidArgument, "general.alignment");
}

// ---- corrupt tensor infos ----

std::vector<uint8_t> OneTensor(TestTensor t) {
  GgufTestWriter w;
  w.AddTensor(std::move(t));
  return w.Build();
}

TEST(GgufFileTest, RejectsNDimsOutsideOneToFour) {
  ExpectRejected(OneTensor({"t", {}, 0, {0, 0, 0, 0}, {}, 0}), StatusCode::kInvalidArgument,
                 "tensor 't': n_dims 0 outside [1, 4]");
  ExpectRejected(OneTensor({"t", {1, 1, 1, 1, 1}, 0, {0, 0, 0, 0}, {}, {}}),
                 StatusCode::kInvalidArgument, "n_dims 5");
}

TEST(GgufFileTest, RejectsZeroAndOverflowingDims) {
  ExpectRejected(OneTensor({"t", {4, 0}, 0, {}, {}, {}}), StatusCode::kInvalidArgument,
                 "tensor 't': dimension 1 is 0");
  ExpectRejected(OneTensor({"t", {uint64_t{1} << 63}, 0, {}, {}, {}}), StatusCode::kInvalidArgument,
                 "dimension 0 is 9223372036854775808");
  ExpectRejected(OneTensor({"t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, {}, {}, {}}),
                 StatusCode::kInvalidArgument, "element count overflows");
  // Elements fit in int64 but bytes do not: 2^61 F32 elements.
  ExpectRejected(OneTensor({"t", {uint64_t{1} << 61}, 0, {}, {}, {}}), StatusCode::kInvalidArgument,
                 "byte size overflows");
}

TEST(GgufFileTest, RejectsUnknownTypeIds) {
  for (uint32_t id : {4u, 5u, 31u, 99u, 0xFFFFFFFFu}) {
    ExpectRejected(OneTensor({"t", {32}, id, {}, {}, {}}), StatusCode::kInvalidArgument,
                   "tensor 't': unknown ggml type id " + std::to_string(id));
  }
}

TEST(GgufFileTest, RejectsRowNotAMultipleOfTheBlock) {
  ExpectRejected(OneTensor({"t", {33}, static_cast<uint32_t>(GgmlType::kQ8_0), {}, {}, {}}),
                 StatusCode::kInvalidArgument, "row length 33 is not a multiple of the Q8_0");
}

TEST(GgufFileTest, RejectsUnalignedAndOutOfRangeOffsets) {
  std::vector<uint8_t> data(16, 0);
  ExpectRejected(OneTensor({"t", {4}, 0, data, 8, {}}), StatusCode::kInvalidArgument,
                 "tensor 't': data offset 8 is not a multiple of the alignment 32");
  // Data placed at offset 0 but the tensor claims 8 floats: 32 bytes where 16 exist.
  ExpectRejected(OneTensor({"blk.0.attn_q.weight", {8}, 0, {}, 0, {}}), StatusCode::kDataLoss,
                 "tensor 'blk.0.attn_q.weight': data [");
  ExpectRejected(OneTensor({"t", {4}, 0, {}, uint64_t{1} << 40, {}}), StatusCode::kDataLoss,
                 "extends past end of file (size ");
  ExpectRejected(OneTensor({"t", {4}, 0, {}, std::numeric_limits<uint64_t>::max() - 31, {}}),
                 StatusCode::kDataLoss, "past end of file");
}

TEST(GgufFileTest, RejectsDuplicateAndOverlappingTensors) {
  GgufTestWriter dup;
  dup.AddTensor("w", {4}, GgmlType::kF32);
  dup.AddTensor("w", {4}, GgmlType::kF32);
  ExpectRejected(dup.Build(), StatusCode::kInvalidArgument, "duplicate tensor 'w'");

  GgufTestWriter overlap;
  overlap.AddTensor({"a", {16}, 0, std::vector<uint8_t>(64, 1), 0, {}});
  overlap.AddTensor({"b", {8}, 0, std::vector<uint8_t>(32, 2), 32, {}});
  ExpectRejected(overlap.Build(), StatusCode::kInvalidArgument, "overlap");
}

// ---- Open (mmap, or read into memory) ----

class GgufOpenTest : public ::testing::TestWithParam<GgufLoad> {};

// A new file under /tmp holding `bytes`; its path, or "" when it cannot be written.
std::string WriteTempFile(const std::vector<uint8_t>& bytes) {
  char path[] = "/tmp/kinfer_gguf_testXXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "";
  const bool ok = write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  close(fd);
  return ok ? std::string(path) : "";
}

TEST_P(GgufOpenTest, OpensAFileAndReportsMissingOnes) {
  const GgufLoad load = GetParam();
  const std::vector<uint8_t> bytes = RichFile();
  const std::string path = WriteTempFile(bytes);
  ASSERT_FALSE(path.empty());
  {
    auto f = GgufFile::Open(path, load);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ((*f)->file_size(), bytes.size());
    EXPECT_EQ(*(*f)->GetString("v.str"), "llama");
    const GgufTensorInfo* t = (*f)->FindTensor("q8_0");
    ASSERT_NE(t, nullptr);
    auto in_memory = Parse(bytes);
    ASSERT_TRUE(in_memory.ok());
    const GgufTensorInfo* expected = (*in_memory)->FindTensor("q8_0");
    EXPECT_EQ(std::memcmp(t->data, expected->data, t->size_bytes), 0);
    // Tensor data keeps the file's alignment in memory: the copy starts on a 2 MiB boundary.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % (*f)->alignment(), 0u);
    if (load == GgufLoad::kMemory) {
      // A private copy: rewriting the file afterwards changes nothing that was read.
      const int wfd = ::open(path.c_str(), O_WRONLY);
      ASSERT_GE(wfd, 0);
      const std::vector<uint8_t> zeros(bytes.size(), 0);
      ASSERT_EQ(pwrite(wfd, zeros.data(), zeros.size(), 0), static_cast<ssize_t>(zeros.size()));
      close(wfd);
      EXPECT_EQ(std::memcmp(t->data, expected->data, t->size_bytes), 0);
      EXPECT_EQ(*(*f)->GetString("v.str"), "llama");
    }
  }
  // A corrupt file on disk: the error names the path.
  ASSERT_EQ(truncate(path.c_str(), 30), 0);
  auto bad = GgufFile::Open(path, load);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path));
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  EXPECT_EQ(GgufFile::Open(path, load).status().code(), StatusCode::kDataLoss);
  unlink(path.c_str());

  EXPECT_EQ(GgufFile::Open("/nonexistent/model.gguf", load).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(GgufFile::Open("/tmp", load).status().code(), StatusCode::kInvalidArgument);
}

TEST_P(GgufOpenTest, PrepareRewritesTensorsInMemoryOnlyAndRecordsTheirLayout) {
  const GgufLoad load = GetParam();
  const std::vector<uint8_t> bytes = RichFile();
  const std::string path = WriteTempFile(bytes);
  ASSERT_FALSE(path.empty());
  auto in_memory = Parse(bytes);
  ASSERT_TRUE(in_memory.ok());
  std::vector<std::string> seen;
  // Inverts the bytes of "q8_0" and tags it 7; leaves every other tensor as it is.
  const GgufPrepareFn prepare = [&](const GgufTensorInfo& t, uint8_t* data) -> uint32_t {
    seen.push_back(t.name);
    if (t.name != "q8_0") return 0;
    for (uint64_t i = 0; i < t.size_bytes; ++i) data[i] = static_cast<uint8_t>(~data[i]);
    return 7;
  };
  auto f = GgufFile::Open(path, load, prepare);
  unlink(path.c_str());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufTensorInfo* t = (*f)->FindTensor("q8_0");
  const GgufTensorInfo* want = (*in_memory)->FindTensor("q8_0");
  ASSERT_NE(t, nullptr);
  if (load == GgufLoad::kMmap) {  // a mapping is never written: prepare is not called
    EXPECT_TRUE(seen.empty());
    EXPECT_EQ(t->layout, 0u);
    EXPECT_EQ(std::memcmp(t->data, want->data, t->size_bytes), 0);
    return;
  }
  EXPECT_EQ(seen.size(), (*f)->tensors().size());  // every tensor, once
  EXPECT_EQ(t->layout, 7u);
  for (uint64_t i = 0; i < t->size_bytes; ++i) {
    ASSERT_EQ(t->data[i], static_cast<uint8_t>(~want->data[i])) << "byte " << i;
  }
  for (const GgufTensorInfo& other : (*f)->tensors()) {
    if (other.name == "q8_0") continue;
    EXPECT_EQ(other.layout, 0u) << other.name;
    EXPECT_EQ(std::memcmp(other.data, (*in_memory)->FindTensor(other.name)->data, other.size_bytes), 0)
        << other.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Loads, GgufOpenTest, ::testing::Values(GgufLoad::kMmap, GgufLoad::kMemory),
                         [](const ::testing::TestParamInfo<GgufLoad>& info) {
                           return info.param == GgufLoad::kMmap ? std::string("Mmap")
                                                                : std::string("Memory");
                         });

}  // namespace
}  // namespace kinfer
