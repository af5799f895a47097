// Safetensors reader: the file is mmapped read-only, the JSON header parsed once, and every tensor
// checked to lie inside the data section with a byte size that matches dtype x shape. A model
// directory holds one `model.safetensors` or shards listed in `model.safetensors.index.json`.
#ifndef RANKD_MODEL_SAFETENSORS_H_
#define RANKD_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rankd::model {

// kF8E4M3: OCP fp8 e4m3 ("e4m3fn": no infinities, 0x7f/0xff NaN, max 448), as fp8 checkpoints
// store their quantised linear weights.
enum class DType { kF32, kF16, kBF16, kF8E4M3 };

size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);

// A tensor inside a mapped file. `data` stays valid while the owning file is open.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // row-major, as stored
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const;
  std::string ShapeString() const;  // e.g. "[64, 1024]"
};

// Header lengths beyond this are certainly corrupt (real headers are well under 10 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// One .safetensors file, mmapped.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses a whole file image held in memory (used by Open and by the fuzz/unit tests).
  // `source` names the file in errors; `bytes` must outlive the returned tensors.
  static absl::StatusOr<std::map<std::string, TensorView>> ParseImage(
      absl::Span<const uint8_t> bytes, absl::string_view source);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// All tensors of a model directory (single file or sharded).
class SafetensorsModel {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsModel>> OpenDir(absl::string_view dir);
  // The .safetensors files of `dir`: model.safetensors, or the shards its
  // model.safetensors.index.json names (each once, sorted).
  static absl::StatusOr<std::vector<std::string>> FilePaths(absl::string_view dir);

  // The tensor, or NotFound naming the tensor and the directory.
  absl::StatusOr<const TensorView*> Find(absl::string_view name) const;
  bool Has(absl::string_view name) const;
  size_t num_tensors() const { return index_.size(); }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*, std::less<>> index_;
};

// Converts a tensor to float32 into `out` (out.size() must equal numel()). F8_E4M3 values convert
// as stored: a quantised checkpoint's scales are the caller's to apply.
absl::Status ConvertToF32(const TensorView& t, absl::Span<float> out);

// A tensor to write: name, dtype, shape and the raw little-endian bytes (numel * DTypeSize).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Writes a .safetensors file (header with `metadata` as __metadata__, then the data in the order
// given, 8-byte aligned header as the format recommends).
absl::Status WriteSafetensors(const std::string& path, absl::Span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Scalar conversions, exact for bf16/f16/e4m3 -> f32; f32 -> bf16 rounds to nearest even.
float Bf16ToF32(uint16_t v);
float F16ToF32(uint16_t v);
float F8E4M3ToF32(uint8_t v);
uint16_t F32ToBf16(float v);

}  // namespace rankd::model

#endif  // RANKD_MODEL_SAFETENSORS_H_
