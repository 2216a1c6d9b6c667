// One safetensors file's header: parsed and checked against every rule of formats.md §2.3 before any tensor
// byte is read. The memory-buffer entry points exist so the fuzzer and tests can drive the same checks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file.h"

namespace bloomery {

// The reference implementation's header limit (E_ST_HEADER_TOO_LARGE above it).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::U8;
  std::vector<uint64_t> shape;  // [] is a scalar
  uint64_t numel = 1;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t header_len = 0;                      // N, the JSON length
  uint64_t data_start = 0;                      // 8 + N: absolute file offset of the data section
  uint64_t data_len = 0;                        // file size − data_start
  std::vector<SafetensorsTensor> tensors;       // in byte order of the data section
  std::map<std::string, std::string> metadata;  // __metadata__ when it is a string→string map, else empty
};

// Checks the 8-byte length prefix against the file size (E_ST_TRUNCATED, E_ST_HEADER_TOO_LARGE) and returns
// N. `first_bytes` holds the file's first min(8, file_size) bytes or more.
uint64_t check_safetensors_prefix(std::string_view first_bytes, uint64_t file_size,
                                  const std::string& display);

// Validates the N header bytes (`header_json`, the bytes after the prefix) of a file of `file_size` bytes:
// UTF-8, JSON object, no duplicate keys, every entry well-formed, sizes, bounds, no overlap, no hole.
// `display` names the file in errors and warnings.
SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t file_size,
                                           const std::string& display, Warnings& warnings);

// Both steps on a buffer holding a file's leading bytes (the whole file, or at least its 8 + N header bytes);
// `file_size` is the real file's size. The fuzzer's entry point.
SafetensorsHeader parse_safetensors_bytes(std::string_view bytes, uint64_t file_size,
                                          const std::string& display, Warnings& warnings);

// Reads the prefix and header of `file` with two ranged reads (never the data section) and validates them.
SafetensorsHeader read_safetensors_header(const File& file, const std::string& display, Warnings& warnings);

// "BF16 [32, 64]" for messages.
std::string describe_dtype_shape(DType dtype, const std::vector<uint64_t>& shape);

}  // namespace bloomery
