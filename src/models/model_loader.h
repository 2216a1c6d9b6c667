// Loading a model folder: open (TensorSource), resolve formats, let the family declare its tensors, refuse a
// missing or mis-shaped tensor and check every weight's stored header, compute the memory plan and refuse one
// that does not fit — all BEFORE any weight is allocated — then load through the backend (its bulk loader
// when it registered one: CUDA reads shards in parallel with direct I/O into pinned staging) and bind.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "core/error.h"
#include "core/progress.h"
#include "formats/classify.h"
#include "formats/tensor_source.h"
#include "models/memory_plan.h"
#include "models/model.h"

namespace bloomery {

struct LoadOptions {
  MemoryPlanOptions plan;                      // context × sequences, ubatch, --mem-budget
  ProgressMode progress = ProgressMode::Auto;  // Quiet: no bar
  // Use the backend's bulk loader when it has one (CUDA: parallel O_DIRECT reads into pinned staging,
  // overlapped with uploads; checked on the H200 by tests/gpu/loader_test.cc: every fixture's device bytes
  // equal the per-weight path's). Backends without one load weight after weight.
  bool bulk = true;
  int reader_threads = 0;  // bulk loader reader threads; 0 = automatic
  // Called with the plan once it is computed, before it is checked and before any allocation (the start
  // screen prints it here).
  std::function<void(const MemoryPlan&)> on_plan;
  // Called with (bytes read, bytes to read) as the weights load, from the loader's threads (thread-safe!).
  std::function<void(uint64_t, uint64_t)> on_progress;
  // Tensor parallelism: this rank of tp_size and its communicator (ModelConfig's fields). A rank reads only
  // its slices of the cut tensors; the memory plan is the rank's.
  int tp_rank = 0, tp_size = 1;
  Communicator* comm = nullptr;
  // --spec-type draft-mtp: refuse (E_SPEC_NO_DRAFT, before any allocation) a checkpoint whose draft layer
  // is missing or, under TP, cannot be cut.
  bool require_draft = false;
  // The attention K/V caches' element type (-ctk/-ctv, models/kv_cache_type.h): the memory plan counts it.
  ElemType kv_type = ElemType::F32;
};

// One weight to load, as the plan saw it.
struct WeightJob {
  std::string name;
  const WeightRecord* record = nullptr;
  std::vector<int64_t> shape;  // logical shape the family declared (or the stored one)
  bool streamed = false;       // PLE table: rows read on demand
  uint64_t read_bytes = 0;     // checkpoint bytes of its stored parts
  uint64_t backend_bytes = 0;  // what the backend keeps (the plan's number)
  TensorCut cut = {};          // a TP rank's part (whole otherwise)
};

// How the weights were read.
struct LoadStats {
  uint64_t bytes = 0;               // checkpoint bytes read for loaded (not streamed) weights
  uint64_t direct_bytes = 0;        // of which through O_DIRECT
  double seconds = 0;               // wall time of the weight loading (after the plan)
  int threads = 1;                  // reader threads
  std::string path = "per-weight";  // "per-weight" or the bulk loader's name
  double gb_per_s() const { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0; }
  std::string summary() const;
};

struct LoadedModel {
  std::unique_ptr<TensorSource> source;  // records and streamed weights point into it: never moved
  ResolvedCheckpoint checkpoint;
  ModelConfig config;
  WeightSet weights;
  std::unique_ptr<Model> model;
  Warnings warnings;
  std::string folder;
  MemoryPlan plan;
  std::vector<WeightJob> jobs;  // every declared tensor found in the checkpoint, in declaration order
  std::string draft_dropped;    // why the draft layer is not loaded though shipped (its TP cuts); "" if not
  LoadStats stats;
};

// Checks only: the family's declarations against the checkpoint (E_MODEL_TENSOR_MISSING, E_DENSE_SHAPE).
// Returns, per declaration, the record to load (null for an absent optional tensor).
// The optional tensors the model declared (its MTP/NextN draft layer) that the checkpoint lacks, as one line
// ("mtp.fc.weight, mtp.norm.weight, … (12 in all)"); "" when none is missing.
std::string missing_draft_tensors(const LoadedModel& lm);

// Under TP an optional tensor whose cut the stored format cannot take (E_TP_CUT) drops every optional
// declaration (the draft layer is all or nothing) when `optional_dropped` is given, which then says why;
// without it the refusal is thrown like any other.
std::vector<const WeightRecord*> match_declarations(const std::vector<TensorDecl>& decls,
                                                    const std::vector<WeightRecord>& records,
                                                    std::string* optional_dropped = nullptr);

// Everything before the first allocation: open, headers, declarations, every weight's stored-header checks
// (the format layer's, on zero rows), the memory plan for a backend named `backend_name` with `memory`.
// Allocates nothing on any backend. The plan is NOT checked here (check_memory_plan).
std::unique_ptr<LoadedModel> prepare_model(const std::filesystem::path& folder, std::string_view backend_name,
                                           Backend::MemoryInfo memory, const LoadOptions& options = {});
// The weights of a prepared model through `backend`, then bind.
void load_weights(LoadedModel& lm, Backend& backend, const LoadOptions& options = {});

// The whole road: prepare → on_plan → check_memory_plan (E_MEMORY_PLAN) → load_weights. Throws
// bloomery::Error on any structural problem, before compute; on a throw nothing stays allocated.
std::unique_ptr<LoadedModel> load_model(const std::filesystem::path& folder, Backend& backend,
                                        const LoadOptions& options = {});

// ---- bulk loaders ----------------------------------------------------------------------------------------
// A backend library registers its own way of loading many weights at once under its Backend::name(). The
// registry is a constant-initialised inline table, so a backend registers from a static initialiser without
// the models library linking it.
struct BulkLoadContext {
  const TensorSource& source;
  std::span<const WeightJob> jobs;  // non-streamed weights only
  Warnings& warnings;
  Progress& progress;  // add() the read bytes of every job as they arrive (sums to Σ read_bytes)
  LoadStats& stats;    // fill direct_bytes, threads, path
  int threads = 0;     // requested reader threads (0 = the loader chooses)
};
// Returns one Weight per job, in job order. Throws like Backend::load_weight; on a throw it frees everything.
using BulkLoadFn = std::vector<Weight> (*)(Backend& backend, BulkLoadContext& ctx);

struct BulkLoaderEntry {
  const char* backend = nullptr;
  BulkLoadFn fn = nullptr;
};
inline BulkLoaderEntry g_bulk_loaders[4] = {};
inline bool register_bulk_loader(const char* backend, BulkLoadFn fn) {
  for (BulkLoaderEntry& e : g_bulk_loaders)
    if (!e.backend) {
      e = BulkLoaderEntry{backend, fn};
      return true;
    }
  return false;
}
inline BulkLoadFn find_bulk_loader(std::string_view backend) {
  for (const BulkLoaderEntry& e : g_bulk_loaders)
    if (e.backend && backend == e.backend) return e.fn;
  return nullptr;
}

}  // namespace bloomery
