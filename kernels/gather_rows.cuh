// Row gather: the last layer runs its o_proj and MLP on the rows that feed the score head only
// (each item's last token), gathered into a compact buffer.
#ifndef RANKD_KERNELS_GATHER_ROWS_CUH_
#define RANKD_KERNELS_GATHER_ROWS_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include "kernels/launch.cuh"

namespace rankd::kernels {

// out[i] = in[rows[i]] for i < *count, zeros for *count <= i < max_rows.
//   in [*, row_bytes] and out [max_rows, row_bytes] row-major, 16-byte aligned, row_bytes a
//   multiple of 16; rows [max_rows] int32 (the first *count read); count device, 1 int32.
// cudaErrorInvalidValue when row_bytes is not a multiple of 16.
cudaError_t LaunchGatherRows(const void* in, const int32_t* rows, const int32_t* count,
                             int max_rows, int64_t row_bytes, void* out, LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_GATHER_ROWS_CUH_
