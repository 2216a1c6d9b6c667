// qwen4_exp PLE (models.md §3.6, formats.md §7): hashed n-gram ids, row gather, gated insertion into the
// streams.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace bloomery::cpu {

uint64_t splitmix64(uint64_t v);

// The hash constants of one PLE layer, derived from the config (also stored in the checkpoint for checking).
struct PleHash {
  int ngram_size = 3;
  int heads_per_ngram = 8;
  int64_t eos = 0;
  std::vector<int64_t> multipliers;   // [ngram_size]
  std::vector<int64_t> head_sizes;    // [G] primes
  std::vector<int64_t> head_offsets;  // [G]
  int64_t padded_rows = 0;            // table rows, total rounded up to the divisor
  int heads() const { return static_cast<int>(head_sizes.size()); }
};

// vocab: unigram vocab size V; ple_index: position of the layer in ple_layer_ids (0-based).
PleHash make_ple_hash(int64_t vocab, int ngram_size, int heads_per_ngram, int64_t ngram_vocab_base,
                      int64_t divisor, int64_t seed, int ple_index, int64_t eos);

// Per-sequence n-gram context: the previous ngram_size-1 ids, oldest first (EOS-filled at sequence start).
struct PleContext {
  std::vector<int64_t> prev;
};
PleContext ple_context_start(const PleHash& h);

// Table rows of the current token `tok` (G ids, order-2 heads first) given the context; then pushes `tok`.
void ple_rows_and_advance(const PleHash& h, PleContext& ctx, int64_t tok, int64_t* rows);

// Where the table rows come from: the model supplies a reader over the checkpoint (row-range decode, never
// the whole table). dst receives rows.size() * width floats.
class PleRowReader {
 public:
  virtual ~PleRowReader() = default;
  virtual int64_t rows() const = 0;
  virtual int width() const = 0;
  virtual void read_rows(std::span<const int64_t> rows, float* dst) const = 0;
};

// One PLE layer's dense weights (f32, row-major [out, in]).
struct PleWeights {
  const float* key_proj = nullptr;    // [n*D, E]
  const float* value_proj = nullptr;  // [D, E]
  const float* norm_key = nullptr;    // [n*D]
  const float* norm_query = nullptr;  // [n*D]
  const float* norm_conv = nullptr;   // [n*D]
  const float* conv = nullptr;        // [n*D, K]
  int n = 0, D = 0, E = 0, K = 4, dilation = 3;
  float eps = 1e-6f;
};

// Dilated conv history: the last (K-1)*dilation normalised rows Gn [., n*D], oldest first (zeros at start).
struct PleConvState {
  std::vector<float> hist;
};
PleConvState ple_conv_start(const PleWeights& w);

// One token: e [E] the gathered rows, X [n*D] the streams before the layer; out [n*D] = G + C (to add to X).
void ple_forward_token(const PleWeights& w, const float* e, const float* X, PleConvState& conv, float* out);

}  // namespace bloomery::cpu
