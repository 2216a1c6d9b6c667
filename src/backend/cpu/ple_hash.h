// qwen4_exp PLE n-gram hashing (models.md §3.6): splitmix64 multipliers, prime-sized heads, EOS-reset
// context. Host-side integer logic on token ids (no tensors), header-only so model files use it without the
// CPU backend.
#pragma once

#include <cstdint>
#include <vector>

namespace bloomery::cpu {

inline uint64_t splitmix64(uint64_t v) {
  v += 0x9E3779B97F4A7C15ull;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

inline bool ple_is_prime(int64_t v) {
  if (v < 2) return false;
  if (v % 2 == 0) return v == 2;
  for (int64_t d = 3; d * d <= v; d += 2)
    if (v % d == 0) return false;
  return true;
}

// The hash constants of one PLE layer, derived from the config (the checkpoint stores copies for checking).
struct PleHash {
  int ngram_size = 3;
  int heads_per_ngram = 8;
  int64_t eos = 0;
  std::vector<int64_t> multipliers;   // [ngram_size]
  std::vector<int64_t> head_sizes;    // [G] primes
  std::vector<int64_t> head_offsets;  // [G]
  int64_t padded_rows = 0;            // table rows: Σ primes rounded up to the divisor
  int heads() const { return static_cast<int>(head_sizes.size()); }
};

// vocab: unigram vocab size V; ple_index: position of the layer in ple_layer_ids (0-based).
inline PleHash make_ple_hash(int64_t vocab, int ngram_size, int heads_per_ngram, int64_t ngram_vocab_base,
                             int64_t divisor, int64_t seed, int ple_index, int64_t eos) {
  constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
  PleHash h;
  h.ngram_size = ngram_size;
  h.heads_per_ngram = heads_per_ngram;
  h.eos = eos;
  const uint64_t max_long = (uint64_t{1} << 63) - 1;
  const uint64_t mult_max = max_long / static_cast<uint64_t>(vocab > 1 ? vocab : 1);
  const uint64_t half = mult_max / 2 > 0 ? mult_max / 2 : 1;
  const uint64_t base_seed = static_cast<uint64_t>(seed) + 10007ull * static_cast<uint64_t>(ple_index);
  for (int q = 0; q < ngram_size; ++q)
    h.multipliers.push_back(
        static_cast<int64_t>(2 * (splitmix64(base_seed + kGamma * static_cast<uint64_t>(q + 1)) % half) + 1));
  // Head j of PLE layer p has the (p·G + j + 1)-th prime >= base: one prime walk, skipping earlier layers'
  // heads.
  const int G = (ngram_size - 1) * heads_per_ngram;
  int64_t prime = ngram_vocab_base - 1;
  auto next_prime = [&] {
    ++prime;
    while (!ple_is_prime(prime)) ++prime;
  };
  for (int i = 0; i < ple_index * G; ++i) next_prime();
  int64_t total = 0;
  for (int j = 0; j < G; ++j) {
    next_prime();
    h.head_sizes.push_back(prime);
    h.head_offsets.push_back(total);
    total += prime;
  }
  h.padded_rows = (total + divisor - 1) / divisor * divisor;
  return h;
}

// Per-sequence n-gram context: the previous ngram_size−1 ids, oldest first (EOS-filled at sequence start).
struct PleContext {
  std::vector<int64_t> prev;
};

inline PleContext ple_context_start(const PleHash& h) {
  return PleContext{std::vector<int64_t>(h.ngram_size - 1, h.eos)};
}

// Table rows of the current token `tok` (G ids, order-2 heads first) given the context; then pushes `tok`.
// tok_s (s ids back) becomes EOS when any EOS lies in positions t−s … t−1; the current id is always itself.
inline void ple_rows_and_advance(const PleHash& h, PleContext& ctx, int64_t tok, int64_t* rows) {
  const int c = h.ngram_size - 1;
  std::vector<int64_t> shifted(h.ngram_size);
  shifted[0] = tok;
  bool eos_seen = false;
  for (int s = 1; s <= c; ++s) {
    const int64_t id = ctx.prev[c - s];
    eos_seen = eos_seen || id == h.eos;
    shifted[s] = eos_seen ? h.eos : id;
  }
  int j = 0;
  for (int order = 2; order <= h.ngram_size; ++order) {
    // int64 products: multipliers < (2^63−1)/V keep every product and XOR non-negative (no overflow).
    int64_t mixed = shifted[0] * h.multipliers[0];
    for (int q = 1; q < order; ++q) mixed ^= shifted[q] * h.multipliers[q];
    for (int jj = 0; jj < h.heads_per_ngram; ++jj, ++j) {
      int64_t r = mixed % h.head_sizes[j];
      if (r < 0) r += h.head_sizes[j];  // torch.remainder takes the divisor's sign
      rows[j] = r + h.head_offsets[j];
    }
  }
  for (int i = 0; i + 1 < c; ++i) ctx.prev[i] = ctx.prev[i + 1];
  if (c > 0) ctx.prev[c - 1] = tok;
}

}  // namespace bloomery::cpu
