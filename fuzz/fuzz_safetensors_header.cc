// libFuzzer target: the input is a whole safetensors file; its header must be refused by an E_ST_ error or
// come back satisfying every §2.3 guarantee the loader relies on.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  bloomery::Warnings warnings;
  try {
    const bloomery::SafetensorsHeader h =
        bloomery::parse_safetensors_bytes(bytes, size, "fuzz.safetensors", warnings);
    // Accepted: sorted, in bounds, sized exactly, tiling the data section with no gap or overlap.
    if (h.data_start != 8 + h.header_len || h.data_start + h.data_len != size) __builtin_trap();
    uint64_t cursor = 0;
    for (const auto& t : h.tensors) {
      if (t.begin > t.end || t.end > h.data_len) __builtin_trap();
      const auto want = bloomery::dtype_bytes_for(t.dtype, t.numel);
      if (!want || *want != t.end - t.begin) __builtin_trap();
      if (t.begin == t.end) continue;
      if (t.begin != cursor) __builtin_trap();
      cursor = t.end;
    }
    if (cursor != h.data_len) __builtin_trap();
  } catch (const bloomery::Error& e) {
    // Only the safetensors catalogue may refuse a header; anything else (another exception type) escapes and
    // libFuzzer reports it.
    if (e.id().rfind("E_ST_", 0) != 0) __builtin_trap();
  }
  return 0;
}
