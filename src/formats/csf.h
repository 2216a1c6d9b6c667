// The nvfp4_csf scale codec `byte-window4-fixed-stream-u24-exceptions/1` (formats.md §8.4) and exact
// tensor-parallel slicing on the compressed streams (§8.5). Scale matrices are R rows × C columns of E4M3
// bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace bloomery::csf {

inline constexpr std::string_view kCodec = "byte-window4-fixed-stream-u24-exceptions/1";
inline constexpr int kSlabRows = 16;
inline constexpr int kMaxBase = 240;

// Bytes of one 16-row slab: 16 bases + 16 rows × C/2 code bytes.
constexpr uint64_t slab_bytes(uint64_t C) {
  return kSlabRows * (1 + C / 2);
}
constexpr uint64_t fixed_bytes(uint64_t R, uint64_t C) {
  return R * (1 + C / 2);
}

// Geometry of an R × C matrix and its stored fixed stream shape (1-D [R·(1+C/2)] or 2-D [R/16, 16·(1+C/2)]):
// E_CSF_GEOMETRY, E_CSF_TOO_LARGE (R·C > 2^24).
void check_geometry(uint64_t R, uint64_t C, std::span<const uint64_t> fixed_shape, const Where& where);
// Optional check when a b12x-style resident codec is chosen: R % 128 == 0 and C % 4 == 0
// (E_CSF_KERNEL_GEOMETRY).
void check_kernel_geometry(uint64_t R, uint64_t C, const Where& where);
// Positions < R·C (E_CSF_EXC_RANGE) and strictly increasing (E_CSF_EXC_ORDER).
void check_exceptions(std::span<const uint32_t> exc, uint64_t R, uint64_t C, const Where& where);
// Every base byte of whole slabs ≤ 240 (E_CSF_BASE_RANGE).
void check_bases(std::span<const uint8_t> slabs, uint64_t C, const Where& where);

// Little-endian u32 words from raw exception-stream bytes (size a multiple of 4, else E_CSF_GEOMETRY).
std::vector<uint32_t> load_exceptions(std::span<const uint8_t> bytes, const Where& where);

// Decodes the whole matrix into out[R·C] (row-major E4M3 bytes). Runs every check above except the kernel
// one. The decoded bytes still need §6.2's scale checks (NaN codes).
void decode(std::span<const uint8_t> fixed, std::span<const uint32_t> exc, uint64_t R, uint64_t C,
            uint8_t* out, const Where& where);
// Decodes slabs [slab0, slab0 + slabs.size()/slab_bytes(C)) of the matrix from just their bytes into
// out[(nslabs·16)·C]; `exc` is the whole matrix's exception stream (checked whole; only words inside apply).
void decode_slabs(std::span<const uint8_t> slabs, uint64_t slab0, std::span<const uint32_t> exc, uint64_t R,
                  uint64_t C, uint8_t* out, const Where& where);

// Compressed streams of one matrix (fixed stream 1-D).
struct Streams {
  std::vector<uint8_t> fixed;
  std::vector<uint32_t> exceptions;
  uint64_t rows = 0, cols = 0;
};

// Encoder per §8.4: per row the base b ∈ [0, 240] maximising the bytes inside [b, b+15] (lowest b on ties);
// bytes outside become exceptions with nibble 0. Geometry as check_geometry.
Streams encode(const uint8_t* bytes, uint64_t R, uint64_t C, const Where& where = {});

// §8.5: rows [r0, r1) on whole slabs (multiples of 16), columns [c0, c1) on even columns; exceptions inside
// the window rebased to (r−r0)·(c1−c0) + (c−c0). Misaligned or out-of-range windows: E_CSF_TP_EXTENT.
Streams slice(std::span<const uint8_t> fixed, std::span<const uint32_t> exc, uint64_t R, uint64_t C,
              uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1, const Where& where);
// One w13 plane from two matrices of equal C: second's rows follow first's, its positions shifted by
// first.rows · C (the CSF loaders put up first, then gate; §6.8).
Streams concat_rows(const Streams& first, const Streams& second, const Where& where);

// §8.5 padding (e.g. GLM TP 3: 704 channels per rank): grow to rows_to × cols_to (rows_to % 16 == 0, cols_to
// even, both ≥ the current size). Padded rows get base 0 and code 0 (scale byte 0); padded columns of
// existing rows get code 0, i.e. the row's base. Exceptions keep their (rebased) positions.
Streams pad(const Streams& in, uint64_t rows_to, uint64_t cols_to, const Where& where);

// §8.5 extents: intermediate I % (64·tp) == 0 and hidden D % 128 == 0, else E_CSF_TP_EXTENT.
void check_tp_extent(uint64_t intermediate, uint64_t hidden, int tp, const Where& where);

}  // namespace bloomery::csf
