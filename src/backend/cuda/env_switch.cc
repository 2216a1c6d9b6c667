#include "backend/cuda/env_switch.h"

#include <string>

#include "core/error.h"

namespace bloomery::cuda {

int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi, const char* code) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || n < lo || n > hi)
    raise(code, Where{"", "", name}, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
          v);
  return static_cast<int64_t>(n);
}

}  // namespace bloomery::cuda
