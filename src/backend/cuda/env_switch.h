// The CUDA backend's measurement switches (BLOOMERY_CUDA_*): read once where each is kept, never per call.
#pragma once

#include <cstdlib>
#include <string_view>

namespace bloomery::cuda {

// True when the environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v && value == v;
}

}  // namespace bloomery::cuda
