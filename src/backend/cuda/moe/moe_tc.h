// Launchers of the tensor-core routed-expert decode (moe_decode_tc.cu, moe_decode_variant() 3): NVFP4 experts
// only; moe_gate_up / moe_down (moe_kernels.h) call them when moe_tc_fits and run variant 2 otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe/moe_kernels.h"

namespace bloomery::cuda {

// True when rows of K elements of this format can take the tensor-core kernels: an NVFP4 format (E4M3 scales
// per 16 elements; MXFP4 is not), K a multiple of 64 (four lanes × whole scale blocks) and at most 8,192 (the
// staged activation row in shared memory).
bool moe_tc_fits(FormatId fmt, uint64_t K);
// As moe_gate_up / moe_down, for tables whose gate, up (and down) formats fit.
void moe_gate_up_tc(const MoeTable& tab, const int32_t* ids, int64_t P, int k, const float* x, int64_t D,
                    int64_t I, float limit, float* h, cudaStream_t s);
void moe_down_tc(const MoeTable& tab, const int32_t* ids, int64_t P, const float* h, int64_t I, int64_t D,
                 float* y, cudaStream_t s);

}  // namespace bloomery::cuda
