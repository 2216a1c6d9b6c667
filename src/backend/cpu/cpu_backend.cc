// CpuBackend: construction, host memory, weights (decoded to f32 at load) and the elementwise ops.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/op_checks.h"
#include "formats/elements.h"
#include "formats/weight_record.h"

namespace bloomery::cpu {

CpuBackend::CpuBackend(int threads) : PoolHolder(threads), CpuFamilyOps(*owned_pool_) {}

float act_apply(Act act, float x) {
  switch (act) {
    case Act::None:
      return x;
    case Act::Silu:
      return x / (1.0f + std::exp(-x));
    case Act::Sigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case Act::Softplus:  // torch: threshold 20, beta 1
      return x > 20.0f ? x : std::log1p(std::exp(x));
    case Act::Relu:
      return x > 0.0f ? x : 0.0f;
  }
  return x;
}

namespace {

std::shared_ptr<Storage> host_storage(size_t bytes) {
  auto st = std::make_shared<Storage>();
  // 64-byte aligned, zero-filled; +1 element so a zero-sized tensor still has a valid pointer.
  size_t padded = (bytes + 64 + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, padded);
  st->data = p;
  st->bytes = bytes;
  st->owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  return st;
}

void same_numel(std::string_view op, const Tensor& a, const Tensor& b) {
  BLOOMERY_NEED(a.numel() == b.numel(), op, a.shape_str() + " elements", b.shape_str());
}

}  // namespace

Tensor CpuBackend::alloc(std::vector<int64_t> shape, ElemType type) {
  int64_t n = 1;
  for (int64_t d : shape) {
    BLOOMERY_NEED(d >= 0, "alloc", "non-negative dims", shape_string(shape));
    n *= d;
  }
  return Tensor(host_storage(static_cast<size_t>(n) * elem_size(type)), type, std::move(shape));
}

Tensor CpuBackend::upload(std::span<const float> data, std::vector<int64_t> shape) {
  Tensor t = alloc(std::move(shape));
  BLOOMERY_NEED(static_cast<size_t>(t.numel()) == data.size(), "upload", t.shape_str(),
                std::to_string(data.size()));
  std::memcpy(t.f32(), data.data(), data.size() * sizeof(float));
  return t;
}

std::vector<float> CpuBackend::download(const Tensor& t) {
  std::vector<float> r(static_cast<size_t>(t.numel()));
  if (t.type() == ElemType::I32) {
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(t.i32()[i]);
  } else if (t.type() == ElemType::BF16) {
    for (size_t i = 0; i < r.size(); ++i) r[i] = elem::bf16(t.bf16()[i]);
  } else {
    std::memcpy(r.data(), t.f32(), r.size() * sizeof(float));
  }
  return r;
}

void CpuBackend::copy(Tensor& dst, const Tensor& src) {
  same_numel("copy", dst, src);
  check_copy_types(dst, src);
  const int64_t n = src.numel();
  if (dst.type() == src.type()) {
    std::memmove(dst.bytes_ptr(), src.bytes_ptr(), src.nbytes());
  } else if (dst.type() == ElemType::BF16) {  // a cache write: f32 rows rounded (never overlapping)
    const float* s = src.f32();
    uint16_t* d = dst.bf16();
    for (int64_t i = 0; i < n; ++i) d[i] = elem::bf16_rne(s[i]);
  } else {
    const uint16_t* s = src.bf16();
    float* d = dst.f32();
    for (int64_t i = 0; i < n; ++i) d[i] = elem::bf16(s[i]);
  }
}

void CpuBackend::fill(Tensor& t, float value) {
  if (t.type() == ElemType::BF16)
    std::fill_n(t.bf16(), t.numel(), elem::bf16_rne(value));
  else
    std::fill_n(t.f32(), t.numel(), value);
}

Weight CpuBackend::upload_weight(std::string name, std::span<const float> data, std::vector<int64_t> shape) {
  Tensor t = upload(data, shape);
  return make_weight(std::move(name), std::move(shape), std::move(t));
}

// ---- elementwise
// ----------------------------------------------------------------------------------------------

void CpuBackend::add(Tensor& out, const Tensor& a, const Tensor& b) {
  same_numel("add", out, a);
  same_numel("add", a, b);
  float *o = out.f32(), *pa = a.f32(), *pb = b.f32();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = pa[i] + pb[i];
}

void CpuBackend::add_scaled(Tensor& out, const Tensor& a, const Tensor& b, float s) {
  same_numel("add_scaled", out, a);
  same_numel("add_scaled", a, b);
  float *o = out.f32(), *pa = a.f32(), *pb = b.f32();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = pa[i] + s * pb[i];
}

void CpuBackend::mul(Tensor& out, const Tensor& a, const Tensor& b) {
  same_numel("mul", out, a);
  same_numel("mul", a, b);
  float *o = out.f32(), *pa = a.f32(), *pb = b.f32();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = pa[i] * pb[i];
}

void CpuBackend::scale(Tensor& out, const Tensor& x, float s) {
  same_numel("scale", out, x);
  float *o = out.f32(), *px = x.f32();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = px[i] * s;
}

void CpuBackend::activate(Tensor& out, const Tensor& x, Act act) {
  same_numel("activate", out, x);
  float *o = out.f32(), *px = x.f32();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = act_apply(act, px[i]);
}

void CpuBackend::sigmoid_mul(Tensor& out, const Tensor& x, const Tensor& gate) {
  same_numel("sigmoid_mul", out, x);
  same_numel("sigmoid_mul", x, gate);
  float *o = out.f32(), *px = x.f32(), *pg = gate.f32();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = px[i] * act_apply(Act::Sigmoid, pg[i]);
}

void CpuBackend::scale_rows(Tensor& out, const Tensor& x, const Tensor& s) {
  same_numel("scale_rows", out, x);
  const int64_t R = x.rows(), C = x.cols();
  BLOOMERY_NEED(s.numel() == R, "scale_rows", std::to_string(R) + " scalars", s.shape_str());
  float *o = out.f32(), *px = x.f32(), *ps = s.f32();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) o[r * C + c] = px[r * C + c] * ps[r];
}

void CpuBackend::swiglu(Tensor& out, const Tensor& gate, const Tensor& up, float limit) {
  same_numel("swiglu", out, gate);
  same_numel("swiglu", gate, up);
  float *o = out.f32(), *pg = gate.f32(), *pu = up.f32();
  for (int64_t i = 0, n = gate.numel(); i < n; ++i) {
    float g = pg[i], u = pu[i];
    if (limit > 0.0f) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    o[i] = act_apply(Act::Silu, g) * u;
  }
}

void CpuBackend::take_cols(Tensor& out, const Tensor& x, int64_t c0) {
  const int64_t R = x.rows(), C = x.cols(), n = out.cols();
  BLOOMERY_NEED(out.rows() == R && c0 >= 0 && c0 + n <= C, "take_cols",
                "out [" + std::to_string(R) + ", n] within x " + x.shape_str(),
                out.shape_str() + " at " + std::to_string(c0));
  for (int64_t r = 0; r < R; ++r) std::memcpy(out.f32() + r * n, x.f32() + r * C + c0, n * sizeof(float));
}

void CpuBackend::put_cols(Tensor& dst, const Tensor& src, int64_t c0) {
  const int64_t R = dst.rows(), C = dst.cols(), n = src.cols();
  BLOOMERY_NEED(src.rows() == R && c0 >= 0 && c0 + n <= C, "put_cols",
                "src [" + std::to_string(R) + ", n] within dst " + dst.shape_str(),
                src.shape_str() + " at " + std::to_string(c0));
  for (int64_t r = 0; r < R; ++r) std::memcpy(dst.f32() + r * C + c0, src.f32() + r * n, n * sizeof(float));
}

}  // namespace bloomery::cpu

namespace bloomery {
std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}
}  // namespace bloomery
