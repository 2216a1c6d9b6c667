// qwen4_exp QSA (models.md §3.8): block indexer over mean-pooled keys and sparse gated GQA attention.
#pragma once

#include <cstdint>
#include <vector>

namespace bloomery::cpu {

// NeoX ("rotate half") rotary on the first `rot` dims of x [dim], angle = pos * theta^(-2i/rot), f32 like
// transformers (inv_freq and angles in f32). Text positions only (M-RoPE with equal rows is this).
void rope_neox(float* x, int rot, int64_t pos, float theta);

struct QsaIndexerConfig {
  int n_heads = 0, head_dim = 0;  // indexer query heads and head width
  int compress = 4;               // tokens per block
  int block_topk = 0;             // indexer_budget / compress
  int rot = 0;                    // rotary dims (of the attention's rope), <= head_dim
  float theta = 10000.0f;
  float eps = 1e-6f;
  const float* k_layernorm = nullptr;  // [head_dim], zero-centred
};

// Per-sequence indexer state of one layer: the raw keys of every token and the pooled, normed, rotated key of
// every complete block (a complete block never changes; positions are token indices from 0).
struct QsaIndexerState {
  std::vector<float> raw;     // [T, head_dim]
  std::vector<float> blocks;  // [T / compress, head_dim]
  int64_t tokens = 0;
};

// Appends one token's raw key; pools the block when it completes.
void qsa_indexer_append(const QsaIndexerConfig& c, QsaIndexerState& st, const float* kraw);

struct QsaSelection {
  std::vector<int64_t> tokens;  // selected key positions (blocks by descending score, then the tail)
  bool tie = false;             // an exact score tie decided which block was kept
};

// Selection for the query at position t (keys 0..t must be appended): qi [n_heads, head_dim] normed and
// rotated.
void qsa_indexer_select(const QsaIndexerConfig& c, const QsaIndexerState& st, const float* qi, int64_t t,
                        QsaSelection& sel);

// Top-k by score, stable (lower index wins ties); reports whether a tie straddles the cut. Shared with DSA.
std::vector<int64_t> stable_topk(const std::vector<float>& scores, int64_t k, bool* tie);

// Gated GQA attention for one query over the selected positions: q [H, hd]; K, V caches [T, Hkv, hd];
// gate [H*hd] (output multiplied by sigmoid(gate)); out [H*hd]. Softmax in f32 with scale hd^-0.5.
void sparse_gated_gqa(const float* q, const float* K, const float* V, const std::vector<int64_t>& sel,
                      const float* gate, int H, int Hkv, int hd, float* out);

}  // namespace bloomery::cpu
