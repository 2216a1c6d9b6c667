// CudaBackend qwen4_exp family ops (hyper-connection read/write, PLE gate, QSA block indexer): shape checks,
// the host-side RoPE tables of the block keys, scratch and the launches of the kernels in hc_ple.cu and
// qsa_index.cu (declared in qwen4_kernels.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/family/qwen4_kernels.h"
#include "backend/cuda/op_args.h"
#include "backend/op_checks.h"

namespace bloomery::cuda {
namespace {

// Scores of at most this many (query, block) pairs are held at once; longer prompts run in query chunks.
constexpr int64_t kMaxScoreFloats = int64_t{1} << 24;  // 64 MiB

std::string dims(std::initializer_list<int64_t> d) {
  return shape_string(std::vector<int64_t>(d));
}

// hc_inject / hc_inject_norm: X [T, n*D] and inj [T, n] for y [T, D].
void check_hc_inject_args(const Tensor& X, const Tensor& y, const Tensor& inj, const char* op) {
  const int64_t T = y.rows(), D = y.cols(), n = inj.cols();
  BLOOMERY_NEED(X.numel() == T * n * D && inj.rows() == T, op,
                "X [T, n*D], inj [T, n] for y " + y.shape_str(), X.shape_str() + ", " + inj.shape_str());
}

}  // namespace

void CudaBackend::hc_read_mix(Tensor& u, const Tensor& m, const Tensor& xn, int n) {
  OpScope op_scope(op_times_, stream_, "hc read mix");
  const int64_t T = u.rows(), D = u.cols();
  BLOOMERY_NEED(n >= 1 && m.numel() == T * n * D && xn.numel() == T * n * D, "hc_read_mix",
                "m, xn [T, n*D] with u " + u.shape_str() + ", n " + std::to_string(n),
                m.shape_str() + ", " + xn.shape_str());
  cuda::hc_read_mix(u.out_f32({&m, &xn}), m.f32(), xn.f32(), T, n, D, stream_);
}

// One pass for decode rows when the block ops are on (family/hc_ple.cu); prompts take the product's GEMM.
void CudaBackend::hc_up_read_mix(Tensor& u, const Tensor& a, const Weight& up, const Tensor& xn, int n) {
  const int64_t T = a.rows(), D = u.cols();
  const DeviceWeight& dw = device_weight(up, "hc_up_read_mix");
  if (!block_ops_ || static_cast<int64_t>(dw.rows) != up.rows() ||
      static_cast<int64_t>(dw.cols) != up.cols() || !cuda::hc_up_mix_applies(dw, a.f32(), T, n))
    return Backend::hc_up_read_mix(u, a, up, xn, n);
  OpScope op_scope(op_times_, stream_, "hc up + read mix");
  BLOOMERY_NEED(up.rows() == n * D && up.cols() == a.cols() && xn.numel() == T * n * D && u.rows() == T,
                "hc_up_read_mix",
                "up [n*D, K], a [T, K], xn [T, n*D] for u " + u.shape_str() + ", n " + std::to_string(n),
                shape_string(up.shape()) + ", " + a.shape_str() + ", " + xn.shape_str());
  cuda::hc_up_mix(u.out_f32({&a, &xn}), a.f32(), dw, xn.f32(), T, n, D, stream_);
}

void CudaBackend::hc_inject(Tensor& X, const Tensor& y, const Tensor& inj) {
  OpScope op_scope(op_times_, stream_, "hc inject");
  const int64_t T = y.rows(), D = y.cols(), n = inj.cols();
  check_hc_inject_args(X, y, inj, "hc_inject");
  cuda::hc_inject(X.f32(), y.f32(), inj.f32(), T, static_cast<int>(n), D, stream_);
}

void CudaBackend::hc_inject_norm(Tensor& X, const Tensor& y, const Tensor& inj, Tensor& xn, const Weight* w,
                                 float eps, NormKind kind, int64_t group) {
  const int64_t T = y.rows(), D = y.cols(), n = inj.cols();
  if (!block_ops_ || group != D) return Backend::hc_inject_norm(X, y, inj, xn, w, eps, kind, group);
  OpScope op_scope(op_times_, stream_, "hc inject + norm");
  check_hc_inject_args(X, y, inj, "hc_inject_norm");
  const RmsNormShape sh = check_rms_norm_args(xn, X, w, kind, group);
  const float* wp = kind == NormKind::Unweighted ? nullptr : param_f32(*w, "hc_inject_norm");
  float* xp = X.f32();
  cuda::hc_inject_norm(xp, y.f32(), inj.f32(), xn.out_f32({&X}), wp, eps, static_cast<int>(kind), T,
                       static_cast<int>(n), D, sh.per_group, stream_);
}

void CudaBackend::ple_gate(Tensor& G, const Tensor& kn, const Tensor& qn, const Tensor& v) {
  OpScope op_scope(op_times_, stream_, "ple gate");
  const int64_t T = v.rows(), D = v.cols();
  const int64_t n = T * D > 0 ? G.numel() / (T * D) : 0;
  BLOOMERY_NEED(T * D > 0 && G.numel() == T * n * D && kn.numel() == G.numel() && qn.numel() == G.numel(),
                "ple_gate", "G, kn, qn [T, n*D] for v " + v.shape_str(),
                G.shape_str() + ", " + kn.shape_str() + ", " + qn.shape_str());
  cuda::ple_gate(G.out_f32({&kn, &qn, &v}), kn.f32(), qn.f32(), v.f32(), T, static_cast<int>(n), D, stream_);
}

void CudaBackend::qsa_index_append(Tensor& raw, Tensor& blocks, const Tensor& kraw, int64_t pos0,
                                   const Weight& k_norm, const QsaIndexSpec& spec) {
  OpScope op_scope(op_times_, stream_, "qsa index append");
  const int64_t T = kraw.rows(), d = kraw.cols(), c = spec.compress;
  BLOOMERY_NEED(
      raw.cols() == d && blocks.cols() == d && pos0 >= 0 && pos0 + T <= raw.rows() && k_norm.numel() == d,
      "qsa_index_append",
      "raw/blocks [cap, " + std::to_string(d) + "] holding positions up to " + std::to_string(pos0 + T),
      raw.shape_str() + ", " + blocks.shape_str());
  BLOOMERY_NEED(c >= 1 && spec.rot_dim >= 0 && spec.rot_dim % 2 == 0 && spec.rot_dim <= d, "qsa_index_append",
                "compress >= 1 and an even rot_dim <= " + std::to_string(d),
                "compress " + std::to_string(c) + ", rot_dim " + std::to_string(spec.rot_dim));
  if (T == 0) return;
  BLOOMERY_CUDA_CHECK(cudaMemcpyAsync(raw.f32() + pos0 * d, kraw.f32(), T * d * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_),
                      "qsa_index_append raw keys " + kraw.shape_str());
  const int64_t b0 = pos0 / c, b1 = (pos0 + T) / c;  // blocks whose last token is in this call
  if (b1 <= b0) return;
  BLOOMERY_NEED(b1 - 1 < blocks.rows(), "qsa_index_append", "room for block " + std::to_string(b1 - 1),
                blocks.shape_str());
  // RoPE tables of the blocks' first positions with the CPU op's libm calls in f32 (rope_neox), so the pooled
  // keys are bit-identical to the CPU backend's; cos/sin on the card round differently.
  const int half = spec.rot_dim / 2;
  const int64_t nblk = b1 - b0;
  std::vector<float> tab(2 * nblk * half + 1);
  const float theta = static_cast<float>(spec.theta);
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(spec.rot_dim));
  for (int64_t bi = 0; bi < nblk; ++bi) {
    const float pos = static_cast<float>((b0 + bi) * c + spec.pos_offset);
    for (int i = 0; i < half; ++i) {
      const float ang = pos * inv_freq[i];
      tab[bi * half + i] = std::cos(ang);
      tab[(nblk + bi) * half + i] = std::sin(ang);
    }
  }
  const auto* dtab = static_cast<const float*>(stage(1, tab.data(), tab.size() * sizeof(float)));
  cuda::qsa_pool_blocks(blocks.f32(), raw.f32(), param_f32(k_norm, "qsa_index_append"), dtab,
                        dtab + nblk * half, b0, nblk, static_cast<int>(d), static_cast<int>(c), spec.rot_dim,
                        spec.eps, stream_);
}

int64_t CudaBackend::qsa_index_select(Tensor& allowed, const Tensor& qi, const Tensor& blocks, int64_t q0,
                                      const QsaIndexSpec& spec) {
  OpScope op_scope(op_times_, stream_, "qsa index select");
  BLOOMERY_NEED(qi.ndim() == 3, "qsa_index_select", "qi [T, Hi, dh]", qi.shape_str());
  const int64_t T = qi.dim(0), Hi = qi.dim(1), d = qi.dim(2), S = allowed.cols(), c = spec.compress;
  BLOOMERY_NEED(allowed.rows() == T && S >= q0 + T && q0 >= 0 && blocks.cols() == d, "qsa_index_select",
                "allowed [" + std::to_string(T) + ", >=" + std::to_string(q0 + T) + "]", allowed.shape_str());
  BLOOMERY_NEED(c >= 1 && spec.block_topk >= 0, "qsa_index_select", "compress >= 1 and block_topk >= 0",
                "compress " + std::to_string(c) + ", block_topk " + std::to_string(spec.block_topk));
  const int64_t nb_max = (q0 + T) / c;
  BLOOMERY_NEED(blocks.rows() >= nb_max, "qsa_index_select", "blocks [>=" + std::to_string(nb_max) + ", dh]",
                blocks.shape_str());
  if (T == 0) return 0;
  const float inv = 1.0f / std::sqrt(static_cast<float>(d));  // as the CPU op
  // queries per chunk: bounded by the scratch and by the score grid's y dimension (16 queries per CTA row)
  const int64_t tc =
      std::clamp<int64_t>(kMaxScoreFloats / std::max<int64_t>(nb_max, 1), 1, std::min<int64_t>(T, 1 << 20));
  auto scores = pool_.get(static_cast<size_t>(std::max<int64_t>(tc * nb_max, 1)) * sizeof(float),
                          "qsa_index_select scores " + dims({tc, nb_max}));
  // In a captured step the count accumulates in the backend's counter and is read after the step.
  std::shared_ptr<void> hold;
  int* dties = tie_counter(hold, "qsa_index_select");
  float* sc = static_cast<float*>(scores.get());
  for (int64_t t0 = 0; t0 < T; t0 += tc) {  // one launch pair per chunk of queries, never per query
    const int64_t n = std::min(tc, T - t0);
    cuda::qsa_block_scores(sc, nb_max, qi.f32() + t0 * Hi * d, blocks.f32(), n, static_cast<int>(Hi),
                           static_cast<int>(d), q0 + t0, static_cast<int>(c), inv, stream_);
    cuda::qsa_select_blocks(allowed.f32() + t0 * S, S, sc, nb_max, n, q0 + t0, static_cast<int>(c),
                            spec.block_topk, dties, stream_);
  }
  return read_ties(dties, "qsa_index_select");  // eager: a device→host copy that waits for the stream
}

}  // namespace bloomery::cuda
