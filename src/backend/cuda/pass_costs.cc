#include "rankd/backend/cuda/pass_costs.h"

namespace rankd::cuda {

StageCost PassCosts::Embed() const { return {0, 6 * w_.rows * d_.hidden}; }

StageCost PassCosts::RopeTable() const { return {0, w_.rows * (4 + 4.0 * d_.head_dim)}; }

StageCost PassCosts::Norm(double rows, bool to_fp8) const {
  const double h = d_.hidden;
  return {4 * rows * h, rows * h * (4 + Elem(to_fp8)) + 2 * h + Scales(rows, to_fp8)};
}

StageCost PassCosts::QkvGemm() const {
  const double t = w_.rows, h = d_.hidden, w3 = d_.qkv_width;
  return {2 * t * h * w3, Elem(fp8_.qkv) * (t * h + w3 * h) + Scales(t, fp8_.qkv) +
                              Scales(w3, fp8_.qkv) + 2 * t * w3};
}

StageCost PassCosts::QkvRope(bool q_in_attention, bool encode) const {
  const double t = w_.rows, kv = d_.kv_width;
  return {0, 4 * t * ((q_in_attention ? 0 : d_.q_width) + kv) + (encode ? 4 * t * kv : 0)};
}

StageCost PassCosts::Attention() const {
  const double t = w_.rows, q = d_.q_width, kv = d_.kv_width;
  // attended counts the rows of kv head tiles (a token's G = q / kv query heads each), so the FLOPs
  // of all query heads are 4 x D x attended per kv head.
  return {4 * kv * w_.attended, 2 * (2 * t * q + 2 * t * kv + 2 * w_.ctx_rows * kv)};
}

StageCost PassCosts::AttentionLastRows() const {
  const double n = w_.items, t = w_.rows, q = d_.q_width, kv = d_.kv_width;
  // The keys of every row are still read (each item's last row sees its whole item).
  return {4 * kv * w_.last_attended, 2 * (2 * n * q + 2 * t * kv + 2 * w_.ctx_rows * kv)};
}

StageCost PassCosts::Gather() const {
  return {0, 2 * w_.items * (4.0 * d_.hidden + 2.0 * d_.q_width)};
}

StageCost PassCosts::QuantizeRows(double rows) const {
  return {0, rows * d_.q_width * 3 + Scales(rows, true)};
}

StageCost PassCosts::OProj(double rows) const {
  const double q = d_.q_width, h = d_.hidden;
  return {2 * rows * q * h, Elem(fp8_.o_proj) * (rows * q + q * h) + Scales(rows, fp8_.o_proj) +
                                Scales(h, fp8_.o_proj) + 8 * rows * h};
}

StageCost PassCosts::GateUp(double rows, bool fused_activation) const {
  const double h = d_.hidden, i = d_.intermediate;
  return {4 * rows * h * i, Elem(fp8_.gate_up) * (rows * h + 2 * i * h) +
                                Scales(rows, fp8_.gate_up) + Scales(2 * i, fp8_.gate_up) +
                                (fused_activation ? 2 : 4) * rows * i};
}

StageCost PassCosts::SwiGlu(double rows) const {
  return {0, (4 + Elem(fp8_.down)) * rows * d_.intermediate + Scales(rows, fp8_.down)};
}

StageCost PassCosts::Down(double rows) const {
  const double i = d_.intermediate, h = d_.hidden;
  return {2 * rows * i * h, Elem(fp8_.down) * (rows * i + i * h) + Scales(rows, fp8_.down) +
                                Scales(h, fp8_.down) + 8 * rows * h};
}

StageCost PassCosts::Head() const {
  const double nh = w_.items * d_.hidden;
  return {4 * nh, 4 * nh};
}

}  // namespace rankd::cuda
