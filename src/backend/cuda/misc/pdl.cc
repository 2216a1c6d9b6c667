// The switch behind misc/pdl.cuh's pdl_launch(): programmatic dependent launch on unless BLOOMERY_CUDA_PDL=0.
#include <atomic>

#include "backend/cuda/env_switch.h"
#include "backend/cuda/misc/pdl.cuh"

namespace bloomery::cuda {
namespace {

std::atomic<bool>& pdl_slot() {
  static std::atomic<bool> on{!env_is("BLOOMERY_CUDA_PDL", "0")};
  return on;
}

}  // namespace

bool pdl_enabled() {
  return pdl_slot().load(std::memory_order_relaxed);
}

void set_pdl(bool on) {
  pdl_slot().store(on, std::memory_order_relaxed);
}

}  // namespace bloomery::cuda
