// The CUDA backend's whole-checkpoint loader (formats.md §2.4, serving.md R-1): reader threads read every
// weight's stored bytes with O_DIRECT (4 KiB-aligned windows, buffered where the file system refuses) into a
// ring of pinned staging slots, run the format layer's validation on each window, and the main thread copies
// the slots to the card on a copy stream while the next ones are read. All device memory is one arena sized
// exactly as the memory plan says. Registered as the "cuda" bulk loader (models/model_loader.h).
#pragma once

#include <vector>

#include "backend/backend.h"
#include "models/model_loader.h"

namespace bloomery::cuda {

// BulkLoadFn for the CUDA backend (`backend` must be a CudaBackend).
std::vector<Weight> parallel_load(Backend& backend, BulkLoadContext& ctx);

}  // namespace bloomery::cuda
