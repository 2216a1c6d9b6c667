// -ctk/--cache-type-k and -ctv/--cache-type-v for `bloomery run` and `bloomery bench`, with serve's meaning
// (models/kv_cache_type.h).
#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "models/kv_cache_type.h"

namespace bloomery::tools {

struct KvCacheFlags {
  std::string k = "auto", v = "auto";
  // E_FLAG_VALUE / E_FLAG_REFUSED by name.
  ElemType type() const { return kv_cache_type(k, v); }
};

// The long names; call respell_kv_cache_flags on argv first for llama-server's -ctk/-ctv (CLI11 takes no
// multi-letter single-dash names).
inline void add_kv_cache_options(CLI::App& app, KvCacheFlags& f) {
  const char* what =
      "(-ctk / -ctv) KV cache type: auto (f32 on both engines), f16 or bf16 (a BF16 "
      "cache: half the memory, decode 1-3 % slower on the card), f32; one flag alone sets K and V";
  app.add_option("--cache-type-k", f.k, what);
  app.add_option("--cache-type-v", f.v, what);
}

inline void respell_kv_cache_flags(int argc, char** argv) {
  static char k[] = "--cache-type-k", v[] = "--cache-type-v";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-ctk") argv[i] = k;
    if (a == "-ctv") argv[i] = v;
  }
}

}  // namespace bloomery::tools
