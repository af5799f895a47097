// Embedding gather with embedding-row injection.
#ifndef RANKD_KERNELS_EMBEDDING_CUH_
#define RANKD_KERNELS_EMBEDDING_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include "kernels/launch.cuh"

namespace rankd::kernels {

// out[t] = tokens[t] >= 0 ? bf16(table[tokens[t]] * scale) : rows[-tokens[t] - 1], widened to
// fp32. With scale == 1 the table row is copied; otherwise the product is rounded to bf16, as HF's
// bf16 Gemma does (GemmaTextScaledWordEmbedding: the row times the bf16 scale, in bf16). `scale`
// should itself be a bf16 value. Injected rows are taken as given.
//   tokens [T] int32; table [V, H] bf16 row-major; rows [R, H] fp32 row-major (may be null when
//   no token is negative); out [T, H] fp32 row-major (the residual stream).
// Ids are not checked here: the caller validates them against V and R.
cudaError_t LaunchEmbeddingGather(const int32_t* tokens, int num_tokens, const __nv_bfloat16* table,
                                  const float* rows, int hidden, float scale, float* out,
                                  LaunchStream stream);

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_EMBEDDING_CUH_
