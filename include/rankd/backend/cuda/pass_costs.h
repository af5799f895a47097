// The profiler's cost model (RANKD_CUDA_PROFILE=1, stage_profiler.h): for each stage of a forward
// pass, the two numbers of METHOD.md, the floating-point operations it must do and the fewest
// bytes it must move, counted for the live rows (the padding rows' work shows up in the table as
// lower efficiency). Plain arithmetic, apart from the forward pass that marks the stages: built and
// tested without CUDA.
//
// Operand bytes follow the GEMM's precision: 2 an element in bf16, 1 in e4m3 plus 4 per row of
// per-row scales (activation rows and weight rows). The residual stream is fp32, read and written
// by the layers that add into it (8 bytes an element).
#ifndef RANKD_BACKEND_CUDA_PASS_COSTS_H_
#define RANKD_BACKEND_CUDA_PASS_COSTS_H_

#include "rankd/backend/cuda/pass_plan.h"

namespace rankd::cuda {

struct StageCost {
  double flops = 0;
  double bytes = 0;
};

// The widths a pass's stages work on.
struct PassDims {
  int hidden = 0;        // H
  int q_width = 0;       // num_heads * head_dim
  int kv_width = 0;      // num_kv_heads * head_dim
  int qkv_width = 0;     // the fused projection's output: q + k + v (+ what a model adds)
  int intermediate = 0;  // I
  int head_dim = 0;      // D
};

// Which linear layers read e4m3 inputs (precision fp8 and the layer in the fp8 set).
struct Fp8Inputs {
  bool qkv = false;
  bool o_proj = false;
  bool gate_up = false;
  bool down = false;
};

// Stage costs of one pass. `rows` arguments are the rows the stage runs on: the pass's live rows
// (Rows()), or the items' last rows (Items()) in the last layer after the gather.
class PassCosts {
 public:
  PassCosts(const PassDims& dims, const PassWork& work, const Fp8Inputs& fp8)
      : d_(dims), w_(work), fp8_(fp8) {}

  double Rows() const { return w_.rows; }
  double Items() const { return w_.items; }

  StageCost Embed() const;                         // ids in, fp32 rows of x out
  StageCost RopeTable() const;                     // the pass's (cos, sin) table
  StageCost Norm(double rows, bool to_fp8) const;  // fp32 x in, bf16 (or e4m3 + scales) out
  StageCost QkvGemm() const;                       // normed x . Wqkv^T, bf16 out
  StageCost QkvRope(bool q_in_attention, bool encode) const;  // RoPE (and the split) in place
  StageCost Attention() const;                                // q, own K/V, the contexts' K/V, out
  StageCost AttentionLastRows() const;  // the last layer's: the items' last rows' q and out alone
  StageCost Gather() const;                                   // the items' last rows of x and attn
  StageCost QuantizeRows(double rows) const;                  // attn out to e4m3 (o_proj's input)
  StageCost OProj(double rows) const;                         // x += attn . Wo^T
  // gate_up; `fused_activation`: the Hopper GEMM writes act = SwiGLU(gate, up), not gate_up.
  StageCost GateUp(double rows, bool fused_activation) const;
  StageCost SwiGlu(double rows) const;  // gate_up in, act (bf16 or e4m3) out
  StageCost Down(double rows) const;    // x += act . Wdown^T
  StageCost Head() const;               // final norm and head of the items' rows

 private:
  // Bytes of a GEMM operand element, and of per-row scales, in the layer's precision.
  static double Elem(bool fp8) { return fp8 ? 1.0 : 2.0; }
  static double Scales(double rows, bool fp8) { return fp8 ? 4 * rows : 0.0; }

  PassDims d_;
  PassWork w_;
  Fp8Inputs fp8_;
};

}  // namespace rankd::cuda

#endif  // RANKD_BACKEND_CUDA_PASS_COSTS_H_
