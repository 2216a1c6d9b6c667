// nvfp4_csf codec: decode with every codec check, encoder for fixtures and tests, TP slicing (formats.md
// §8.4–8.5).
#include "formats/csf.h"

#include <algorithm>
#include <array>
#include <string>

#include "formats/elements.h"

namespace bloomery::csf {
namespace {

std::string shape_str(std::span<const uint64_t> s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void check_rc(uint64_t R, uint64_t C, const Where& where) {
  if (R % kSlabRows != 0) raise("E_CSF_GEOMETRY", where, "rows R a multiple of 16", std::to_string(R));
  if (C % 2 != 0) raise("E_CSF_GEOMETRY", where, "an even number of scale columns C", std::to_string(C));
  // Positions are 24-bit; guard the product against overflow before comparing.
  if (C != 0 && R > (uint64_t(1) << 24) / C)
    raise("E_CSF_TOO_LARGE", where, "R·C ≤ 2^24", fmt::format("{} × {}", R, C));
}

}  // namespace

void check_geometry(uint64_t R, uint64_t C, std::span<const uint64_t> fixed_shape, const Where& where) {
  check_rc(R, C, where);
  if (fixed_shape.size() == 2) {
    const uint64_t a = fixed_shape[0], b = fixed_shape[1];
    if (b % 16 != 0 || b == 0 || R != 16 * a || C != 2 * (b / 16 - 1))
      raise("E_CSF_GEOMETRY", where, fmt::format("2-D fixed stream [{}, {}]", R / 16, slab_bytes(C)),
            shape_str(fixed_shape));
  } else if (fixed_shape.size() == 1) {
    if (fixed_shape[0] != fixed_bytes(R, C))
      raise("E_CSF_GEOMETRY", where, fmt::format("fixed stream of R·(1+C/2) = {} bytes", fixed_bytes(R, C)),
            shape_str(fixed_shape));
  } else {
    raise("E_CSF_GEOMETRY", where, "a 1-D or 2-D fixed stream", shape_str(fixed_shape));
  }
}

void check_kernel_geometry(uint64_t R, uint64_t C, const Where& where) {
  if (R % 128 != 0 || C % 4 != 0)
    raise("E_CSF_KERNEL_GEOMETRY", where, "R % 128 == 0 and C % 4 == 0 for the resident codec",
          fmt::format("R = {}, C = {}", R, C));
}

void check_exceptions(std::span<const uint32_t> exc, uint64_t R, uint64_t C, const Where& where) {
  const uint64_t n = R * C;
  uint64_t prev = 0;
  for (size_t i = 0; i < exc.size(); ++i) {
    const uint64_t pos = exc[i] & 0xFFFFFFu;
    if (pos >= n)
      raise("E_CSF_EXC_RANGE", where, fmt::format("positions < R·C = {}", n),
            fmt::format("position {} in word {}", pos, i));
    if (i > 0 && pos <= prev)
      raise("E_CSF_EXC_ORDER", where, "strictly increasing positions",
            fmt::format("position {} after {} (word {})", pos, prev, i));
    prev = pos;
  }
}

void check_bases(std::span<const uint8_t> slabs, uint64_t C, const Where& where) {
  const uint64_t sb = slab_bytes(C);
  for (uint64_t s = 0; s + sb <= slabs.size(); s += sb)
    for (int i = 0; i < kSlabRows; ++i)
      if (slabs[s + i] > kMaxBase)
        raise("E_CSF_BASE_RANGE", where, "bases 0..240",
              fmt::format("{} for row {} of slab {}", slabs[s + i], i, s / sb));
}

std::vector<uint32_t> load_exceptions(std::span<const uint8_t> bytes, const Where& where) {
  if (bytes.size() % 4 != 0)
    raise("E_CSF_GEOMETRY", where, "exception stream of whole u32 words",
          fmt::format("{} bytes", bytes.size()));
  std::vector<uint32_t> words(bytes.size() / 4);
  for (size_t i = 0; i < words.size(); ++i) words[i] = elem::load_u32le(bytes.data() + 4 * i);
  return words;
}

void decode_slabs(std::span<const uint8_t> slabs, uint64_t slab0, std::span<const uint32_t> exc, uint64_t R,
                  uint64_t C, uint8_t* out, const Where& where) {
  check_rc(R, C, where);
  const uint64_t sb = slab_bytes(C);
  if (slabs.size() % sb != 0 || slab0 * kSlabRows + slabs.size() / sb * kSlabRows > R)
    raise("E_CSF_GEOMETRY", where, fmt::format("whole slabs of {} bytes within {} rows", sb, R),
          fmt::format("{} bytes from slab {}", slabs.size(), slab0));
  check_bases(slabs, C, where);
  check_exceptions(exc, R, C, where);
  const uint64_t nslabs = slabs.size() / sb, half = C / 2;
  for (uint64_t s = 0; s < nslabs; ++s) {
    const uint8_t* slab = slabs.data() + s * sb;
    for (int i = 0; i < kSlabRows; ++i) {
      const uint8_t base = slab[i];
      const uint8_t* codes = slab + kSlabRows + i * half;
      uint8_t* o = out + (s * kSlabRows + i) * C;
      for (uint64_t j = 0; j < half; ++j) {
        o[2 * j] = uint8_t(base + (codes[j] & 0xF));  // ≤ 240 + 15: plain add never wraps
        o[2 * j + 1] = uint8_t(base + (codes[j] >> 4));
      }
    }
  }
  // Exceptions are sorted: apply those inside the decoded rows, after the fixed stream.
  const uint64_t lo = slab0 * kSlabRows * C, hi = lo + nslabs * kSlabRows * C;
  auto it = std::lower_bound(exc.begin(), exc.end(), lo,
                             [](uint32_t w, uint64_t v) { return (w & 0xFFFFFFu) < v; });
  for (; it != exc.end() && (*it & 0xFFFFFFu) < hi; ++it) out[(*it & 0xFFFFFFu) - lo] = uint8_t(*it >> 24);
}

void decode(std::span<const uint8_t> fixed, std::span<const uint32_t> exc, uint64_t R, uint64_t C,
            uint8_t* out, const Where& where) {
  const uint64_t shape[1] = {fixed.size()};
  check_geometry(R, C, shape, where);
  decode_slabs(fixed, 0, exc, R, C, out, where);
}

Streams encode(const uint8_t* bytes, uint64_t R, uint64_t C, const Where& where) {
  check_rc(R, C, where);
  Streams st;
  st.rows = R;
  st.cols = C;
  st.fixed.assign(fixed_bytes(R, C), 0);
  const uint64_t sb = slab_bytes(C), half = C / 2;
  for (uint64_t r = 0; r < R; ++r) {
    const uint8_t* row = bytes + r * C;
    std::array<uint32_t, 256> hist{};
    for (uint64_t c = 0; c < C; ++c) ++hist[row[c]];
    // Window count for base b is the sum of hist[b..b+15]; keep the first maximum (lowest b).
    uint32_t win = 0, best = 0;
    for (int v = 0; v < 16; ++v) win += hist[v];
    int best_b = 0;
    best = win;
    for (int b = 1; b <= kMaxBase; ++b) {
      win += hist[b + 15] - hist[b - 1];
      if (win > best) best = win, best_b = b;
    }
    uint8_t* slab = st.fixed.data() + (r / kSlabRows) * sb;
    slab[r % kSlabRows] = uint8_t(best_b);
    uint8_t* codes = slab + kSlabRows + (r % kSlabRows) * half;
    for (uint64_t c = 0; c < C; ++c) {
      const int v = row[c];
      uint8_t code = 0;
      if (v >= best_b && v <= best_b + 15)
        code = uint8_t(v - best_b);
      else
        st.exceptions.push_back(uint32_t(r * C + c) | (uint32_t(v) << 24));
      codes[c / 2] |= (c % 2 == 0) ? code : uint8_t(code << 4);
    }
  }
  return st;
}

Streams slice(std::span<const uint8_t> fixed, std::span<const uint32_t> exc, uint64_t R, uint64_t C,
              uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1, const Where& where) {
  const uint64_t shape[1] = {fixed.size()};
  check_geometry(R, C, shape, where);
  check_exceptions(exc, R, C, where);
  if (r0 > r1 || r1 > R || r0 % kSlabRows || r1 % kSlabRows || c0 > c1 || c1 > C || c0 % 2 || c1 % 2)
    raise("E_CSF_TP_EXTENT", where,
          fmt::format("rows on 16-row slabs within {} and even columns within {}", R, C),
          fmt::format("rows [{}, {}), columns [{}, {})", r0, r1, c0, c1));
  Streams st;
  st.rows = r1 - r0;
  st.cols = c1 - c0;
  const uint64_t sb = slab_bytes(C), half = C / 2, nhalf = st.cols / 2;
  st.fixed.reserve(fixed_bytes(st.rows, st.cols));
  for (uint64_t s = r0 / kSlabRows; s < r1 / kSlabRows; ++s) {
    const uint8_t* slab = fixed.data() + s * sb;
    st.fixed.insert(st.fixed.end(), slab, slab + kSlabRows);  // bases unchanged
    for (int i = 0; i < kSlabRows; ++i) {
      const uint8_t* codes = slab + kSlabRows + i * half;
      st.fixed.insert(st.fixed.end(), codes + c0 / 2, codes + c0 / 2 + nhalf);
    }
  }
  for (uint32_t w : exc) {
    const uint64_t pos = w & 0xFFFFFFu, r = pos / C, c = pos % C;
    if (r >= r0 && r < r1 && c >= c0 && c < c1)
      st.exceptions.push_back(uint32_t((r - r0) * st.cols + (c - c0)) | (w & 0xFF000000u));
  }
  return st;
}

Streams concat_rows(const Streams& first, const Streams& second, const Where& where) {
  if (first.cols != second.cols)
    raise("E_CSF_GEOMETRY", where, fmt::format("equal scale columns ({})", first.cols),
          std::to_string(second.cols));
  Streams st;
  st.rows = first.rows + second.rows;
  st.cols = first.cols;
  check_rc(st.rows, st.cols, where);
  st.fixed = first.fixed;
  st.fixed.insert(st.fixed.end(), second.fixed.begin(), second.fixed.end());
  st.exceptions = first.exceptions;
  const uint32_t shift = uint32_t(first.rows * first.cols);
  for (uint32_t w : second.exceptions) st.exceptions.push_back(((w & 0xFFFFFFu) + shift) | (w & 0xFF000000u));
  return st;
}

Streams pad(const Streams& in, uint64_t rows_to, uint64_t cols_to, const Where& where) {
  if (rows_to < in.rows || cols_to < in.cols)
    raise("E_CSF_TP_EXTENT", where, fmt::format("a padded size of at least {} × {}", in.rows, in.cols),
          fmt::format("{} × {}", rows_to, cols_to));
  check_rc(rows_to, cols_to, where);
  Streams st;
  st.rows = rows_to;
  st.cols = cols_to;
  st.fixed.assign(fixed_bytes(rows_to, cols_to), 0);
  const uint64_t sb_in = slab_bytes(in.cols), sb = slab_bytes(cols_to), half_in = in.cols / 2,
                 half = cols_to / 2;
  for (uint64_t s = 0; s < in.rows / kSlabRows; ++s) {
    const uint8_t* src = in.fixed.data() + s * sb_in;
    uint8_t* dst = st.fixed.data() + s * sb;
    std::copy(src, src + kSlabRows, dst);
    for (int i = 0; i < kSlabRows; ++i)
      std::copy(src + kSlabRows + i * half_in, src + kSlabRows + (i + 1) * half_in,
                dst + kSlabRows + i * half);
  }
  for (uint32_t w : in.exceptions) {
    const uint64_t pos = w & 0xFFFFFFu;
    st.exceptions.push_back(uint32_t((pos / in.cols) * cols_to + pos % in.cols) | (w & 0xFF000000u));
  }
  return st;
}

void check_tp_extent(uint64_t intermediate, uint64_t hidden, int tp, const Where& where) {
  if (tp < 1 || intermediate % (64 * uint64_t(tp)) != 0)
    raise("E_CSF_TP_EXTENT", where, fmt::format("intermediate size a multiple of 64·tp = {}", 64 * tp),
          fmt::format("I = {} at TP {}", intermediate, tp));
  if (hidden % 128 != 0)
    raise("E_CSF_TP_EXTENT", where, "hidden size a multiple of 128", fmt::format("D = {}", hidden));
}

}  // namespace bloomery::csf
