// The memory plan (serving.md R-2, issue 6 §2): before any weight is allocated, the bytes the backend will
// hold — weights by role in the form the backend keeps them, host-resident PLE tables, KV / recurrent state
// for the requested context × sequences, a scratch estimate — against the backend's free memory (or
// --mem-budget). A plan that does not fit is refused with E_MEMORY_PLAN naming every size.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "formats/decode.h"
#include "formats/weight_record.h"
#include "models/roles.h"

namespace bloomery {

// The plan's weight groups (roles.h folded into what a user recognises).
enum class PlanGroup : uint8_t { Experts, Attention, LinearAttention, EmbeddingsHead, Draft, NormsOther };
constexpr int kPlanGroups = 6;
std::string_view plan_group_name(PlanGroup g);
PlanGroup plan_group(Role r);

// How the backend keeps a loaded weight.
enum class WeightKeeping {
  Stored,      // CUDA: stored bytes + scales (f32-widened FP8 grids) + an f32 copy of small dense parameters
  DecodedF32,  // CPU: every weight decoded to f32
};
WeightKeeping keeping_for_backend(std::string_view backend_name);

// Device buffers of the stored form are padded (kernels may read 16 bytes past the end) and 256-aligned;
// the CUDA loader places them in one arena with exactly these sizes.
constexpr uint64_t kDeviceBufferAlign = 256;
inline uint64_t device_buffer_bytes(uint64_t n) {
  return (n + 16 + kDeviceBufferAlign - 1) / kDeviceBufferAlign * kDeviceBufferAlign;
}
// Dense parameters up to this many elements also get an f32 copy on the card (norms, conv kernels, A_log).
constexpr int64_t kDenseCopyMaxElements = 262144;

// The stored form of one weight as the CUDA backend keeps it.
struct StoredLayout {
  bool decode_f32 = false;  // a parameter of a non-float stored dtype: decoded and kept as f32
  uint64_t main = 0;        // element bytes (or numel × 4 when decode_f32)
  uint64_t scales = 0;      // block scales as stored (NVFP4 E4M3, MX E8M0) or f32-widened (FP8 channel/block)
  uint64_t dense_copy = 0;  // the f32 copy of a small dense parameter
  // Arena bytes of the buffers (main and scales, each padded by device_buffer_bytes).
  uint64_t arena() const { return device_buffer_bytes(main) + (scales ? device_buffer_bytes(scales) : 0); }
  uint64_t total() const { return arena() + dense_copy; }
};
// stored_layout(rec, header, numel): `header` is the record's stored header (format, dtypes, rows × cols of
// the whole weight; spans unused). Throws E_BACKEND_UNSUPPORTED for MX scales the kernels cannot read.
// decodes_to_f32(rec): whether the CUDA backend keeps the record as f32 (a dense record whose dtype is not
// its format's). Both inline (defined at the end): the CUDA loader uses them and does not link this room.

struct MemoryPlanOptions {
  int64_t context = 4096;          // tokens per sequence the KV / state is sized for
  int64_t sequences = 1;           // sequences (server slots) held at once
  int64_t ubatch = 512;            // tokens per forward (activations, logits)
  uint64_t budget_bytes = 0;       // hard ceiling (--mem-budget); 0 = the backend's free memory
  uint64_t spec_per_sequence = 0;  // drafting: Model::spec_bytes(), the copies a verify holds until commit
  // The prompt cache: one snapshot of the recurrent parts per sequence at its last prompt's end (a copy of
  // the same parts a verify copies, so Model::spec_bytes() again).
  uint64_t snapshot_per_sequence = 0;
};

struct MemoryPlan {
  std::string backend;
  WeightKeeping keeping = WeightKeeping::Stored;
  std::array<uint64_t, kPlanGroups> weights{};  // backend bytes per group
  uint64_t weights_total = 0;
  uint64_t host_tables = 0;  // streamed PLE tables: rows read from host memory / disk, not on the device
  uint64_t read_bytes = 0;   // checkpoint bytes the load reads (progress total)
  uint64_t state = 0;        // KV + recurrent + conv state for context × sequences (0 when unknown)
  bool state_known = false;  // Model::state_bytes gave a number
  uint64_t spec = 0;         // MTP verify copies of the recurrent state, all sequences (0: not drafting)
  uint64_t snapshots = 0;    // the prompt cache's recurrent snapshots, all sequences (0: off)
  uint64_t scratch = 0;      // activation / logits / workspace estimate
  int64_t context = 0, sequences = 0;
  uint64_t free_bytes = 0, total_bytes = 0;  // from Backend::memory_info (0 = unknown)
  uint64_t budget = 0;                       // what the plan is held against (0 = unknown: never refused)
  std::string budget_source;                 // "free device memory", "--mem-budget", ...

  uint64_t needed() const { return weights_total + state + spec + snapshots + scratch; }
  // " + MTP verify X + prompt snapshots Y" for the terms that are there (summary and refusal lines).
  std::string extra_terms() const;
  bool fits() const { return budget == 0 || needed() <= budget; }
  // Human lines for the start screen / `bloomery run` (one size per line).
  std::vector<std::string> lines() const;
  // One line: "weights 1.2 GiB + KV/state 3.0 GiB + scratch 80 MiB = 4.3 GiB of 139 GiB free".
  std::string summary() const;
};

// Adds one weight to the plan.
void plan_add_weight(MemoryPlan& plan, PlanGroup group, uint64_t backend_bytes);
// Fills state / scratch / budget and totals. `state_per_sequence` is Model::state_bytes(context).
void plan_finish(MemoryPlan& plan, uint64_t state_per_sequence, uint64_t scratch, uint64_t free_bytes,
                 uint64_t total_bytes, const MemoryPlanOptions& opts);
// Scratch estimate from the text config (vocab, hidden, intermediate and MoE widths) and the ubatch.
uint64_t scratch_estimate(int64_t vocab, int64_t hidden, int64_t intermediate, int64_t ubatch);

// Throws E_MEMORY_PLAN (naming every size, expected = the budget, found = the need) unless the plan fits.
void check_memory_plan(const MemoryPlan& plan, const std::string& folder);

// ---- inline definitions ----

namespace memory_plan_detail {

inline bool is_dense(FormatId f) {
  return f == FormatId::BF16 || f == FormatId::F16 || f == FormatId::F32;
}

inline DType dense_dtype(FormatId f) {
  return f == FormatId::BF16 ? DType::BF16 : (f == FormatId::F16 ? DType::F16 : DType::F32);
}

}  // namespace memory_plan_detail

inline bool decodes_to_f32(const WeightRecord& rec) {
  using namespace memory_plan_detail;
  return is_dense(rec.format) && (rec.main.size() != 1 || rec.main[0]->dtype != dense_dtype(rec.format));
}

inline StoredLayout stored_layout(const WeightRecord& rec, const WeightBytes& header, int64_t numel) {
  using namespace memory_plan_detail;
  StoredLayout s;
  const FormatId f = rec.format;
  if (decodes_to_f32(rec)) {
    s.decode_f32 = true;
    s.main = static_cast<uint64_t>(numel) * 4;
    return s;
  }
  const Where where{"", rec.name, ""};
  const PartSizes p = expected_part_sizes(header, where);
  s.main = p.main;
  switch (f) {
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
      s.scales = p.block_scale;
      break;
    case FormatId::MXFP4:
    case FormatId::MXFP8:
      // The CUDA kernels read E8M0 / U8 block scales only: refused here, before anything is allocated.
      if (header.scale_dtype != DType::U8 && header.scale_dtype != DType::F8_E8M0)
        raise("E_BACKEND_UNSUPPORTED", Where{"", rec.name, "weight_scale"}, "E8M0 / U8 MX block scales",
              std::string(dtype_name(header.scale_dtype)) + " scales (not yet read by the CUDA kernels)");
      s.scales = p.block_scale;
      break;
    case FormatId::FP8_CHANNEL:
      s.scales = header.rows * 4;
      break;
    case FormatId::FP8_BLOCK: {
      const uint64_t gr = (header.rows + header.block_n - 1) / header.block_n,
                     gc = (header.cols + header.block_k - 1) / header.block_k;
      s.scales = gr * gc * 4;
      break;
    }
    default:
      break;
  }
  if (is_dense(f) && f != FormatId::F32 && numel <= kDenseCopyMaxElements)
    s.dense_copy = static_cast<uint64_t>(numel) * 4;
  return s;
}

}  // namespace bloomery
