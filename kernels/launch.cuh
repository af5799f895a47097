// How rankd's kernels launch: on a LaunchStream, which says whether a kernel may start before the
// previous kernel of its stream has finished (programmatic dependent launch, PDL: sm_90 and later;
// a no-op elsewhere), through LaunchKernel; and, on the device, EnterGrid, which every kernel runs
// before it touches memory that another kernel writes or reads.
//
// With PDL on, kernel B launched after kernel A may be resident while A still runs (its launch,
// block scheduling and whatever it does before EnterGrid overlap A's tail) once every block of A
// has passed its own EnterGrid (griddepcontrol.launch_dependents) or exited. B's EnterGrid
// (griddepcontrol.wait) returns once A has completed and its writes are visible. The chain is safe
// because every kernel waits before it releases its dependents: when B starts, every kernel before
// A has completed, so B's pre-EnterGrid work may read only what no kernel writes (weights), and
// write nothing in global memory. A kernel launched without PDL, or after an operation that is not
// a kernel (a copy, cuBLAS's GEMMs), waits for it as stream order always did; EnterGrid then
// returns at once. Under stream capture the attribute becomes a programmatic edge of the graph.
#ifndef RANKD_KERNELS_LAUNCH_CUH_
#define RANKD_KERNELS_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace rankd::kernels {

// A stream, and whether kernels launched on it may overlap the tail of the one before (PDL).
// Converts from a plain stream (PDL off), so tests and tools pass a cudaStream_t as before.
struct LaunchStream {
  LaunchStream(cudaStream_t s) : stream(s) {}  // NOLINT(google-explicit-constructor)
  LaunchStream(cudaStream_t s, bool overlap) : stream(s), pdl(overlap) {}
  cudaStream_t stream = nullptr;
  bool pdl = false;
};

// Whether the current device takes PDL (compute capability 9.0 or later).
inline bool ProgrammaticLaunchSupported() {
  int device = 0, major = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
         major >= 9;
}

// kernel<<<grid, block, smem, s.stream>>>(args...) in clusters of `cluster` blocks along x (1: no
// clusters), with the PDL attribute where s.pdl; returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchClusterKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                LaunchStream s, int cluster, Args&&... args) {
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (cluster > 1) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = static_cast<unsigned>(cluster);
    attrs[n].val.clusterDim.y = 1;
    attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  if (s.pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = s.stream;
  config.attrs = attrs;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, s.stream>>>(args...), with the PDL attribute where s.pdl.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         LaunchStream s, Args&&... args) {
  return LaunchClusterKernel(kernel, grid, block, smem, s, 1, std::forward<Args>(args)...);
}

#ifdef __CUDACC__
// Waits until the kernels this grid depends on have completed and their writes are visible
// (griddepcontrol.wait; returns at once where the grid was not launched with PDL).
__device__ __forceinline__ void AwaitPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel of the stream (if launched with PDL) start once every block of this grid
// has done so or exited (griddepcontrol.launch_dependents).
__device__ __forceinline__ void ReleaseDependentGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// What every kernel runs before its first access to memory that other kernels write or read:
// the wait, then the release (in that order: see the file's comment).
__device__ __forceinline__ void EnterGrid() {
  AwaitPriorGrids();
  ReleaseDependentGrids();
}
#endif  // __CUDACC__

}  // namespace rankd::kernels

#endif  // RANKD_KERNELS_LAUNCH_CUH_
