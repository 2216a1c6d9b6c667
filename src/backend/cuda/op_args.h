// Argument helpers shared by the CudaBackend op files: size checks, the f32 copy of small parameters, the
// activation code the kernels take.
#pragma once

#include <string>
#include <string_view>

#include "backend/backend.h"

namespace bloomery::cuda {

inline void same_numel(std::string_view op, const Tensor& a, const Tensor& b) {
  BLOOMERY_NEED(a.numel() == b.numel(), op, a.shape_str() + " elements", b.shape_str());
}

inline int act_code(Act a) {
  return static_cast<int>(a);
}

// The f32 copy of a small dense parameter (norm weights, conv kernels, gate vectors).
inline const float* param_f32(const Weight& w, std::string_view op) {
  if (!w.dense().defined())
    raise("E_BACKEND_UNSUPPORTED", Where{"", w.name(), std::string(op)},
          "a small dense parameter (kept as f32 on the card)",
          "a stored-format weight " + shape_string(w.shape()));
  return w.dense().f32();
}

}  // namespace bloomery::cuda
