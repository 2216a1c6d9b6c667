// CudaBackend routed-expert ops: the softmax top-k router and the routed SwiGLU experts.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/op_args.h"

namespace bloomery::cuda {

void CudaBackend::route_softmax_topk(Tensor& ids, Tensor& weights, const Tensor& logits,
                                     const RouterSpec& r) {
  const int64_t T = logits.rows(), E = logits.cols(), k = r.top_k;
  need(k >= 1 && k <= E && k <= 64, "route_softmax_topk", "1 <= top_k <= min(64, " + std::to_string(E) + ")",
       std::to_string(k));
  need(ids.type() == ElemType::I32 && ids.numel() == T * k && weights.numel() == T * k, "route_softmax_topk",
       "ids (I32) and weights of [" + std::to_string(T) + ", " + std::to_string(k) + "]",
       ids.shape_str() + " " + weights.shape_str());
  cuda::route_softmax_topk(ids.i32(), weights.f32(), logits.f32(), T, E, static_cast<int>(k), r.renormalize,
                           stream_);
}

// ---- routed experts --------------------------------------------------------------------------------------

void CudaBackend::moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                              std::span<const ExpertWeights> experts, float swiglu_limit) {
  const int64_t T = x.rows(), D = x.cols(), k = ids.cols();
  need(ids.type() == ElemType::I32 && ids.rows() == T && weights.numel() == T * k && out.numel() == T * D,
       "moe_experts", "ids/weights [T, k], out [T, D]", ids.shape_str() + " " + out.shape_str());
  // The routing decides which weights to read: bring the ids to the host and group tokens per expert.
  std::vector<int32_t> h_ids(static_cast<size_t>(T * k));
  BLOOMERY_CUDA_CHECK(cudaMemcpy(h_ids.data(), ids.i32(), h_ids.size() * 4, cudaMemcpyDeviceToHost),
                      "moe_experts ids " + ids.shape_str());
  const int64_t E = static_cast<int64_t>(experts.size());
  std::vector<std::vector<int32_t>> rows(E), slots(E);
  for (int64_t i = 0; i < T * k; ++i) {
    const int32_t e = h_ids[i];
    need(e >= 0 && e < E && experts[e].gate && experts[e].up && experts[e].down, "moe_experts",
         "a loaded expert below " + std::to_string(E), std::to_string(e));
    rows[e].push_back(static_cast<int32_t>(i / k));
    slots[e].push_back(static_cast<int32_t>(i));
  }
  // One upload of every expert's (row, slot) lists, laid out expert after expert.
  std::vector<int32_t> lists;
  std::vector<int64_t> at(E, 0);
  for (int64_t e = 0; e < E; ++e) {
    if (rows[e].empty()) continue;
    at[e] = static_cast<int64_t>(lists.size());
    lists.insert(lists.end(), rows[e].begin(), rows[e].end());
    lists.insert(lists.end(), slots[e].begin(), slots[e].end());
  }
  const auto* d_lists = static_cast<const int32_t*>(stage(0, lists.data(), lists.size() * 4));
  int64_t I = 0, max_count = 0;
  for (int64_t e = 0; e < E; ++e)
    if (!rows[e].empty()) {
      const ExpertWeights& ew = experts[e];
      need(ew.gate->cols() == D && ew.up->rows() == ew.gate->rows() && ew.down->rows() == D &&
               ew.down->cols() == ew.gate->rows(),
           "moe_experts", "gate/up [I, " + std::to_string(D) + "], down [" + std::to_string(D) + ", I]",
           ew.gate->name() + " " + shape_string(ew.gate->shape()));
      I = std::max<int64_t>(I, ew.gate->rows());
      max_count = std::max<int64_t>(max_count, static_cast<int64_t>(rows[e].size()));
    }
  cuda::fill(out.f32(), out.numel(), 0.0f, stream_);
  if (max_count == 0) return;
  // Scratch: xs [c, D], gate [c, I], up [c, I], ys [c, D].
  float* base =
      static_cast<float*>(scratch_[1].get(static_cast<size_t>(max_count * (2 * D + 2 * I)) * 4 + 64));
  float *xs = base, *g = xs + max_count * D, *u = g + max_count * I, *ys = u + max_count * I;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = static_cast<int64_t>(rows[e].size());
    if (c == 0) continue;
    const ExpertWeights& ew = experts[e];
    const int64_t Ie = ew.gate->rows();
    const int32_t* d_rows = d_lists + at[e];
    const int32_t* d_slots = d_rows + c;
    gather_tokens(xs, x.f32(), d_rows, c, D, stream_);
    linear(g, xs, c, device_weight(*ew.gate, "moe_experts"), 0, Ie);
    linear(u, xs, c, device_weight(*ew.up, "moe_experts"), 0, Ie);
    cuda::swiglu(g, g, u, swiglu_limit, c * Ie, stream_);
    linear(ys, g, c, device_weight(*ew.down, "moe_experts"), 0, D);
    scatter_add_scaled(out.f32(), ys, d_rows, d_slots, weights.f32(), c, D, stream_);
  }
}

}  // namespace bloomery::cuda
