// Decode attention by KV head (decode_attention.cu): the split-KV product of cuda::attention for few query
// rows, one block per (KV head, key split, query row) for all query heads of the GQA group, so each K and V
// row is read once per group instead of once per query head, and keys a mask leaves out are not read at all.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace bloomery::cuda {

// On unless BLOOMERY_CUDA_GQA_DECODE=0 at start; set_gqa_decode between calls for A/B runs.
bool gqa_decode_enabled();
void set_gqa_decode(bool on);
// Query heads per KV head ≤ 16, d ∈ {32, 64, 128, 256} (64 and up for a BF16 cache: a lane's 16-byte reads
// hold 8 elements, and a d-32 key row would leave half the eight lanes without one), dv ∈ {32, 64, 128, 256},
// 16-byte aligned q and k, a partial buffer (part ≠ null), switch on.
bool gqa_decode_applies(int64_t Hq, int64_t d, int64_t Hkv, int64_t dv, bool kv_bf16, const float* q,
                        const void* k, const float* part);
// The arguments of cuda::attention (kernels.h); part holds attention_part_floats(T, Hq, dv) floats.
void gqa_decode_attention(float* out, const float* q, const void* k, const void* v, bool kv_bf16,
                          const float* allowed, int64_t T, int64_t Hq, int64_t d, int64_t S, int64_t Hkv,
                          int64_t dv, int64_t q0, float scale, float* part, cudaStream_t s);
// The largest number of key splits (the partial buffer's size).
constexpr int kGqaMaxSplits = 128;

}  // namespace bloomery::cuda
