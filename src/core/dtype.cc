#include "core/dtype.h"

#include <array>
#include <utility>

namespace bloomery {
namespace {

struct DTypeRow {
  DType type;
  std::string_view name;
  int bits;
};

constexpr std::array<DTypeRow, 22> kRows{{
    {DType::BOOL, "BOOL", 8},
    {DType::U8, "U8", 8},
    {DType::I8, "I8", 8},
    {DType::U16, "U16", 16},
    {DType::I16, "I16", 16},
    {DType::U32, "U32", 32},
    {DType::I32, "I32", 32},
    {DType::U64, "U64", 64},
    {DType::I64, "I64", 64},
    {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},
    {DType::F32, "F32", 32},
    {DType::F64, "F64", 64},
    {DType::C64, "C64", 64},
    {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},
    {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::F6_E2M3, "F6_E2M3", 6},
    {DType::F6_E3M2, "F6_E3M2", 6},
    {DType::F4, "F4", 4},
}};

constexpr bool rows_follow_enum() {
  for (size_t i = 0; i < kRows.size(); ++i)
    if (static_cast<size_t>(kRows[i].type) != i) return false;
  return true;
}
static_assert(rows_follow_enum(), "kRows must list DType values in enum order");

const DTypeRow& row(DType t) {
  return kRows[static_cast<size_t>(t)];
}

}  // namespace

std::optional<DType> dtype_from_string(std::string_view s) {
  for (const auto& r : kRows)
    if (r.name == s) return r.type;
  return std::nullopt;
}

std::string_view dtype_name(DType t) {
  return row(t).name;
}

int dtype_bits(DType t) {
  return row(t).bits;
}

std::optional<uint64_t> dtype_bytes_for(DType t, uint64_t numel) {
  const unsigned __int128 total_bits = static_cast<unsigned __int128>(numel) * dtype_bits(t);
  if (total_bits % 8 != 0) return std::nullopt;
  const unsigned __int128 bytes = total_bits / 8;
  if (bytes > UINT64_MAX) return std::nullopt;
  return static_cast<uint64_t>(bytes);
}

}  // namespace bloomery
