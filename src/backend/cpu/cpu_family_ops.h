// CPU implementations of the family-specific ops of backend/family_ops.h (qwen4_exp / glm5_next).
//
// Ownership: helper G2 owns this file (G1 created the empty class so CpuBackend can inherit it). Override
// FamilyOps' virtuals here and define them in backend/cpu/{qsa,ple,hyper_connections,kda,mla_dsa,mhc}*.cc.
// `pool()` gives the CPU backend's thread pool for parallel loops.
#pragma once

#include "backend/family_ops.h"
#include "core/thread_pool.h"

namespace bloomery::cpu {

class CpuFamilyOps : public virtual FamilyOps {
 public:
  explicit CpuFamilyOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  ThreadPool& pool() const { return pool_; }

 private:
  ThreadPool& pool_;
};

}  // namespace bloomery::cpu
