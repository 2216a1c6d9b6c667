// The CUDA backend's measurement switches (BLOOMERY_CUDA_*): read once where each is kept, never per call.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace bloomery::cuda {

// True when the environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v && value == v;
}

// The integer in `name`, or `fallback` when it is unset or empty; a value that is not an integer in [lo, hi]
// is refused with error `code`, naming the variable and the range (env_switch.cc: .cu files include this
// header, so the error machinery stays out of it).
int64_t env_int(const char* name, int64_t fallback, int64_t lo, int64_t hi, const char* code);

}  // namespace bloomery::cuda
