// The dynamic shared memory opt-in every kernel above 48 KB a block needs (tc_gemm, gemv_tc, flash
// attention).
#pragma once

#include <string>

namespace bloomery::cuda {

// Raises `kernel`'s dynamic shared memory limit to `bytes`, once per kernel and device (an attribute is the
// current device's; the TP ranks of one process drive several). `what` names the kernel in the error.
void opt_in_shared_memory(const void* kernel, int bytes, const std::string& what);

}  // namespace bloomery::cuda
