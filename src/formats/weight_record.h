// One record per logical weight: its resolved format and the stored tensors that carry it.
// Produced by the quantisation resolver (quant_plan / classify), read by decoders, inspect and loaders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/format_table.h"
#include "formats/tensor_source.h"

namespace bloomery {

// What a record stands for. Every stored tensor of a folder belongs to exactly one record.
enum class RecordKind : uint8_t {
  Weight,   // a weight-bearing tensor ("weight", "weight_packed", a fused parameter P, a PLE table),
            // classified §4.8
  Param,    // any other parameter or buffer (norms, biases, A_log, dt_bias, I64 PLE buffers), kept as stored
  KvScale,  // k_scale / v_scale of an attention module (§6.9)
};

struct WeightRecord {
  RecordKind kind = RecordKind::Weight;
  bool skipped = false;  // vision tower (model.visual.*): listed by inspect, never decoded or loaded
  std::string name;      // logical weight name: "<module>.weight", or the table name for a split PLE table
  std::string module;    // module path (name without its final parameter component)
  FormatId format = FormatId::BF16;  // Param / KvScale of a non-float dtype: F32 here, main[0]->dtype says it
  ScaleEncoding scale_encoding = ScaleEncoding::Plain;
  std::vector<uint64_t> shape;  // logical (dequantised) shape, e.g. [N, K]; [rows, width] for a split table

  // The stored tensors. `main` has one entry, or the shards of a split table in numeric shard order.
  std::vector<const TensorEntry*> main;
  const TensorEntry* block_scale = nullptr;  // weight_scale / weight_scale_inv (NVFP4, MX, FP8 channel/block)
  const TensorEntry* global_scale = nullptr;  // weight_scale_2, weight_global_scale, or FP8 per-tensor scale
  const TensorEntry* input_scale = nullptr;   // input_scale / input_global_scale (kept, unused by W4A16)
  const TensorEntry* csf_fixed = nullptr;     // nvfp4_csf fixed stream (scale_encoding NvFp4Csf)
  const TensorEntry* csf_exceptions = nullptr;  // nvfp4_csf exception words
  // A split NVFP4 table (PLE, fixtures' convention "shard_{j}.weight_scale"): one block scale per `main`
  // shard, in the same order; block_scale is then null and global_scale is the table-wide weight_scale_2.
  std::vector<const TensorEntry*> block_scale_shards;

  int block_n = 0;  // FP8_BLOCK tile rows (e.g. 128 or 32); 0 otherwise
  int block_k = 0;  // FP8_BLOCK tile columns

  uint64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  uint64_t cols() const {
    uint64_t c = 1;
    for (size_t i = 1; i < shape.size(); ++i) c *= shape[i];
    return c;
  }
  // Stored bytes of every part (what the weight costs in memory).
  uint64_t stored_bytes() const;
};

}  // namespace bloomery
