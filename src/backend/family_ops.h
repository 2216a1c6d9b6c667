// Family-specific backend ops (qwen4_exp QSA/PLE/hyper-connections, glm5_next KDA/MLA-DSA/mHC).
//
// Ownership: this file's op declarations are owned by helper G2 (qwen4_exp / glm5_next), who adds and changes
// them freely; helper G1 owns backend.h, which inherits this interface (`class Backend : public virtual
// FamilyOps`). Each op gets a default that refuses with E_BACKEND_UNSUPPORTED so a backend that lacks it
// still builds; the CPU backend overrides them in backend/cpu/cpu_family_ops.h (G2's file), implemented in
// backend/cpu/{qsa,ple,hyper_connections,kda,mla_dsa,mhc}*.cc.
//
// Conventions are those of backend.h: F32 activations [T, ...], host spans for ids/positions, Weight handles.
#pragma once

#include <string>
#include <string_view>

#include "backend/tensor.h"
#include "core/error.h"

namespace bloomery {

class FamilyOps {
 public:
  virtual ~FamilyOps() = default;

 protected:
  [[noreturn]] static void unsupported(std::string_view op) {
    raise("E_BACKEND_UNSUPPORTED", Where{"", "", std::string(op)}, "an op this backend implements",
          "an op it does not implement");
  }

 public:
  // G2: declare ops here, e.g.
  //   virtual void kda_rule(Tensor& out, ..., Tensor& state, bool chunked) { unsupported("kda_rule"); }
};

}  // namespace bloomery
