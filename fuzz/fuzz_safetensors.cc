// Fuzz target: a .safetensors file image (header JSON, dtypes, shapes, offsets) parsed as a model
// file would be. Any byte string gives tensors whose bytes lie inside the image and match their
// shape, or an error; never a crash or a read outside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "rankd/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tensors = rankd::model::SafetensorsFile::ParseImage(absl::Span<const uint8_t>(data, size),
                                                           "fuzz.safetensors");
  if (!tensors.ok()) return 0;
  for (const auto& [name, t] : *tensors) {
    if (t.data < data || t.data + t.nbytes > data + size) std::abort();
    if (static_cast<size_t>(t.numel()) * rankd::model::DTypeSize(t.dtype) != t.nbytes) std::abort();
  }
  return 0;
}
