// The backend the speculative-decoding tests run on: BLOOMERY_SPEC_BACKEND (e.g. cuda on the GPU machine,
// scripts/gpu/mtp.sh), else the CPU.
#pragma once

#include <cstdlib>
#include <string>

namespace bloomery {

inline std::string spec_backend_name() {
  const char* e = std::getenv("BLOOMERY_SPEC_BACKEND");
  return e && *e ? e : "cpu";
}

}  // namespace bloomery
