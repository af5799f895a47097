// The CUDA backend's device context (private to src/backend/cuda): DeviceContext, the device,
// stream, lock and prefix memory pool a backend and its prefixes share, and CudaPrefix, an
// encoded prefix (its K/V in that pool). Moved out of cuda_backend.cc as it was.
#ifndef RANKD_SRC_BACKEND_CUDA_DEVICE_CONTEXT_H_
#define RANKD_SRC_BACKEND_CUDA_DEVICE_CONTEXT_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kv_layers.cuh"
#include "rankd/backend/backend.h"
#include "rankd/backend/cuda/cuda_status.h"
#include "rankd/common/status.h"

namespace rankd::cuda::internal {

using bf16 = __nv_bfloat16;
using backend::HeadSpec;
using backend::ItemBatch;
using backend::PrefixState;
using kernels::KvLayers;
using model::ModelConfig;

inline constexpr size_t kGemmWorkspaceBytes = 32 << 20;
// Where the prefix pool places its allocations: each starts on a multiple of this (measured on an
// H200, CUDA 12: allocations of 513 bytes lie 1024 apart), so a prefix holds its size rounded up.
inline constexpr size_t kPrefixPoolAlignment = 512;

// The device and the stream all of a backend's work runs on, the lock that serialises the
// stream's users, and the memory pool of the prefixes' K/V. Shared with the prefixes the backend
// made, so that a prefix outliving its backend can still free its K/V in stream order, and never
// while a graph is being captured on the stream (a free then would be recorded into the graph).
// Recursive: a prefix can die inside a locked call (EncodePrefix's error paths).
//
// The prefix pool is the prefixes' own, with release threshold 0: what evicted prefixes free goes
// back to the driver at the stream's next synchronisation (every score pass ends with one), so the
// device memory held for prefixes follows what the prefix cache counts. (In the device's default
// pool, freed K/V stayed reserved up to its release threshold, for whatever else allocated there.)
// The pool reserves memory in chunks (32 MiB on an H200), so what it holds exceeds what its live
// prefixes use by the free space of partly used chunks.
class DeviceContext {
 public:
  static absl::StatusOr<std::shared_ptr<DeviceContext>> Create(int device) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    cudaStream_t stream = nullptr;
    RANKD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::shared_ptr<DeviceContext> ctx(new DeviceContext(device, stream));
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    RANKD_CUDA_RETURN_IF_ERROR(cudaMemPoolCreate(&ctx->prefix_pool_, &props));
    uint64_t threshold = 0;
    RANKD_CUDA_RETURN_IF_ERROR(
        cudaMemPoolSetAttribute(ctx->prefix_pool_, cudaMemPoolAttrReleaseThreshold, &threshold));
    return ctx;
  }
  ~DeviceContext() {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (prefix_pool_ != nullptr) cudaMemPoolDestroy(prefix_pool_);
    cudaStreamDestroy(stream_);
  }
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cudaMemPool_t prefix_pool() const { return prefix_pool_; }
  std::recursive_mutex& mu() { return mu_; }

  // The prefix pool's attribute `attr` (bytes; 0 if it cannot be read).
  uint64_t PrefixPoolBytes(cudaMemPoolAttr attr) const {
    uint64_t value = 0;
    if (cudaMemPoolGetAttribute(prefix_pool_, attr, &value) != cudaSuccess) return 0;
    return value;
  }

 private:
  DeviceContext(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  int device_;
  cudaStream_t stream_;
  cudaMemPool_t prefix_pool_ = nullptr;
  std::recursive_mutex mu_;
};

// An encoded prefix. IBPC: the K/V of every layer on the device. Multi-item: the ids only (the
// prefix runs again inside each packed pass).
class CudaPrefix final : public PrefixState {
 public:
  CudaPrefix(const void* owner, std::shared_ptr<DeviceContext> ctx, std::vector<int32_t> ids)
      : owner_(owner), ctx_(std::move(ctx)), ids_(std::move(ids)) {}
  ~CudaPrefix() override {
    if (kv_ != nullptr) {
      std::lock_guard<std::recursive_mutex> lock(ctx_->mu());
      cudaSetDevice(ctx_->device());
      cudaFreeAsync(kv_, ctx_->stream());
    }
  }

  int num_tokens() const override { return static_cast<int>(ids_.size()); }
  // The K/V as the prefix pool places it (rounded up to its alignment), and the ids.
  size_t bytes() const override {
    const size_t kv = (kv_bytes_ + kPrefixPoolAlignment - 1) / kPrefixPoolAlignment;
    return kv * kPrefixPoolAlignment + ids_.capacity() * sizeof(int32_t);
  }

  absl::Status AllocateKv(size_t bytes) {
    RANKD_CUDA_RETURN_IF_ERROR(cudaMallocFromPoolAsync(reinterpret_cast<void**>(&kv_), bytes,
                                                       ctx_->prefix_pool(), ctx_->stream()));
    kv_bytes_ = bytes;
    return absl::OkStatus();
  }

  const void* owner() const { return owner_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  bf16* kv() const { return kv_; }
  // The cache as the attention kernel reads it: [L, 2, P, Nkv, D], K then V per layer.
  KvLayers Layers(int64_t kv_width) const {
    const int64_t P = num_tokens();
    if (kv_ == nullptr) return KvLayers{};
    return KvLayers{kv_, kv_ + P * kv_width, 2 * P * kv_width, kv_width};
  }

 private:
  const void* owner_;
  std::shared_ptr<DeviceContext> ctx_;
  std::vector<int32_t> ids_;  // [P]
  bf16* kv_ = nullptr;        // [L, 2, P, Nkv, D] bf16: per layer K then V (IBPC only)
  size_t kv_bytes_ = 0;
};

}  // namespace rankd::cuda::internal

#endif  // RANKD_SRC_BACKEND_CUDA_DEVICE_CONTEXT_H_
