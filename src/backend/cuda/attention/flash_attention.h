// Prompt attention on the tensor cores (flash_attention.cu): the product of cuda::attention for prompts of at
// least kFlashMinTokens tokens, with split BF16 operands. attention() takes it when it applies.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace bloomery::cuda {

// Fewer query rows (decode steps, verify rows) stay on the split-KV kernel, which fills the card from few
// rows.
constexpr int64_t kFlashMinTokens = 16;

// On unless BLOOMERY_CUDA_FLASH_ATTENTION=0 at start; set_flash_attention between calls for A/B runs.
bool flash_attention_enabled();
void set_flash_attention(bool on);
// d == dv ∈ {32, 64, 128, 256}, T ≥ kFlashMinTokens, GQA groups whole, 16-byte aligned tensors, the tile
// fits the device's shared memory (a BF16 cache needs less: no K/V lo tiles), switch on.
bool flash_attention_applies(int64_t T, int64_t Hq, int64_t d, int64_t Hkv, int64_t dv, bool kv_bf16,
                             const float* q, const void* k, const void* v, const float* out);
// The arguments of cuda::attention (kernels.h), dv = d. A BF16 cache is read as the kernel's K/V hi operand
// directly (its lo is zero): no rounding pass, no copies, and the lo products are skipped.
void flash_attention(float* out, const float* q, const void* k, const void* v, bool kv_bf16,
                     const float* allowed, int64_t T, int64_t Hq, int64_t d, int64_t S, int64_t Hkv,
                     int64_t q0, float scale, cudaStream_t s);

}  // namespace bloomery::cuda
