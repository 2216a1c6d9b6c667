// A row table the CUDA backend keeps in HOST memory in its stored format (the qwen4_exp PLE n-gram table:
// 320,001,536 rows × 160, 47.7 GiB in FP8), never decoded whole and never put on the card.
//
// How a gather works (host_table/host_table.cc): the requested rows' stored bytes (elements, and their block
// scales or scale-grid rows) are packed by the CPU into a pinned staging buffer, sent with ONE
// cudaMemcpyAsync on the backend's stream, and one kernel decodes them to f32 rows on the card with the same
// arithmetic as the CPU decoders (dequant.cu), so a gather equals the CPU backend's gather_rows bit for bit.
// Backend::prefetch_rows packs the next step's rows in the background so the next gather with those ids only
// issues the copy. A prefetch is used by the gather whose id list is EXACTLY the same (same rows, same
// order); any other gather packs its own rows (same result, no time saved). Up to 32 prefetches may be
// pending per table (one per sequence of a batch); beyond that the oldest is dropped. Staging is pinned
// memory that grows to the largest gather seen (10 MiB for a 4K-token FP8 prompt) per slot in use.
//
// Implementation: cuda_host_table.cc (CudaBackend entry points), host_table/host_table.cc (packing, staging,
// prefetch), host_table/checkpoint_table.cc (mapping a checkpoint's shards).
//
// Two ways in:
//   * CudaBackend::stream_weight (a checkpoint's table): its shard files are mapped read-only (mmap); with
//     BLOOMERY_PLE_PLACEMENT=pinned the rows are copied once into pinned host memory instead.
//   * make_host_table below (tables built in memory without a file: `bloomery bench --synthetic`, tests).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "formats/format_table.h"

namespace bloomery::cuda {

class CudaBackend;

// One run of consecutive rows (a checkpoint shard, or one allocation of a synthetic table). Row r of the
// shard (0-based inside it) has its stored elements at `elements + r · element_pitch` and, for block-scaled
// formats, its block scales at `block_scales + r · scale_pitch`.
struct HostTableShard {
  uint64_t rows = 0;
  const void* elements = nullptr;
  uint64_t element_pitch = 0;  // bytes between rows; 0 = packed (= the format's bytes per row, below)
  // NVFP4 / W4A16_NVFP4 / NVFP4_CT: E4M3 bytes, cols/16 per row. MXFP4 / MXFP8: E8M0 bytes, cols/32 per row.
  // Other formats: null.
  const void* block_scales = nullptr;
  uint64_t scale_pitch = 0;  // bytes between scale rows; 0 = packed
};

// The stored format of a host table. Bytes per row of `elements` (cols = the row width):
//   BF16, F16: 2·cols    F32: 4·cols    FP8_* / MXFP8: cols    NVFP4 family / MXFP4: cols/2 (two elements a
//   byte, the even element in the low nibble).
// Value of element (r, k), exactly as formats/decode.h and dequant.cu compute it:
//   BF16/F16/F32: the value;  FP8_TENSOR: e4m3 · global;  NVFP4 family: (e2m1 · e4m3(block)) · global;
//   MXFP4: e2m1 · 2^(b−127);  MXFP8: e4m3 · 2^(b−127);  FP8_CHANNEL / FP8_BLOCK: e4m3 · grid value.
struct HostTableBytes {
  FormatId format = FormatId::BF16;
  uint64_t cols = 0;                   // row width in elements (160 for the shipped PLE table)
  std::vector<HostTableShard> shards;  // in row order; their rows add up to the table's rows
  // NVFP4 family: the f32 MULTIPLIER applied after the block product (weight_scale_2; for NVFP4_CT pass
  // 1/weight_global_scale). FP8_TENSOR: the per-tensor scale. Ignored by the other formats.
  float global = 1.0f;
  // FP8_CHANNEL / FP8_BLOCK only: the table-wide scale grid as stored, [ceil(rows/block_n),
  // ceil(cols/block_k)] elements of grid_dtype (F32, BF16, F16, or U8/F8_E8M0 as 2^(b−127)); FP8_CHANNEL is
  // block_n = 1, block_k = cols. Null for every other format.
  const void* scale_grid = nullptr;
  DType grid_dtype = DType::F32;
  int block_n = 0, block_k = 0;
  // True when the pointers lie in a read-only MAP_SHARED mapping of a file (a checkpoint's shards): packing
  // then asks the kernel for the rows' pages first (madvise WILLNEED), so disk reads overlap instead of
  // faulting in one by one. Leave false for memory (an advice per row would only cost time).
  bool file_backed = false;
  // Keeps every pointer above valid for as long as the table lives (the Weight holds it). Plain malloc'd,
  // mmap'd or cudaHostAlloc'd memory all work: gathers copy rows through their own pinned staging buffer.
  std::shared_ptr<const void> owner;
};

// A streamed Weight (Weight::streamed() is true) over host bytes: gather_rows and prefetch_rows of `be` read
// it; every other op refuses it. shape = {rows, cols} (rows = Σ shard rows) or {rows, a, b} with a·b = cols.
// Nothing is copied at creation. Throws E_BACKEND_SHAPE when the description is inconsistent (shape vs
// shards, a missing scale pointer, a pitch below the row bytes, a cols the format cannot split into blocks)
// and E_BACKEND_UNSUPPORTED for a format this path does not read. The Weight must only be used with `be`.
Weight make_host_table(CudaBackend& be, std::string name, std::vector<int64_t> shape, HostTableBytes bytes);

// Counters of one host table (tests, bench): what gathers and prefetches did.
struct HostTableStats {
  uint64_t gathers = 0;        // gather_rows calls
  uint64_t rows = 0;           // rows gathered
  uint64_t bytes_copied = 0;   // bytes sent host → device (stored bytes + widened grid scales)
  uint64_t prefetches = 0;     // prefetch_rows calls
  uint64_t prefetch_hits = 0;  // gathers that found their rows already packed by a prefetch
  bool pinned = false;         // rows held in pinned memory (else mapped file / caller memory)
};
// Throws E_BACKEND_UNSUPPORTED when `table` is not a host table of the CUDA backend.
HostTableStats host_table_stats(const Weight& table);

}  // namespace bloomery::cuda
