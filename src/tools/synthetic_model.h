// `bloomery bench --synthetic <family>[:config.json]`: a model built at its real size directly in memory, no
// file. The family's own declare() list gives every tensor; each gets the stored format the named export
// ships (formats.md §9) filled with random bytes whose scales keep activations finite (weights of roughly
// N(0, 1/K) magnitude, zero-centred norms near 0, GDN decay parameters in their usual ranges). Big tensors
// are windows of shared random pools, so building 70 GB costs little more than the upload.
//
// Backend-agnostic: each tensor's stored bytes go to an uploader the caller supplies (CUDA: upload_stored,
// the bytes stay in their format on the card); without one they are validated and decoded by the format
// layer and loaded as f32 with Backend::upload_weight (the CPU backend; tiny configs). The streamed PLE
// table is handed over as host shards (CUDA: a host-resident table), or decoded whole without a table hook.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "formats/decode.h"
#include "models/model.h"
#include "parallel/local_ranks.h"
#include "tools/bench_bytes.h"

namespace bloomery::tools {

// Which export's formats the tensors get.
enum class SyntheticLayout {
  Nvidia,  // nvidia/…-NVFP4 (ModelOpt): routed experts NVFP4, MTP experts FP8 128×128 blocks, PLE table FP8,
           // rest BF16. qwen3_next gets the same rule (its `mtp.` experts FP8 blocks too: an assumption, not
           // read from NVIDIA's export); glm5_next's NextN layer (layers.L.) is not `mtp.`, so its experts
           // are NVFP4.
  Qad,  // QAD export (models.md §3.11): + projections MXFP8 (GDN, attention, indexer, shared expert, HC
        // down/up, PLE projections), MTP experts and the PLE table NVFP4
};
SyntheticLayout parse_synthetic_layout(const std::string& name);  // "nvidia" | "qad"; E_BENCH_ARGS otherwise

// The built-in full-size config.json of a family (qwen4_exp: models.md §3.2, qwen3_next: §2.2, glm5_next:
// §4.2 shipped values). Throws E_BENCH_UNSUPPORTED for a family without one.
nlohmann::json builtin_config(const std::string& family);
// "family[:path]": the built-in config with path's JSON merged over it (RFC 7386 merge patch; a file
// without text_config is merged into text_config). E_BENCH_CONFIG when the file cannot be read.
nlohmann::json synthetic_config(const std::string& spec);
// The config with only its first `layers` decoder layers (`bench --layers N`, so that a model too big for
// one device fits it at full per-layer shapes): num_hidden_layers, every per-layer schedule cut to length,
// layer id lists (PLE layers) cut. E_BENCH_ARGS outside 1 … num_hidden_layers.
nlohmann::json limit_layers(const nlohmann::json& config, int64_t layers);

// A streamed table's stored bytes as runs of rows in host memory (one run per allocation).
struct SyntheticTable {
  FormatId format = FormatId::FP8_TENSOR;
  uint64_t rows = 0, cols = 0;
  struct Shard {
    uint64_t rows = 0;
    const uint8_t* elements = nullptr;      // packed rows
    const uint8_t* block_scales = nullptr;  // NVFP4: cols/16 E4M3 bytes per row; else null
  };
  std::vector<Shard> shards;
  float global = 1.0f;  // FP8_TENSOR scale / NVFP4 weight_scale_2
  std::shared_ptr<const void> owner;
};

struct SyntheticHooks {
  // Stored bytes → a Weight in that format. Null: decode to f32 and Backend::upload_weight.
  std::function<Weight(const std::string& name, std::vector<int64_t> shape, const WeightBytes& bytes)> stored;
  // A streamed table (the PLE n-gram table). Null: decoded whole and uploaded like any weight (tiny only).
  std::function<Weight(const std::string& name, std::vector<int64_t> shape, const SyntheticTable& table)>
      table;
};

struct SyntheticModel {
  ModelConfig config;
  WeightSet weights;
  std::unique_ptr<Model> model;
  std::vector<WeightCost> costs;                    // every built weight, as stored (for the roofline)
  std::map<std::string, uint64_t> bytes_by_format;  // stored bytes per format name
  uint64_t table_bytes = 0;                         // streamed tables (host memory)
  double build_seconds = 0;                         // random pools + every upload + bind
};

// What build_synthetic would make, without making it: the model's config, every weight's stored cost and
// the bytes per format (`bloomery bench --synthetic … --plan-only`; the roofline of a model too big for the
// machine at hand).
struct SyntheticPlan {
  ModelConfig config;
  std::string family;
  std::vector<WeightCost> costs;
  std::map<std::string, uint64_t> bytes_by_format;
  uint64_t table_bytes = 0;
};
SyntheticPlan plan_synthetic(const nlohmann::json& config, SyntheticLayout layout);
// E_MEMORY_PLAN, before any weight is made, when the plan's stored weights (the host table apart, which stays
// in host memory) exceed free_bytes (0: unknown, nothing checked), naming `name` and --layers as the way out.
// A lower bound: caches and scratch come on top, so a model just under it can still fail an allocation (with
// the tensor's name, E_CUDA).
void check_synthetic_fits(const SyntheticPlan& plan, uint64_t free_bytes, const std::string& name);

// Builds config's model with random weights on `backend`, `threads` host workers (0: every core); its K/V
// caches in kv_type (-ctk/-ctv).
std::unique_ptr<SyntheticModel> build_synthetic(const nlohmann::json& config, Backend& backend,
                                                SyntheticLayout layout, const SyntheticHooks& hooks,
                                                int threads = 0, uint64_t seed = 42,
                                                ElemType kv_type = ElemType::F32);

// ---- tensor parallelism (`bench --synthetic … --tp N`) ----
// What every rank's build draws from: the whole (TP 1) model's per-tensor plans, each seeded by its index
// in the whole model's declarations, and the random pools. A rank generates a tensor's whole stored bytes
// (pool windows: nothing is copied) and keeps only its cut of them, sliced as the format layer slices a
// checkpoint's (formats/weight_slice.h), so TP N runs exactly the slices of the TP 1 model's weights and
// replicated tensors (norms, routers, embeddings) are the same bytes on every rank. Built once per process
// (in-process ranks share the pools and the PLE table); the bytes depend only on the config, the layout and
// the seed, so processes of one --nodes group build the same model.
struct SyntheticSource;
std::shared_ptr<SyntheticSource> make_synthetic_source(const nlohmann::json& config, SyntheticLayout layout,
                                                       int threads = 0, uint64_t seed = 42);
double source_seconds(const SyntheticSource& source);  // the time make_synthetic_source took (the pools)
// Rank tp_rank of tp_size (comm: its communicator; null for tp_size 1): the family declares the rank's
// shapes and cuts (models/tp_shard.h), and the rank builds only those. Refuses, before anything is
// built, a world size the shapes do not divide (the family's E_TP_CUT) and a cut off the stored format's
// unit (E_TP_CUT, as for a checkpoint). `costs` and `bytes_by_format` are the rank's own (its slices).
std::unique_ptr<SyntheticModel> build_synthetic_rank(SyntheticSource& source, Backend& backend,
                                                     const SyntheticHooks& hooks, int tp_rank, int tp_size,
                                                     Communicator* comm, int threads = 0,
                                                     ElemType kv_type = ElemType::F32);
// The TP group's way to get a rank's model (TpGroup, LocalTpRanks): build_synthetic_rank for the rank the
// options name, with hooks_for(that rank's backend), as a LoadedModel (config, weights, model; no
// checkpoint). `on_built`, when set, sees each rank's SyntheticModel first (costs, bytes, build time), from
// that rank's thread.
LoadRank synthetic_load_rank(std::shared_ptr<SyntheticSource> source,
                             std::function<SyntheticHooks(Backend&)> hooks_for, int threads,
                             std::function<void(const SyntheticModel&, int rank)> on_built = nullptr);

}  // namespace bloomery::tools
