// Stored element types of safetensors files, with their sizes in bits.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace bloomery {

enum class DType : uint8_t {
  BOOL,
  U8,
  I8,
  U16,
  I16,
  U32,
  I32,
  U64,
  I64,
  F16,
  BF16,
  F32,
  F64,
  C64,
  F8_E4M3,
  F8_E5M2,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  F6_E2M3,
  F6_E3M2,
  F4,
};

// The safetensors dtype string ("BF16", "F8_E4M3", ...); nullopt for an unknown string.
std::optional<DType> dtype_from_string(std::string_view s);
std::string_view dtype_name(DType t);
// Bits per element: 4 for F4, 6 for F6_*, else 8 × bytes.
int dtype_bits(DType t);

// Bytes that numel elements occupy; nullopt when numel × bits does not fill whole bytes or overflows.
std::optional<uint64_t> dtype_bytes_for(DType t, uint64_t numel);

}  // namespace bloomery
