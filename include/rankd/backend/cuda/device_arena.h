// Memory for the CUDA backend: one block per purpose (weights, per-batch workspace, pinned host
// staging), carved into 128-byte-aligned buffers. Carving is plain offset arithmetic, so the same
// code that lays out a block can first measure it (a Carver over base 0).
#ifndef RANKD_BACKEND_CUDA_DEVICE_ARENA_H_
#define RANKD_BACKEND_CUDA_DEVICE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace rankd::cuda {

inline constexpr size_t kArenaAlignment = 128;

constexpr size_t AlignUp(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Hands out consecutive aligned sub-buffers of a block starting at `base` (which must itself be
// aligned). Over base 0 it only counts: bytes() is then the block size the layout needs.
class Carver {
 public:
  explicit Carver(void* base = nullptr) : base_(reinterpret_cast<uintptr_t>(base)) {}

  template <typename T>
  T* Take(size_t count) {
    T* p = reinterpret_cast<T*>(base_ + offset_);
    offset_ += AlignUp(count * sizeof(T));
    return p;
  }
  size_t bytes() const { return offset_; }

 private:
  uintptr_t base_;
  size_t offset_ = 0;
};

// One allocation, device memory (cudaMalloc) or page-locked host memory (cudaMallocHost),
// released in the destructor.
class Arena {
 public:
  enum class Kind { kDevice, kPinnedHost };

  static absl::StatusOr<std::unique_ptr<Arena>> Create(Kind kind, size_t bytes);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void* base() const { return base_; }
  size_t capacity() const { return capacity_; }
  Carver carver() const { return Carver(base_); }

 private:
  Arena(Kind kind, void* base, size_t capacity) : kind_(kind), base_(base), capacity_(capacity) {}
  Kind kind_;
  void* base_;
  size_t capacity_;
};

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_DEVICE_ARENA_H_
