// CudaBackend routed-expert ops: the softmax top-k router and the routed SwiGLU experts. The experts run one
// of three ways (moe_kernels.h, MoePath): the decode kernels for few (token, slot) pairs, reading the routed
// ids on the card (no host sync, CUDA-graph friendly); the grouped prompt path (counting sort by expert on
// the card, grouped_gemm); or the per-expert loop that copies the ids to the host (kept for mixed expert
// formats or shapes, rows not readable in units, and missing experts on the prompt path).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/gemm/grouped_gemm.h"
#include "backend/cuda/moe/expert_table.h"
#include "backend/cuda/moe/moe_kernels.h"
#include "backend/cuda/op_args.h"

namespace bloomery::cuda {

void CudaBackend::route_softmax_topk(Tensor& ids, Tensor& weights, const Tensor& logits,
                                     const RouterSpec& r) {
  OpScope op_scope(op_times_, stream_, "router");
  const int64_t T = logits.rows(), E = logits.cols(), k = r.top_k;
  BLOOMERY_NEED(k >= 1 && k <= E && k <= 64, "route_softmax_topk",
                "1 <= top_k <= min(64, " + std::to_string(E) + ")", std::to_string(k));
  BLOOMERY_NEED(ids.type() == ElemType::I32 && ids.numel() == T * k && weights.numel() == T * k,
                "route_softmax_topk",
                "ids (I32) and weights of [" + std::to_string(T) + ", " + std::to_string(k) + "]",
                ids.shape_str() + " " + weights.shape_str());
  cuda::route_softmax_topk(ids.out_i32({&logits}), weights.out_f32({&logits}), logits.f32(), T, E,
                           static_cast<int>(k), r.renormalize, stream_);
}

// ---- routed experts --------------------------------------------------------------------------------------

namespace {

// Decode path up to this many (token, slot) pairs (qwen4_exp, k = 10: T ≤ 32). Measured on H200 at real
// size (E 512, D 2560, I 640, fresh routing per call): at T = 32 the decode kernels still beat the grouped
// GEMMs ~3× in every expert format (NVFP4 1.04 vs 2.91 ms, FP8 block 1.27 vs 3.64, MXFP8 1.15 vs 2.99, BF16
// 0.74 vs 2.12), though pairs that share an expert read it again. Larger T was not measured.
constexpr int64_t kDecodeMaxPairs = 320;

std::atomic<int> g_forced{static_cast<int>(MoePath::Auto)};
std::atomic<int> g_last{static_cast<int>(MoePath::Auto)};

// Prompt tokens per grouped pass: 4,096 unless BLOOMERY_CUDA_MOE_CHUNK=N (a measurement switch, read once).
int64_t moe_prompt_chunk() {
  static const int64_t chunk = env_int("BLOOMERY_CUDA_MOE_CHUNK", 4096, 64, 65536, "E_CUDA_MOE");
  return chunk;
}

}  // namespace

void force_moe_path(MoePath p) {
  g_forced.store(static_cast<int>(p));
}

MoePath moe_last_path() {
  return static_cast<MoePath>(g_last.load());
}

int64_t moe_decode_max_pairs() {
  return kDecodeMaxPairs;
}

void CudaBackend::moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                              std::span<const ExpertWeights> experts, float swiglu_limit) {
  OpScope op_scope(op_times_, stream_, "moe experts");
  const int64_t T = x.rows(), D = x.cols(), k = ids.cols();
  BLOOMERY_NEED(
      ids.type() == ElemType::I32 && ids.rows() == T && weights.numel() == T * k && out.numel() == T * D,
      "moe_experts", "ids/weights [T, k], out [T, D]", ids.shape_str() + " " + out.shape_str());
  const int64_t P = T * k;
  if (T == 0) return;
  const ExpertSet& set = expert_set(this, experts);
  const bool x_aligned = reinterpret_cast<uintptr_t>(x.f32()) % 16 == 0;
  // Decode kernels: every loaded expert of one shape and one format per projection, rows readable in
  // units; missing experts are fine (a pair routed to one yields NaN, as no error can be raised there).
  const bool decode_ok = set.units_ok && set.D == D && x_aligned && P <= 65535;
  const MoePath forced = static_cast<MoePath>(g_forced.load());
  MoePath path = forced;
  if (path == MoePath::Auto) path = P <= kDecodeMaxPairs ? MoePath::Decode : MoePath::Grouped;
  if (path == MoePath::Decode && !decode_ok)
    path = forced == MoePath::Auto ? MoePath::Grouped : MoePath::Loop;
  // Grouped GEMMs take one format and shape for all experts and read every routed expert: with mixed
  // formats or shapes, or a missing expert (the loop names it), the per-expert loop runs instead.
  const bool grouped_ok = set.uniform && set.all_loaded && set.D == D && set.tab.E <= 65535;
  if (path == MoePath::Grouped && !grouped_ok) path = MoePath::Loop;
  g_last.store(static_cast<int>(path));

  if (path == MoePath::Decode) {
    const int64_t I = set.I;
    // h [P, I] then y [P, D]; I is a multiple of the down projection's unit, so y stays 16-byte aligned.
    float* h = static_cast<float*>(scratch_[1].get(static_cast<size_t>(P * (I + D)) * 4 + 64));
    float* y = h + P * I;
    moe_gate_up(set.tab, set.gate_fmt, set.up_fmt, ids.i32(), P, static_cast<int>(k), x.f32(), D, I,
                swiglu_limit, h, stream_);
    moe_down(set.tab, set.down_fmt, ids.i32(), P, h, I, D, y, stream_);
    moe_combine(out.out_f32({&x, &ids, &weights}), y, nullptr, weights.f32(), T, static_cast<int>(k), D,
                stream_);
    return;
  }

  if (path == MoePath::Grouped) {
    const int64_t I = set.I, E = set.tab.E;
    // Tokens per pass: bounds the scratch (pairs × (D + 2·I) floats, 629 MB at qwen4_exp's shapes for 4,096
    // tokens) while giving each expert as many rows per pass as a whole 4K prompt routes to it: a pass costs
    // nearly the same at 10 rows per expert as at 80 (every expert's weights read and converted once per
    // pass).
    const int64_t Tc = std::min(T, moe_prompt_chunk()), Pc = Tc * k;
    auto* ints = static_cast<int32_t*>(scratch_[2].get(static_cast<size_t>(3 * E + 1 + 2 * Pc) * 4 + 64));
    int32_t *counts = ints, *cursor = counts + E, *offsets = cursor + E, *rows = offsets + E + 1,
            *pos = rows + Pc;
    // xs [Pc, D] (reused for the down output once gate and up are done), g [Pc, I], u [Pc, I].
    float* xs = static_cast<float*>(scratch_[1].get(static_cast<size_t>(Pc * (D + 2 * I)) * 4 + 64));
    float *g = xs + Pc * D, *u = g + Pc * I;
    for (int64_t t0 = 0; t0 < T; t0 += Tc) {
      const int64_t tn = std::min(Tc, T - t0), pn = tn * k;
      const int32_t* id = ids.i32() + t0 * k;
      // pn bounds the grouped rows (offsets[E] ≤ pn, grouped_gemm's max_rows): no host sync for counts.
      moe_group(id, pn, static_cast<int>(k), E, counts, cursor, offsets, rows, pos, stream_);
      moe_gather_rows(xs, x.f32() + t0 * D, rows, offsets, E, pn, D, stream_);
      grouped_gemm(set.tab.gate, E, offsets, pn, I, D, set.gate_fmt, xs, g, stream_);
      grouped_gemm(set.tab.up, E, offsets, pn, I, D, set.up_fmt, xs, u, stream_);
      cuda::swiglu(g, g, u, swiglu_limit, pn * I, stream_);
      grouped_gemm(set.tab.down, E, offsets, pn, D, I, set.down_fmt, g, xs, stream_);
      moe_combine(out.out_f32({&x, &ids, &weights}) + t0 * D, xs, pos, weights.f32() + t0 * k, tn,
                  static_cast<int>(k), D, stream_);
    }
    return;
  }

  // ---- the per-expert loop: the routing decides which weights to read, so the ids come to the host ----
  graphs_.not_capturable("moe_experts per-expert loop");
  std::vector<int32_t> h_ids(static_cast<size_t>(P));
  BLOOMERY_CUDA_CHECK(cudaMemcpy(h_ids.data(), ids.i32(), h_ids.size() * 4, cudaMemcpyDeviceToHost),
                      "moe_experts ids " + ids.shape_str());
  const int64_t E = static_cast<int64_t>(experts.size());
  std::vector<std::vector<int32_t>> rows(E), slots(E);
  for (int64_t i = 0; i < P; ++i) {
    const int32_t e = h_ids[i];
    BLOOMERY_NEED(e >= 0 && e < E && experts[e].gate && experts[e].up && experts[e].down, "moe_experts",
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
      BLOOMERY_NEED(ew.gate->cols() == D && ew.up->rows() == ew.gate->rows() && ew.down->rows() == D &&
                        ew.down->cols() == ew.gate->rows(),
                    "moe_experts",
                    "gate/up [I, " + std::to_string(D) + "], down [" + std::to_string(D) + ", I]",
                    ew.gate->name() + " " + shape_string(ew.gate->shape()));
      I = std::max<int64_t>(I, ew.gate->rows());
      max_count = std::max<int64_t>(max_count, static_cast<int64_t>(rows[e].size()));
    }
  cuda::fill(out.out_f32({&x, &ids, &weights}), out.numel(), 0.0f, stream_);
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
