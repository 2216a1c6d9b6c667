// A checkpoint's streamed table (the PLE n-gram table, split in shards or not) as a HostTable: its shard
// files mapped read-only, or copied into pinned memory with BLOOMERY_PLE_PLACEMENT=pinned.
#pragma once

#include <memory>

#include "backend/cuda/host_table/host_table_impl.h"
#include "core/error.h"
#include "formats/tensor_source.h"
#include "formats/weight_record.h"

namespace bloomery::cuda::host {

// Validates the record through the format layer (the same checks as the CPU backend's stream_weight: dtypes,
// shard shapes, part sizes) and builds the table. Stored forms the packed path does not read (CSF-coded
// scales, a dense table of another dtype than its format) fall back to host decoding of the requested rows;
// `source` must then outlive the table (the model loader keeps it).
std::shared_ptr<HostTable> open_checkpoint_table(const TensorSource& source, const WeightRecord& record,
                                                 Warnings& warnings);

}  // namespace bloomery::cuda::host
