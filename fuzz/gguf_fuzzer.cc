// libFuzzer target for the GGUF reader: parse arbitrary bytes, then touch everything a loader
// would. A crash, a sanitizer report or a leak is a bug; a parse error is the expected outcome
// for almost every input. Seeds: fuzz/corpus/gguf (scripts/make_gguf_fixtures.py).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/gguf/gguf_file.h"

namespace {

// Walks a value the way a consumer would, so every variant alternative is read.
size_t Touch(const kinfer::GgufValue& v) {
  size_t sum = static_cast<size_t>(v.type);
  (void)v.AsInt();
  (void)v.AsUint();
  (void)v.AsFloat();
  (void)v.AsBool();
  if (auto s = v.AsString(); s.ok()) sum += s->size();
  if (const auto* arr = std::get_if<kinfer::GgufValue::Array>(&v.data)) {
    for (const auto& item : arr->items) sum += Touch(item);
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Copy into an exactly-sized heap buffer so ASan sees any read past the end.
  std::vector<uint8_t> buf(data, data + size);
  auto file = kinfer::GgufFile::FromBuffer(buf.empty() ? nullptr : buf.data(), buf.size());
  if (!file.ok()) {
    if (file.status().message().empty()) __builtin_trap();  // every error must say what it is
    return 0;
  }
  const kinfer::GgufFile& g = **file;
  volatile size_t sink = 0;
  for (const auto& [key, value] : g.metadata()) {
    sink = sink + key.size() + Touch(value);
    if (g.Find(key) != &value) __builtin_trap();
    (void)g.GetStringArray(key);
    (void)g.GetFloatArray(key);
    (void)g.GetIntArray(key);
  }
  std::vector<float> out;
  for (const auto& t : g.tensors()) {
    if (g.FindTensor(t.name) != &t) __builtin_trap();
    if (t.data == nullptr || t.data < buf.data() ||
        t.data + t.size_bytes > buf.data() + buf.size()) {
      __builtin_trap();  // the parser promised the bytes are inside the buffer
    }
    sink = sink + static_cast<size_t>(t.num_elements());
    if (!kinfer::GgmlTypeSupported(t.type)) continue;
    const int64_t block = kinfer::GgmlBlockSize(t.type);
    out.resize(static_cast<size_t>(block));
    kinfer::DequantizeRow(t.type, t.data, out.data(), block);  // first block only
    for (float f : out) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      sink = sink + bits;
    }
  }
  (void)sink;
  return 0;
}
