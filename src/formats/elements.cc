// Compile-time checks of the element tables against values the spec states (formats.md §5).
#include "formats/elements.h"

namespace bloomery::elem {
namespace {

using detail::kE4m3;
using detail::kE8m0;

static_assert(kE4m3[0x7E] == 448.0f, "E4M3 largest finite is 448");
static_assert(kE4m3[0x01] == 0.001953125f, "E4M3 smallest subnormal is 2^-9");
static_assert(kE4m3[0x08] == 0.015625f, "E4M3 smallest normal is 2^-6");
static_assert(kE4m3[0x38] == 1.0f, "E4M3 0x38 is 1.0");
static_assert(kE4m3[0xB8] == -1.0f, "E4M3 0xB8 is -1.0");
static_assert(std::bit_cast<uint32_t>(kE4m3[0x80]) == 0x80000000u, "E4M3 0x80 is -0");
static_assert(std::bit_cast<uint32_t>(kE4m3[0xFF]) == 0xFFC00000u, "E4M3 0xFF is a negative quiet NaN");
static_assert(kE8m0[127] == 1.0f && kE8m0[128] == 2.0f && kE8m0[254] == 0x1p127f, "E8M0 is 2^(b-127)");
static_assert(kE8m0[0] == 0x1p-127f, "E8M0 byte 0 is 2^-127, kept exact");
static_assert(detail::kE5m2[0x3C] == 1.0f && detail::kE5m2[0x7B] == 57344.0f, "E5M2 1.0 and max");
static_assert(std::bit_cast<uint32_t>(detail::kE5m2[0x7C]) == 0x7F800000u, "E5M2 0x7C is +Inf");
static_assert(detail::f16_bits_to_f32_bits(0x0001) == std::bit_cast<uint32_t>(0x1p-24f), "F16 min subnormal");

}  // namespace
}  // namespace bloomery::elem
