// libFuzzer target for the nvfp4_csf decoder (formats.md §8.4, §8.5). Input: byte 0 = slab count (R = 16·(b0
// % 9)), byte 1 = C (b1 % 40, odd values allowed to reach the geometry errors), byte 2 = flags (bit 0: fixed
// stream given 2-D; bit 1: fixed stream one byte short), then the fixed stream, then the exception words.
// Property: decode either refuses with an E_CSF_ id or succeeds; a success re-encodes and decodes to the same
// bytes, and a slab/even-column slice of the streams decodes to the same window of the matrix.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.h"
#include "formats/csf.h"

namespace csf = bloomery::csf;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint64_t R = 16 * (data[0] % 9), C = data[1] % 40;
  const bool two_d = data[2] & 1, short_fixed = data[2] & 2;
  std::span<const uint8_t> rest(data + 3, size - 3);
  uint64_t want = csf::fixed_bytes(R, C);
  if (short_fixed && want > 0) --want;
  const uint64_t nfixed = std::min<uint64_t>(want, rest.size());
  const std::span<const uint8_t> fixed = rest.subspan(0, nfixed);
  const std::span<const uint8_t> exc_bytes = rest.subspan(nfixed);
  std::vector<uint64_t> shape = {nfixed};
  if (two_d && R > 0) shape = {R / 16, nfixed / (R / 16)};
  std::vector<uint8_t> out(R * C);
  std::vector<uint32_t> exc;
  try {
    csf::check_geometry(R, C, shape, {});
    exc = csf::load_exceptions(exc_bytes, {});
    csf::decode(fixed, exc, R, C, out.data(), {});
  } catch (const bloomery::Error& e) {
    if (e.id().rfind("E_CSF_", 0) != 0) __builtin_trap();
    return 0;
  }
  // Lossless: the encoder's streams decode to the same matrix.
  const csf::Streams again = csf::encode(out.data(), R, C);
  std::vector<uint8_t> out2(R * C);
  csf::decode(again.fixed, again.exceptions, R, C, out2.data(), {});
  if (out != out2) __builtin_trap();
  // Slicing on compressed data equals cropping the decoded matrix.
  if (R >= 16 && C >= 2) {
    const uint64_t r0 = 16 * (data[2] >> 4) % R, r1 = R, c0 = 2 * ((data[2] >> 2) & 3) % C, c1 = C;
    const csf::Streams s = csf::slice(fixed, exc, R, C, r0, r1, c0, c1, {});
    std::vector<uint8_t> win((r1 - r0) * (c1 - c0));
    csf::decode(s.fixed, s.exceptions, r1 - r0, c1 - c0, win.data(), {});
    for (uint64_t r = r0; r < r1; ++r)
      if (std::memcmp(win.data() + (r - r0) * (c1 - c0), out.data() + r * C + c0, c1 - c0) != 0)
        __builtin_trap();
  }
  return 0;
}
