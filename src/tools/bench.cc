// `bloomery bench`: llama-bench style throughput: prompt processing (-p), decode (-n) at a context depth (-d)
// with concurrent sequences (-c, batched through Model::forward_batch), repeated (-r); medians and p95; a
// table or --json; and a roofline line per decode test (bytes one step reads against the copy bandwidth the
// tool measures itself). The model is a folder (-m) or built in memory at full size with random weights
// (--synthetic family[:config.json], synthetic_model.h). The timed loops live in bench_core.cc.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/select/backend_choice.h"
#include "core/error.h"
#include "models/model_loader.h"
#include "parallel/tp_step_engine.h"
#include "tokenizer/tokenizer.h"
#include "tools/bench_bytes.h"
#include "tools/bench_core.h"
#include "tools/bench_grammar.h"
#include "tools/bench_slots.h"
#include "tools/cache_options.h"
#include "tools/command.h"
#include "tools/spec_options.h"
#include "tools/synthetic_model.h"
#include "tools/tp_options.h"
#ifdef BLOOMERY_HAVE_CUDA
#include <cuda_profiler_api.h>

#include "backend/cuda/attention/decode_attention.h"
#include "backend/cuda/attention/flash_attention.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm/gemm_internal.h"
#include "backend/cuda/host_table.h"
#endif

namespace bloomery::tools {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The --ab knobs and the row suffix of each one's candidate (run_bench switches them on a CUDA backend).
const std::map<std::string, std::string> kAbCandidates{{"gemv", "gemv2"},
                                                       {"eager-zero", "lazy-zero"},
                                                       {"epilogue", "fused"},
                                                       {"gemm-lib", "cublaslt"},
                                                       {"moe", "moe2"},
                                                       {"moe-tc", "moe-tensor-cores"},
                                                       {"pdl", "pdl"},
                                                       {"gemv-x", "x-once"},
                                                       {"gemv-group", "grouped"},
                                                       {"gemv-tc", "gemv-tensor-cores"},
                                                       {"block-ops", "block-ops"},
                                                       {"router", "warp-router"},
                                                       {"flash-attn", "flash-attn"},
                                                       {"gqa-decode", "gqa-decode"},
                                                       {"gemv-fp8-row", "fp8-row"},
                                                       {"gemv-bf16-row", "bf16-row"},
                                                       {"gemm-bf16", "bf16-act"},
                                                       {"gdn-gated", "gdn-gated"}};

std::vector<std::string> ab_knob_names() {
  std::vector<std::string> names;
  for (const auto& [name, row] : kAbCandidates) names.push_back(name);
  return names;
}

// BLOOMERY_CUDA_OP_TIMES=1: per-op device times of the tg repeats (eager steps), printed after the rows.
bool op_times_requested() {
  const char* v = std::getenv("BLOOMERY_CUDA_OP_TIMES");
  return v && std::string(v) == "1";
}

// Device timing and greedy sampling on the card for CUDA; host argmax otherwise.
BenchHooks hooks_for(Backend& be) {
#ifdef BLOOMERY_HAVE_CUDA
  if (auto* cb = dynamic_cast<cuda::CudaBackend*>(&be)) {
    BenchHooks h;
    h.sync = [cb] { cb->synchronize(); };
    h.set_step_graphs = [cb](bool on) { cb->set_step_graphs(on); };
    h.graph_replays = [cb] { return cb->step_graphs().stats().captured; };
    h.profile_range = [cb](bool on) {
      cb->synchronize();
      if (op_times_requested()) {  // per-op times cover the tg repeats only
        if (on) cb->op_times().reset();
        cb->op_times().set_enabled(on);
      }
      BLOOMERY_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop(), "bench --profile-tg range");
    };
    h.greedy = [cb](std::span<const Tensor> logits) { return cb->argmax_last_rows(logits); };
    return h;
  }
#endif
  return host_hooks(be);
}

// Stored-format uploads and the host-resident PLE table on CUDA; the format layer's decode otherwise.
SyntheticHooks synthetic_hooks(Backend& be) {
  SyntheticHooks h;
#ifdef BLOOMERY_HAVE_CUDA
  if (auto* cb = dynamic_cast<cuda::CudaBackend*>(&be)) {
    auto mu =
        std::make_shared<std::mutex>();  // one upload at a time: upload_stored is not promised thread-safe
    h.stored = [cb, mu](const std::string& name, std::vector<int64_t> shape, const WeightBytes& wb) {
      std::lock_guard<std::mutex> lock(*mu);
      return cb->upload_stored(name, std::move(shape), wb);
    };
    h.table = [cb](const std::string& name, std::vector<int64_t> shape, const SyntheticTable& t) {
      cuda::HostTableBytes b;
      b.format = t.format;
      b.cols = t.cols;
      for (const SyntheticTable::Shard& s : t.shards) {
        cuda::HostTableShard hs;
        hs.rows = s.rows;
        hs.elements = s.elements;
        hs.block_scales = s.block_scales;
        b.shards.push_back(hs);
      }
      b.global = t.global;
      b.owner = t.owner;
      return cuda::make_host_table(*cb, name, std::move(shape), std::move(b));
    };
  }
#endif
  return h;
}

// The roofline of one tg row: bytes per step at the row's mean depth, against the copy bandwidth.
struct Roofline {
  DecodeBytes bytes;
  double gbps = 0, fraction = 0;
};

// With TP (tp_size > 1) it is one rank's: `costs` are that rank's slices, the state its heads'.
Roofline roofline(const BenchRow& r, const std::vector<WeightCost>& costs, const std::string& family,
                  const nlohmann::json& text, const std::string& backend, double bw, int tp_size,
                  ElemType kv_type) {
  Roofline f;
  const int64_t mean_depth = (r.depth + std::max(r.depth, r.depth_end)) / 2;
  f.bytes = decode_bytes(costs, family, text, backend, mean_depth, r.conc, tp_size,
                         static_cast<int>(elem_size(kv_type)));
  const double step_s = percentile(r.ms, 0.5) / 1e3;
  f.gbps = step_s > 0 ? static_cast<double>(f.bytes.total()) / step_s / 1e9 : 0.0;
  f.fraction = bw > 0 ? f.gbps * 1e9 / bw : 0.0;
  return f;
}

int run_bench(int argc, char** argv) {
  CLI::App app{"Benchmark prompt processing and decode (llama-bench style)."};
  std::string folder, backend_name = "auto", synthetic, layout_name = "nvidia", json_out;
  BenchParams bp;
  int threads = 0;
  int64_t layers = 0;
  bool json = false, plan_only = false;
  app.add_option("-m,--model", folder, "model folder");
  app.add_option("--synthetic", synthetic,
                 "family[:config.json]: build the model in memory at full size with random weights in the "
                 "export's stored formats (qwen4_exp, qwen3_next, glm5_next); config.json is merged over the "
                 "built-in config");
  app.add_option(
      "--layers", layers,
      "with --synthetic: build only the first N decoder layers (full per-layer shapes), to fit one "
      "device");
  app.add_option("--synthetic-layout", layout_name,
                 "nvidia (experts NVFP4, rest BF16) or qad (+ MXFP8 "
                 "projections)")
      ->check(CLI::IsMember({"nvidia", "qad"}));
  app.add_option("-p,--n-prompt", bp.ps, "prompt tokens (comma list; 0 = skip)")->delimiter(',');
  app.add_option("-n,--n-gen", bp.ns, "decoded tokens (comma list; 0 = skip)")->delimiter(',');
  app.add_option("-d,--n-depth", bp.ds, "context depth before the test (comma list)")->delimiter(',');
  app.add_option("-c,--concurrent", bp.cs, "concurrent sequences, batched (comma list)")->delimiter(',');
  app.add_option("--pp-depths", bp.pp_ds, "depths of the pp tests (comma list; default: -d)")->delimiter(',');
  app.add_option("--pp-concurrent", bp.pp_cs, "concurrencies of the pp tests (comma list; default: -c)")
      ->delimiter(',');
  app.add_option("-r,--repetitions", bp.repeats, "repeats per test")->check(CLI::PositiveNumber);
  app.add_option("--ub,--ubatch-size", bp.ubatch, "prompt tokens per forward call (0 = whole prompt)");
  app.add_option("--max-seconds", bp.max_seconds, "skip tests that would start after this many seconds");
  app.add_option("--warmup", bp.warmup, "1: a short pp + tg before measuring (default), 0: none");
  app.add_option("-t,--threads", threads, "CPU threads (0 = every core)");
  TpFlags tp_flags;
  add_tp_options(app, tp_flags);
  SlotBenchParams slot;
  std::string spec_text;
  add_spec_options(app, slot.spec);
  app.add_option("--spec-text", spec_text,
                 "with --spec-type: the slot rows' prompts from this text's tokens (the folder's tokenizer; "
                 "each slot a different stretch), so drafts meet real text; default random ids");
  app.add_option(
         "--backend", backend_name,
         "auto (CUDA when built, a device is present and the family runs on it; else CPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_flag("--plan-only", plan_only,
               "with --synthetic: print the stored bytes per format and the decode bytes per step for every "
               "-d/-c pair (stored formats, as the cuda backend reads them) without building anything");
  std::string graphs_mode;
  app.add_option("--cuda-graphs", graphs_mode,
                 "off, on (decode steps captured as CUDA graphs) or ab (every tg row twice, repeat by repeat "
                 "without and with graphs); default: BLOOMERY_CUDA_GRAPHS, on when unset")
      ->check(CLI::IsMember({"off", "on", "ab"}));
  std::string ab_knob;
  app.add_option(
         "--ab", ab_knob,
         "every tg row twice, repeat by repeat, main then candidate (CUDA): 'gemv' the GEMV kernel "
         "variant 1 (BLOOMERY_CUDA_GEMV=1) against 2, rows 'tgN' and 'tgN+gemv2'; 'eager-zero' a memset "
         "at every alloc (BLOOMERY_CUDA_EAGER_ZERO=1) against the deferred zero fill, rows 'tgN' and "
         "'tgN+lazy-zero'; 'epilogue' a product's scale/activation tail as separate ops "
         "(BLOOMERY_CUDA_FUSE_EPILOGUE=0) against fused into the GEMV, rows 'tgN' and 'tgN+fused'; "
         "'gemm-lib' BF16 prompt products on the project's tensor-core kernel "
         "(BLOOMERY_CUDA_GEMM_LIB=0) against cuBLASLt (the default), rows 'ppN'/'tgN' and "
         "'ppN+cublaslt'/'tgN+cublaslt'; "
         "'moe' the routed-expert decode kernel variant 1 (BLOOMERY_CUDA_MOE_DECODE=1) against 2, rows 'tgN' "
         "and "
         "'tgN+moe2'; 'moe-tc' variant 2 (BLOOMERY_CUDA_MOE_DECODE=2) against NVFP4 experts on the tensor "
         "cores (3, the default), rows 'tgN' and 'tgN+moe-tensor-cores'; 'pdl' kernels in stream order "
         "(BLOOMERY_CUDA_PDL=0) against programmatic dependent "
         "launch, "
         "rows 'tgN' and 'tgN+pdl'; 'gemv-x' the multi-row GEMV reloading x per weight row "
         "(BLOOMERY_CUDA_GEMV_X_ONCE=0) "
         "against once per warp, rows 'tgN' and 'tgN+x-once'; 'gemv-group' the products of one input one "
         "launch each (BLOOMERY_CUDA_GEMV_GROUP=0) "
         "against one launch per weight width (the default), rows 'tgN' and 'tgN+grouped'; 'gemv-tc' the "
         "decode GEMV's BF16 products at 2-8 rows on the split-K kernel (BLOOMERY_CUDA_GEMV_TC=0) against "
         "the "
         "tensor-core kernel (the default), rows 'tgN' and 'tgN+gemv-tensor-cores'; 'block-ops' the "
         "block ops as separate kernels (BLOOMERY_CUDA_BLOCK_OPS=0) against fused (split_cols, "
         "hc_inject_norm, row-scaled accumulating products), rows 'tgN' and 'tgN+block-ops'; 'router' the "
         "router's block per token (BLOOMERY_CUDA_ROUTER_WARP=0) against a warp per token, rows 'tgN' and "
         "'tgN+warp-router'; 'flash-attn' prompt attention on the scalar kernel "
         "(BLOOMERY_CUDA_FLASH_ATTENTION=0) against the tensor cores, rows 'ppN' and 'ppN+flash-attn'; "
         "'gqa-decode' decode attention a block per query head (BLOOMERY_CUDA_GQA_DECODE=0) against a block "
         "per KV head for its whole group, rows 'tgN' and 'tgN+gqa-decode'; 'gemv-fp8-row' one-row "
         "FP8-family "
         "products on the split-K kernel (BLOOMERY_CUDA_GEMV_FP8_ROW=0) against the one-row FP8 kernel, rows "
         "'tgN' and 'tgN+fp8-row'; 'gemv-bf16-row' the same for BF16 (BLOOMERY_CUDA_GEMV_BF16_ROW=0), rows "
         "'tgN' "
         "and 'tgN+bf16-row'; "
         "'gemm-bf16' prompt GEMMs with split-BF16 activations "
         "(BLOOMERY_CUDA_GEMM=bf16x2) "
         "against plain BF16, rows 'ppN' and 'ppN+bf16-act'; 'gdn-gated' a GDN decode step's split, gates, "
         "delta rule and gated norm as separate kernels (BLOOMERY_CUDA_GDN_GATED=0) against one pass, rows "
         "'tgN' and 'tgN+gdn-gated'. pp rows alternate too")
      ->check(CLI::IsMember(ab_knob_names()));
  app.add_flag(
      "--profile-tg", bp.profile_tg,
      "run the tg repeats inside a cudaProfilerStart/Stop range (for nsys --capture-range=cudaProfilerApi)");
  GrammarBenchArgs gb;
  app.add_option(
      "--grammar", gb.grammar_file,
      "a GBNF file: also measure the constrained-decoding mask per decode step over the tokenizer's "
      "vocabulary (first and cached visits of grammar states), against the first tg row's step");
  app.add_option("--json-schema", gb.schema_file,
                 "a JSON schema file: as --grammar, compiled as the server does");
  app.add_option("--grammar-tokenizer", gb.tokenizer_dir,
                 "the folder whose tokenizer.json --grammar masks (default: the -m folder)");
  app.add_option("--grammar-generations", gb.seeds, "random constrained generations for --grammar")
      ->check(CLI::PositiveNumber);
  app.add_option(
         "--spec-rows", bp.spec_rows,
         "verify widths K (2-9, comma list): with every C=1 tg row, repeat by repeat, time a K-row MTP "
         "verify rolled back to its depth (rows 'verifyK') and one draft-layer step ('draft'), as "
         "ratios to the tg step")
      ->delimiter(',');
  KvCacheFlags kv_flags;
  add_kv_cache_options(app, kv_flags);
  app.add_flag("--json", json, "print JSON instead of a table");
  app.add_option("--json-out", json_out, "also write the JSON to this file, rewritten after every test");
  respell_kv_cache_flags(argc, argv);
  CLI11_PARSE(app, argc, argv);
  LoadOptions kv_load;
  kv_load.kv_type = kv_flags.type();  // checked before anything is built
  // --json-out is rewritten whole after every test, so an interrupted run keeps what it measured.
  auto write_json_out = [&](const nlohmann::json& doc) {
    if (!json_out.empty()) std::ofstream(json_out) << doc.dump(2) << "\n";
  };
  if (folder.empty() == synthetic.empty())
    raise("E_BENCH_ARGS", Where{"", "", "-m / --synthetic"}, "exactly one of -m <folder> and --synthetic",
          folder.empty() ? "neither" : "both");
  if (layers != 0 && synthetic.empty()) raise("E_BENCH_ARGS", Where{"", "", "--layers"}, "--synthetic", "-m");
  check_params(bp);  // before a full-size model is built
  if (!spec_text.empty() && (folder.empty() || !slot.spec.on()))
    raise("E_BENCH_ARGS", Where{"", "", "--spec-text"}, "-m <folder> (its tokenizer) and --spec-type",
          folder.empty() ? "--synthetic" : "no --spec-type");
  // The synthetic model's config, cut to --layers when asked.
  auto synth_config = [&] {
    const nlohmann::json c = synthetic_config(synthetic);
    return layers > 0 ? limit_layers(c, layers) : c;
  };
  const std::string synth_name =
      "synthetic " + synthetic + (layers > 0 ? " (" + std::to_string(layers) + " layers)" : "");

  if (plan_only) {
    if (synthetic.empty()) raise("E_BENCH_ARGS", Where{"", "", "--plan-only"}, "--synthetic", "-m");
    const SyntheticPlan sp = plan_synthetic(synth_config(), parse_synthetic_layout(layout_name));
    nlohmann::json pj{{"model", synth_name},
                      {"layout", layout_name},
                      {"family", sp.family},
                      {"stored_bytes_by_format", sp.bytes_by_format},
                      {"host_table_bytes", sp.table_bytes},
                      {"decode", nlohmann::json::array()}};
    for (int64_t d : bp.ds)
      for (int64_t c : bp.cs) {
        const DecodeBytes b = decode_bytes(sp.costs, sp.family, sp.config.text, "cuda", d, c, 1,
                                           static_cast<int>(elem_size(kv_load.kv_type)));
        pj["decode"].push_back({{"depth", d},
                                {"concurrent", c},
                                {"bytes_per_step", b.total()},
                                {"bytes_per_token", b.total() / c},
                                {"bytes_dense", b.dense},
                                {"bytes_experts", b.experts},
                                {"bytes_state", b.state},
                                {"unique_experts_per_layer_estimated", b.unique_experts}});
      }
    write_json_out(pj);
    std::printf("%s\n", pj.dump(2).c_str());
    return 0;
  }
  const TpLayout tp = resolve_tp(tp_flags);
  if (slot.spec.on() && tp.size > 1)  // the slot rows run one rank's scheduler
    raise("E_BENCH_ARGS", Where{"", "", "--spec-type"}, "one rank (no --tp / --nodes)", "tensor parallel");
  backend_name = pick_backend(backend_name, folder).name;
  if (graphs_mode == "off") setenv("BLOOMERY_CUDA_GRAPHS", "0", 1);
  if (graphs_mode == "on" || graphs_mode == "ab") setenv("BLOOMERY_CUDA_GRAPHS", "1", 1);  // read at creation
  bp.graphs_ab = graphs_mode == "ab";
  // --tp / --nodes: every rank loads its slices first; rank 0 measures, its steps run on every rank.
  const auto t_load = Clock::now();
  std::unique_ptr<TpGroup> group;
  std::unique_ptr<SyntheticModel> sm;  // --synthetic: the model (TP: rank 0's costs and bytes, no weights)
  if (tp.distributed()) {
    auto make_rank_backend = [&](int n, int rank) { return make_backend(backend_name, n, rank); };
    if (synthetic.empty()) {
      check_backend_runs(backend_name, folder);
      group = std::make_unique<TpGroup>(tp, folder, kv_load, make_rank_backend, threads);
    } else {
      // Every rank builds its own slices of one random model (synthetic_model.h: the pools are built once
      // per process and seeded, so --nodes processes build the same one); rank 0's costs are the roofline's.
      auto report = std::make_unique<SyntheticModel>();
      std::shared_ptr<SyntheticSource> source =
          make_synthetic_source(synth_config(), parse_synthetic_layout(layout_name), threads);
      const double source_s = source_seconds(*source);
      // The report is this process's driving rank's (0, or its --node-rank).
      auto keep_report = [&](const SyntheticModel& m, int rank) {
        if (rank != tp.rank) return;
        report->config = m.config;
        report->costs = m.costs;
        report->bytes_by_format = m.bytes_by_format;
        report->table_bytes = m.table_bytes;
        report->build_seconds = source_s + m.build_seconds;
      };
      LoadRank load =
          synthetic_load_rank(std::move(source), synthetic_hooks, rank_threads(tp, threads), keep_report);
      group = std::make_unique<TpGroup>(tp, std::move(load), kv_load, make_rank_backend, threads);
      sm = std::move(report);
    }
    if (group->follower()) {
      group->follow();
      return 0;
    }
  }
  std::unique_ptr<Backend> own_backend = group ? nullptr : make_backend(backend_name, threads);
  Backend* backend = group ? &group->backend() : own_backend.get();
  const double bw = copy_bandwidth(backend_name);  // before the weights take the card's memory
  nlohmann::json j;
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
  j["command"] = cmd;
  j["backend"] = backend_name;
  j["threads"] = backend->threads();
  j["copy_bandwidth_GBps"] = bw / 1e9;
  j["kv_cache"] = elem_name(kv_load.kv_type);

  std::unique_ptr<LoadedModel> own_lm;
  LoadedModel* lm = group ? &group->model() : nullptr;
  Model* model = nullptr;
  std::vector<WeightCost> costs;
  nlohmann::json text;
  double load_s = 0;
  if (!synthetic.empty()) {
    const SyntheticLayout layout = parse_synthetic_layout(layout_name);
    if (!group) {
      check_synthetic_fits(plan_synthetic(synth_config(), layout), backend->memory_info().free_bytes,
                           synth_name);
      sm = build_synthetic(synth_config(), *backend, layout, synthetic_hooks(*backend), threads, 42,
                           kv_load.kv_type);
    }
    load_s = since(t_load);
    model = group ? group->model().model.get() : sm->model.get();
    costs = sm->costs;
    text = sm->config.text;
    j["model"] = synth_name;
    j["layout"] = layout_name;
    j["build_s"] = load_s;
    j["stored_bytes_by_format"] = sm->bytes_by_format;
    j["host_table_bytes"] = sm->table_bytes;
    j["tp"] = tp.size;
  } else {
    if (!lm) {
      check_backend_runs(backend_name, folder);
      kv_load.require_draft = slot.spec.type == "draft-mtp";  // refused before anything is allocated
      own_lm = load_model(folder, *backend, kv_load);
      lm = own_lm.get();
    }
    load_s = since(t_load);
    model = lm->model.get();
    costs = weight_costs(*lm);
    text = lm->config.text;
    j["model"] = folder;
    j["load_s"] = load_s;
    j["tp"] = tp.size;
  }
  const ModelInfo& info = model->info();
  j["family"] = info.family;
  const Backend::MemoryInfo mem = backend->memory_info();
  if (mem.total_bytes) j["memory_after_load"] = {{"free", mem.free_bytes}, {"total", mem.total_bytes}};
  const DecodeBytes b0 = decode_bytes(costs, info.family, text, backend_name, 0, 1, tp.size);
  // Under TP every byte figure (the line below, each tg row's MB/step, GB/s and roofline) is one rank's.
  const std::string bytes_scope = tp.size > 1 ? fmt::format("per rank (tp {})", tp.size) : "whole model";
  j["bytes_scope"] = bytes_scope;
  j["decode_bytes_c1_depth0"] = {
      {"dense", b0.dense}, {"experts", b0.experts}, {"state", b0.state}, {"state_modelled", b0.state_known}};
  j["repetitions"] = bp.repeats;
  j["results"] = nlohmann::json::array();

  if (!json) {
    std::printf("model %s (%s), backend %s, %d thread(s)%s, %s in %.2f s, %d repetitions\n",
                synthetic.empty() ? folder.c_str() : (synth_name + " " + layout_name).c_str(),
                info.family.c_str(), backend_name.c_str(), backend->threads(),
                tp.size > 1 ? fmt::format(" per rank, tp {}", tp.size).c_str() : "",
                synthetic.empty() ? "loaded" : "built", load_s, bp.repeats);
    std::printf("copy bandwidth (%s, read + written, best of 5): %.1f GB/s\n",
                backend_name == "cuda" ? "device-to-device cudaMemcpy" : "host memcpy, 1 thread", bw / 1e9);
    std::printf(
        "decode bytes/token at depth 0, c 1, %s: dense %.3f GB + selected experts %.3f GB + state %.3f "
        "GB%s\n",
        bytes_scope.c_str(), b0.dense / 1e9, b0.experts / 1e9, b0.state / 1e9,
        b0.state_known ? "" : " (state not modelled)");
    std::fflush(stdout);
  }

  BenchHooks hooks = hooks_for(*backend);
  if (bp.graphs_ab && !hooks.set_step_graphs)
    raise("E_BENCH_ARGS", Where{"", "", "--cuda-graphs"}, "a CUDA backend for ab", backend_name);
  if (hooks.set_step_graphs && bp.graphs_ab) hooks.set_step_graphs(false);  // pp rows and warm-up eager
  if (!ab_knob.empty()) {
    if (graphs_mode == "ab")
      raise("E_BENCH_ARGS", Where{"", "", "--ab"}, "one A/B at a time", "--cuda-graphs ab and --ab");
#ifdef BLOOMERY_HAVE_CUDA
    if (auto* cb = dynamic_cast<cuda::CudaBackend*>(backend)) {
      if (ab_knob == "gemv")
        hooks.set_ab = [](bool candidate) { cuda::set_gemv_variant(candidate ? 2 : 1); };
      else if (ab_knob == "moe")
        hooks.set_ab = [](bool candidate) { cuda::set_moe_decode_variant(candidate ? 2 : 1); };
      else if (ab_knob == "moe-tc")
        hooks.set_ab = [](bool candidate) { cuda::set_moe_decode_variant(candidate ? 3 : 2); };
      else if (ab_knob == "eager-zero")
        hooks.set_ab = [cb](bool candidate) { cb->set_zero_fill_eager(!candidate); };
      else if (ab_knob == "gemv-group")
        hooks.set_ab = [cb](bool candidate) { cb->set_group_products(candidate); };
      else if (ab_knob == "block-ops")
        hooks.set_ab = [cb](bool candidate) { cb->set_block_ops(candidate); };
      else if (ab_knob == "gemv-x")
        hooks.set_ab = [](bool candidate) { cuda::set_gemv_x_once(candidate); };
      else if (ab_knob == "gemv-tc")
        hooks.set_ab = [](bool candidate) { cuda::set_gemv_tc(candidate); };
      else if (ab_knob == "pdl")
        hooks.set_ab = [](bool candidate) { cuda::set_pdl(candidate); };
      else if (ab_knob == "epilogue")
        hooks.set_ab = [cb](bool candidate) { cb->set_fuse_epilogues(candidate); };
      else if (ab_knob == "router")
        hooks.set_ab = [](bool candidate) { cuda::set_router_warp(candidate); };
      else if (ab_knob == "flash-attn")
        hooks.set_ab = [](bool candidate) { cuda::set_flash_attention(candidate); };
      else if (ab_knob == "gqa-decode")
        hooks.set_ab = [](bool candidate) { cuda::set_gqa_decode(candidate); };
      else if (ab_knob == "gemv-fp8-row")
        hooks.set_ab = [](bool candidate) { cuda::set_gemv_fp8_row(candidate); };
      else if (ab_knob == "gemv-bf16-row")
        hooks.set_ab = [](bool candidate) { cuda::set_gemv_bf16_row(candidate); };
      else if (ab_knob == "gdn-gated")
        hooks.set_ab = [cb](bool candidate) { cb->set_gdn_step_gated(candidate); };
      else if (ab_knob == "gemm-bf16")
        hooks.set_ab = [](bool candidate) {
          cuda::set_gemm_mode(candidate ? cuda::GemmMode::Bf16 : cuda::GemmMode::Bf16x2);
        };
      else
        hooks.set_ab = [](bool candidate) { cuda::set_gemm_library(candidate); };
    }
#endif
    if (!hooks.set_ab) raise("E_BENCH_ARGS", Where{"", "", "--ab"}, "a CUDA backend", backend_name);
    bp.ab = kAbCandidates.at(ab_knob);
    hooks.set_ab(false);
  }
  // A verify row's read floor: the bytes of its K rows (dense once, the experts they pick, one sequence's
  // state) over those of the tg step it is measured against, at the same depth (bench_bytes.h).
  auto verify_floor = [&](const BenchRow& r) {
    const int kv = static_cast<int>(elem_size(kv_load.kv_type));
    const uint64_t one =
        decode_bytes(costs, info.family, text, backend_name, r.depth, 1, tp.size, kv).total();
    const uint64_t k =
        verify_bytes(costs, info.family, text, backend_name, r.depth, r.tokens, tp.size, kv).total();
    return one > 0 ? static_cast<double>(k) / static_cast<double>(one) : 0.0;
  };
  auto to_json = [&](const BenchRow& r) {
    nlohmann::json x{{"test", r.test},
                     {"depth", r.depth},
                     {"concurrent", r.conc},
                     {"skipped", r.skipped},
                     {"skip_reason", r.skip_reason},
                     {"finite", r.finite},
                     {"seconds", r.seconds},
                     {"tps_median", percentile(r.tps, 0.5)},
                     {"tps_p05", percentile(r.tps, 0.05)},
                     {"ms_median", percentile(r.ms, 0.5)},
                     {"ms_p95", percentile(r.ms, 0.95)},
                     {"tps", r.tps}};
    if (is_slot_row(r)) {
      x.update(
          {{"depth_end", r.depth_end}, {"through", "scheduler"}, {"ms_is", "wall ms per token per slot"}});
      if (!r.ref.empty()) {
        nlohmann::json drafted = nlohmann::json::array(), accepted = nlohmann::json::array();
        for (int k = 0; k < kMaxDrafts && r.drafts.drafted[k]; ++k) {
          drafted.push_back(r.drafts.drafted[k]);
          accepted.push_back(r.drafts.accepted[k]);
        }
        x.update({{"ref_test", r.ref},
                  {"speedup_over_ref", r.ratio},
                  {"drafted", r.drafts.drafted_total()},
                  {"accepted", r.drafts.accepted_total()},
                  {"verifies", r.drafts.rounds},
                  {"drafted_by_position", drafted},
                  {"accepted_by_position", accepted}});
      }
    } else if (is_spec_row(r)) {
      x.update({{"depth_end", r.depth_end},
                {"rows", r.tokens},
                {"ref_test", r.ref},
                {"ratio_to_tg", r.ratio},
                {"step", r.step},
                {"ms", r.ms}});
      if (r.test.rfind("draft", 0) != 0)
        x.update({{"rollback", "commit(1): all drafts rejected, recurrent parts replayed over one row"},
                  {"rollback_included", true},
                  {"rollback_ms_median", percentile(r.rollback_ms, 0.5)},
                  {"graph_replayed", r.replayed},
                  {"bytes_floor_ratio_to_tg", verify_floor(r)}});
    } else if (r.test[0] == 't' && !r.skipped) {
      const Roofline f = roofline(r, costs, info.family, text, backend_name, bw, tp.size, kv_load.kv_type);
      x.update({{"depth_end", r.depth_end},
                {"bytes_per_step", f.bytes.total()},
                {"bytes_per_token", f.bytes.total() / r.conc},
                {"bytes_dense", f.bytes.dense},
                {"bytes_experts", f.bytes.experts},
                {"bytes_state", f.bytes.state},
                {"unique_experts_per_layer_estimated", f.bytes.unique_experts},
                {"GBps", f.gbps},
                {"roofline", f.fraction}});
    }
    return x;
  };
  auto on_row = [&](const BenchRow& r) {
    j["results"].push_back(to_json(r));
    write_json_out(j);
    if (!json) {
      std::fprintf(stderr, "bench: %s d=%lld c=%lld done in %.1f s%s%s%s\n", r.test.c_str(),
                   (long long)r.depth, (long long)r.conc, r.seconds, r.skipped ? " (skipped: " : "",
                   r.skip_reason.c_str(), r.skipped ? ")" : "");
    }
  };
  if (op_times_requested()) {
    if (!hooks.profile_range)
      raise("E_BENCH_ARGS", Where{"", "", "BLOOMERY_CUDA_OP_TIMES"}, "a CUDA backend", backend_name);
    if (std::getenv("BLOOMERY_CUDA_GRAPHS") == nullptr ||
        std::string(std::getenv("BLOOMERY_CUDA_GRAPHS")) != "0")
      raise("E_BENCH_ARGS", Where{"", "", "BLOOMERY_CUDA_OP_TIMES"}, "eager steps (--cuda-graphs off)",
            "graph mode");
    // Decoding nothing (-n 0): the prompts are profiled instead, per prompt.
    const bool no_tg = std::all_of(bp.ns.begin(), bp.ns.end(), [](int64_t n) { return n == 0; });
    (no_tg ? bp.profile_pp : bp.profile_tg) = true;
  }
  // With TP every step goes through the server's step engine on rank 0, sent to the other ranks first.
  std::unique_ptr<TpStepEngine> tp_steps =
      group ? std::make_unique<TpStepEngine>(*group->comm(), *model, *backend, tp.timeout / 2) : nullptr;
  const std::vector<BenchRow> rows = run_bench_grid(*backend, *model, hooks, bp, on_row, tp_steps.get());
  tp_steps.reset();  // its heartbeat stops before the group does
  std::vector<BenchRow> all_rows = rows;
  if (slot.spec.on()) {
    if (!spec_text.empty()) {
      const Tokenizer tok = Tokenizer::from_folder(lm->source->config_dir());
      std::ifstream f(spec_text, std::ios::binary);
      if (!f) raise("E_IO_OPEN", Where{spec_text, "", "--spec-text"}, "a readable text file", "cannot open");
      const std::string t((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      slot.text = tok.encode(t, false);
      if (slot.text.empty()) raise("E_BENCH_ARGS", Where{spec_text, "", "--spec-text"}, "some text", "none");
    }
    for (BenchRow& r : run_slot_rows(*backend, *model, bp, slot, on_row)) all_rows.push_back(r);
  }
  std::string grammar_line;
  if (gb.wanted()) {
    double tg_ms = 0;
    for (const BenchRow& r : rows)
      if (r.test[0] == 't' && !r.skipped && tg_ms == 0) tg_ms = percentile(r.ms, 0.5);
    j["grammar_mask"] = bench_grammar_mask(gb, folder, tg_ms);
    write_json_out(j);
    grammar_line = grammar_mask_line(j["grammar_mask"]);
  }
  std::string graphs_line, op_lines;
#ifdef BLOOMERY_HAVE_CUDA
  if (auto* cb = dynamic_cast<cuda::CudaBackend*>(backend); cb && op_times_requested()) {
    const char* unit = bp.profile_pp ? "pp" : "tg";  // what the range covered (see profile_pp)
    int64_t steps = 0;
    for (const BenchRow& r : rows)
      if (r.test.rfind(unit, 0) == 0) steps += static_cast<int64_t>(r.ms.size());
    const double per = steps ? 1.0 / static_cast<double>(steps) : 0.0;
    nlohmann::json ops = nlohmann::json::array();
    double total = 0;
    for (const auto& e : cb->op_times().entries()) total += e.ms;
    op_lines = std::string("per-op device time per ") + (bp.profile_pp ? "prompt" : "tg step") +
               " (BLOOMERY_CUDA_OP_TIMES, eager, " + std::to_string(steps) +
               (bp.profile_pp ? " prompts" : " steps") + ", sum " + std::to_string(total * per) + " ms):\n";
    for (const auto& e : cb->op_times().entries()) {
      const double gbps = e.ms > 0 ? e.bytes / (e.ms * 1e6) : 0.0;
      ops.push_back({{"op", e.key},
                     {"calls_per_step", e.calls * per},
                     {"ms_per_step", e.ms * per},
                     {"bytes_per_step", e.bytes * per},
                     {"GBps", gbps}});
      char line[256];
      std::snprintf(line, sizeof line, "  %-44s %7.1f calls %8.3f ms %9.2f MB %8.1f GB/s\n", e.key.c_str(),
                    e.calls * per, e.ms * per, e.bytes * per / 1e6, gbps);
      op_lines += line;
    }
    j["op_times"] = ops;
    write_json_out(j);
  }
  if (auto* cb = dynamic_cast<cuda::CudaBackend*>(backend); cb && cb->step_graphs().stats().steps > 0) {
    const cuda::StepGraphStats& g = cb->step_graphs().stats();
    const double per = g.captured ? 1e3 / static_cast<double>(g.captured) : 0.0;  // ms per replayed step
    j["cuda_graphs"] = {{"steps", g.steps},
                        {"captured", g.captured},
                        {"segments", g.segments},
                        {"instantiated", g.instantiated},
                        {"updated", g.updated},
                        {"update_failures", g.update_failures},
                        {"eager_keys", g.eager_keys},
                        {"nodes_last_step", g.nodes},
                        {"record_ms_per_step", g.capture_s * per},
                        {"update_ms_per_step", g.update_s * per},
                        {"instantiate_ms_per_step", g.instantiate_s * per},
                        {"wait_ms_per_step", g.wait_s * per}};
    write_json_out(j);
    char timing[512];
    std::snprintf(
        timing, sizeof timing,
        "; %llu segments; per replayed step (ms of host time): record %.3f, update %.3f, instantiate "
        "%.3f, wait for the card after the last launch %.3f; %llu nodes; %llu updates refused\n",
        static_cast<unsigned long long>(g.segments), g.capture_s * per, g.update_s * per,
        g.instantiate_s * per, g.wait_s * per, static_cast<unsigned long long>(g.nodes),
        static_cast<unsigned long long>(g.update_failures));
    graphs_line = "CUDA graphs (BLOOMERY_CUDA_GRAPHS): " + std::to_string(g.steps) + " decode steps, " +
                  std::to_string(g.captured) + " captured and replayed (" + std::to_string(g.instantiated) +
                  " instantiations, " + std::to_string(g.updated) + " updates), " +
                  std::to_string(g.eager_keys) + " step shapes kept eager" + timing;
  }
#endif

  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("| %-8s | %6s | %3s | %12s | %10s | %10s | %9s | %9s | %8s |\n", "test", "depth", "c",
              "t/s (median)", "ms median", "ms p95", "MB/step", "GB/s", "roofline");
  std::printf(
      "|----------|--------|-----|--------------|------------|------------|-----------|-----------|----------"
      "|\n");
  for (const BenchRow& r : all_rows) {
    if (r.skipped) {
      std::printf("| %-8s | %6lld | %3lld | skipped (%s) |\n", r.test.c_str(), (long long)r.depth,
                  (long long)r.conc, r.skip_reason.c_str());
      continue;
    }
    if (is_spec_row(r)) {  // no throughput or roofline: a ratio to the tg step instead
      char note[200];
      if (r.test.rfind("draft", 0) == 0)
        std::snprintf(note, sizeof note, "%s = %.2f× %s; %s step", r.test.c_str(), r.ratio, r.ref.c_str(),
                      r.step.c_str());
      else
        std::snprintf(note, sizeof note,
                      "%s = %.2f× %s (bytes read: %.2f×); %s step; rollback %.3f ms included", r.test.c_str(),
                      r.ratio, r.ref.c_str(), verify_floor(r), r.step.c_str(),
                      percentile(r.rollback_ms, 0.5));
      std::printf("| %-8s | %6lld | %3lld | %12s | %10.3f | %10.3f | %9s | %9s | %8s | %s%s\n",
                  r.test.c_str(), (long long)r.depth, (long long)r.conc, "-", percentile(r.ms, 0.5),
                  percentile(r.ms, 0.95), "-", "-", "-", note, r.finite ? "" : " NON-FINITE LOGITS");
      continue;
    }
    if (is_slot_row(r)) {  // through the scheduler: no single step to put against the roofline
      std::string note = "through the scheduler's slots";
      if (!r.ref.empty()) {
        char head[96];
        std::snprintf(head, sizeof head, "%.2f× %s; ", r.ratio, r.ref.c_str());
        note = head + draft_counts_line(r.drafts);
        if (const std::string per = acceptance_by_position(r.drafts); !per.empty())
          note += "; by position" + per;
      }
      std::printf("| %-8s | %6lld | %3lld | %12.1f | %10.3f | %10.3f | %9s | %9s | %8s | %s\n",
                  r.test.c_str(), (long long)r.depth, (long long)r.conc, percentile(r.tps, 0.5),
                  percentile(r.ms, 0.5), percentile(r.ms, 0.95), "-", "-", "-", note.c_str());
      continue;
    }
    char mb[32] = "", gb[32] = "", rf[32] = "";
    if (r.test[0] == 't') {
      const Roofline f = roofline(r, costs, info.family, text, backend_name, bw, tp.size, kv_load.kv_type);
      std::snprintf(mb, sizeof mb, "%.1f", f.bytes.total() / 1e6);
      std::snprintf(gb, sizeof gb, "%.1f", f.gbps);
      std::snprintf(rf, sizeof rf, "%.1f%%", f.fraction * 100);
    }
    std::printf("| %-8s | %6lld | %3lld | %12.1f | %10.3f | %10.3f | %9s | %9s | %8s |%s\n", r.test.c_str(),
                (long long)r.depth, (long long)r.conc, percentile(r.tps, 0.5), percentile(r.ms, 0.5),
                percentile(r.ms, 0.95), mb, gb, rf, r.finite ? "" : " NON-FINITE LOGITS");
  }
  std::printf(
      "(pp ms: time to first token of the C prompts; tg ms: one decode step of all C sequences, "
      "greedy sampled; roofline: bytes one step reads / step time against the copy bandwidth; "
      "experts per step estimated as E·(1-(1-k/E)^C); bytes %s)\n",
      tp.size > 1 ? "per rank: rank 0's slices and state, against one card's bandwidth"
                  : "of the whole model");
  if (!bp.spec_rows.empty())
    std::printf(
        "(verifyK ms: one K-row speculative forward_batch (the pending token + K-1 random drafts, every "
        "row's "
        "logits, greedy ids) + commit(1), the rollback of a round whose drafts are all rejected, then an "
        "untimed restore to the same depth; draft ms: one T=1 Model::draft step + greedy id; both measured "
        "after every repeat of the C=1 tg row, at the depth it reached; ratio = median / the tg step's "
        "median; bytes read: the verify's weights (dense once, the experts of its K rows, E·(1-(1-k/E)^K)) "
        "and "
        "one sequence's state over the tg step's, the floor of the ratio for a step bound by its reads)\n");
  if (slot.spec.on())
    std::printf(
        "(slot rows: C greedy requests of n tokens through the server's scheduler, each continuing its "
        "slot's "
        "sequence via the prompt cache; tgN@slots without drafts (speculative.n_max 0), tgN+mtpK / +ngramK "
        "with the server's drafting and adaptive width, alternating repeat by repeat; t/s = generated "
        "tokens / wall time of the round; ms = wall ms per token per slot)\n");
  std::printf("%s%s%s", graphs_line.c_str(), op_lines.c_str(), grammar_line.c_str());
  return 0;
}

RegisterCommand reg{"bench", "throughput benchmark (llama-bench style): -m <folder> | --synthetic qwen4_exp",
                    run_bench};

}  // namespace
}  // namespace bloomery::tools
