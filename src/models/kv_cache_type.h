// The attention K/V caches' element type from llama-server's -ctk/-ctv values (serving.md §1.4), one mapping
// for serve, run and bench. Header-only: the server's flag library links no model code.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "backend/tensor.h"
#include "core/error.h"

namespace bloomery {

// -ctk/-ctv auto: f32 on both engines. The CPU engine is the f32 reference. The card's BF16 cache passed its
// accuracy gate (docs/accuracy.md) but decodes 1-3 % slower than f32 (its decode attention is not bound by
// the bytes it reads; docs/performance.md, "BF16 K/V caches on the card"), so it is the memory choice (-ctk
// bf16), not the default, until that changes.
inline constexpr ElemType kDefaultKvType = ElemType::F32;

// One value's check, for a flag parser: E_FLAG_REFUSED for a quantized type (q8_0, q4_0, …, fp8: refused by
// name until they exist behind an accuracy gate), E_FLAG_VALUE for anything else unknown.
inline void check_kv_cache_value(std::string_view flag, std::string_view value) {
  static constexpr std::array<std::string_view, 4> kTaken = {"auto", "f16", "bf16", "f32"};
  static constexpr std::array<std::string_view, 7> kQuantized = {"q8_0", "q4_0", "q4_1", "iq4_nl",
                                                                 "q5_0", "q5_1", "fp8"};
  if (std::find(kTaken.begin(), kTaken.end(), value) != kTaken.end()) return;
  const std::string expected = "auto, f16, bf16 or f32";
  if (std::find(kQuantized.begin(), kQuantized.end(), value) != kQuantized.end())
    raise("E_FLAG_REFUSED", Where{"", "", std::string(flag)}, expected, "'" + std::string(value) + "'",
          "quantized KV caches are not implemented yet; bf16 halves the f32 cache");
  raise("E_FLAG_VALUE", Where{"", "", std::string(flag)}, expected, "'" + std::string(value) + "'");
}

// auto -> kDefaultKvType, or the other flag's type when only one is given (launch scripts often
// pass only -ctk); f16 and bf16 -> BF16 (bloomery's half-precision cache is BF16: the activations' range, no
// overflow of large keys); f32 -> F32. K and V take one type (the attention reads both alike, and GLM's MLA
// latent is K and V at once): two different ones are refused.
inline ElemType kv_cache_type(std::string_view k_value, std::string_view v_value) {
  check_kv_cache_value("-ctk/--cache-type-k", k_value);
  check_kv_cache_value("-ctv/--cache-type-v", v_value);
  const auto named = [](std::string_view v) {
    if (v == "auto") return kDefaultKvType;
    return v == "f32" ? ElemType::F32 : ElemType::BF16;
  };
  if (k_value == "auto") return named(v_value);
  if (v_value == "auto") return named(k_value);
  if (named(k_value) != named(v_value))
    raise("E_FLAG_VALUE", Where{"", "", "-ctk/-ctv"}, "one type for K and V",
          std::string(k_value) + " and " + std::string(v_value), "give -ctk and -ctv the same type");
  return named(k_value);
}

}  // namespace bloomery
