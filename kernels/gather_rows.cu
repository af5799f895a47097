// Row gather. Thread mapping: one block of 128 threads per output row (blockIdx.x = i); the
// threads stride over the row's 16-byte chunks, so source and destination rows are read and
// written coalesced.
#include "kernels/common.cuh"
#include "kernels/gather_rows.cuh"

namespace rankd::kernels {
namespace {

constexpr int kThreads = 128;

__global__ void GatherRowsKernel(const uint4* __restrict__ in, const int32_t* __restrict__ rows,
                                 const int32_t* __restrict__ count, int64_t chunks,
                                 uint4* __restrict__ out) {
  EnterGrid();
  const int i = blockIdx.x;
  uint4* dst = out + i * chunks;
  if (i < *count) {
    const uint4* src = in + rows[i] * chunks;
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) dst[c] = src[c];
  } else {
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) dst[c] = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace

cudaError_t LaunchGatherRows(const void* in, const int32_t* rows, const int32_t* count,
                             int max_rows, int64_t row_bytes, void* out, LaunchStream stream) {
  if (row_bytes % 16 != 0) return cudaErrorInvalidValue;
  if (max_rows == 0) return cudaSuccess;
  return LaunchKernel(GatherRowsKernel, max_rows, kThreads, 0, stream,
                      static_cast<const uint4*>(in), rows, count, row_bytes / 16,
                      static_cast<uint4*>(out));
}

}  // namespace rankd::kernels
