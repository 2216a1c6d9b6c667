// Shared by CudaBackend's per-weight upload (cuda_weights.cc) and the parallel loader
// (loader/parallel_loader): how a DeviceWeight view is set from a stored header and device buffers, and how a
// Weight is built around a CudaWeight. One place, so both roads give byte-identical weights.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"

namespace bloomery::cuda {

// Fills dw's format fields from `header` (format, rows, cols, FP8 tile, global multipliers read from
// header.global_scale) and points it at `main` / `scales` (block scales as stored, or the f32 grid).
void set_device_view(DeviceWeight& dw, const WeightBytes& header, const void* main, const void* scales);

// The f32 scale grid the card keeps for an FP8 channel / block weight (exact widening); count elements.
void widen_scales(DType t, const uint8_t* bytes, uint64_t count, float* out);

// A Weight around `cw` (plus the f32 dense copy of a small dense parameter, queued on the backend's stream).
Weight wrap_cuda_weight(CudaBackend& be, std::string name, std::vector<int64_t> shape,
                        std::shared_ptr<CudaWeight> cw);

}  // namespace bloomery::cuda
