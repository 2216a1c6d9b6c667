// glm5_next DSA (models.md §4.7): the pooled (KPool) indexer; the absorbed NoPE MLA is
// CpuFamilyOps::mla_attention.
#pragma once

#include <cstdint>
#include <vector>

namespace bloomery::cpu {

// ---- DSA indexer ----
struct DsaIndexerConfig {
  int n_heads = 0, head_dim = 0;  // index_n_heads, index_head_dim
  int pool = 4;                   // index_kpool P
  int topk = 0;                   // index_topk (tokens); topk / P pools are kept
  const float* ape = nullptr;     // [P, head_dim] index_kpool_compress_ape
};

// Per-sequence state of one DSA layer's indexer: raw (k, gs) rows of every token and each complete pool's
// key.
struct DsaIndexerState {
  std::vector<float> k, gs;  // [T, head_dim] each
  std::vector<float> pools;  // [T / P, head_dim]
  int64_t tokens = 0;
};

// k: LayerNorm'ed indexer key [head_dim]; gs: W_gate h [head_dim]. Finalises the pool on its P-th token.
void dsa_indexer_append(const DsaIndexerConfig& c, DsaIndexerState& st, const float* k, const float* gs);

struct DsaSelection {
  std::vector<int64_t> tokens;
  bool tie = false;
};

// qi [n_heads, head_dim] = W_wq_b q_res; wts [n_heads] = W_weights h * n_heads^-0.5. Query at position t.
void dsa_indexer_select(const DsaIndexerConfig& c, const DsaIndexerState& st, const float* qi,
                        const float* wts, int64_t t, DsaSelection& sel);

}  // namespace bloomery::cpu
