// Rotary embedding in place on x[T, H, hd]: NeoX rotate-half or interleaved pairs, first `rot` dims of each
// head. inv_freq comes from the host (computed exactly as the CPU backend does, so angles are equal bit for
// bit); M-RoPE with equal text position rows reduces to this plain form.
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

__global__ void rope_k(float* x, const int64_t* pos, const float* inv_freq, int64_t H, int64_t hd, int rot,
                       bool interleaved) {
  pdl_wait();
  pdl_launch_dependents();
  const int64_t t = blockIdx.x;
  const int half = rot / 2;
  for (int64_t e = threadIdx.x; e < H * half; e += blockDim.x) {
    const int64_t h = e / half;
    const int i = static_cast<int>(e % half);
    const float a = static_cast<float>(pos[t]) * inv_freq[i];
    float sn, cs;
    sincosf(a, &sn, &cs);
    float* v = x + (t * H + h) * hd;
    const int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const float p = v[ia], q = v[ib];
    v[ia] = p * cs - q * sn;
    v[ib] = q * cs + p * sn;
  }
}

}  // namespace

void rope(float* x, const int64_t* pos, const float* inv_freq, int64_t T, int64_t H, int64_t hd, int rot,
          bool interleaved, cudaStream_t s) {
  if (T == 0) return;
  pdl_launch(rope_k, static_cast<unsigned>(T), 256, 0, s, x, pos, inv_freq, H, hd, rot, interleaved);
  BLOOMERY_CUDA_CHECK_LAUNCH("rope x[" + std::to_string(T) + ", " + std::to_string(H) + ", " +
                             std::to_string(hd) + "] rot " + std::to_string(rot));
}

}  // namespace bloomery::cuda
