// `bloomery run -m <folder> -p "text"`: loads a model, tokenizes, generates and streams text, prints
// tokens/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "backend/cpu/cpu_backend.h"
#include "backend/select/backend_choice.h"
#include "core/error.h"
#include "models/model_loader.h"
#include "parallel/tp_group.h"
#include "parallel/tp_step_engine.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"
#include "tools/cache_options.h"
#include "tools/command.h"
#include "tools/spec_options.h"
#include "tools/tp_options.h"

namespace bloomery::tools {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      raise("E_PROMPT", Where{"", "", "--prompt-ids"}, "comma-separated non-negative integers",
            "'" + item + "'");
    }
  }
  if (ids.empty()) raise("E_PROMPT", Where{"", "", "--prompt-ids"}, "at least one id", "none");
  return ids;
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The end of a run's stdout, with or without drafting: the streamed text's tail, a newline, the ids.
void finish_output(StreamDecoder* stream, const std::vector<int32_t>& out, bool print_ids) {
  if (stream) std::fputs(stream->finish().c_str(), stdout);
  std::fputs("\n", stdout);
  if (print_ids) {
    std::string s;
    for (int32_t id : out) s += (s.empty() ? "" : ",") + std::to_string(id);
    std::printf("ids: %s\n", s.c_str());
  }
  std::fflush(stdout);
}

// `bloomery run --spec-type draft-mtp`: greedy generation through the scheduler with MTP drafting, then the
// drafted / accepted counts, the acceptance per draft position and the mean accepted length.
// `tp`: rank 0's communicator under --tp/--nodes (the other ranks follow its step plans), else null.
int run_drafting(Model& model, Backend& backend, Communicator* tp, std::chrono::milliseconds tp_heartbeat,
                 const std::string& folder, const SpecFlags& spec, const std::string& missing,
                 const std::vector<int32_t>& ids, const std::vector<int32_t>& eos, int n_predict,
                 bool ignore_eos, bool print_ids, Tokenizer* tok, const SamplerConfig& sc,
                 Clock::time_point t0) {
  if (!spec.ngram() && !model.info().has_draft)
    raise("E_SPEC_NO_DRAFT", Where{folder, missing, "--spec-type"},
          "a checkpoint with its MTP/NextN draft layer", "none", "run without --spec-type draft-mtp");
  const DraftOptions d = spec.draft_options();
  std::unique_ptr<StepEngine> steps;
  if (tp) {
    auto e = std::make_unique<TpStepEngine>(*tp, model, backend, tp_heartbeat);
    e->enable_drafting(d);
    steps = std::move(e);
  } else {
    auto e = std::make_unique<ModelStepEngine>(model, backend);
    e->enable_drafting(d);
    steps = std::move(e);
  }
  StepEngine& engine = *steps;
  SchedulerConfig cfg;
  cfg.n_ctx_slot = static_cast<int64_t>(ids.size()) + n_predict + 1;
  cfg.spec = spec.config();
  // The run's sampler, drawing from the slot's generator (seeded with --seed): one draw per emitted token.
  SampleFn sample = [sc](std::span<const float> logits, const SamplingParams&, std::span<const int32_t>,
                         std::mt19937_64& rng) {
    SampledToken t;
    SampleScratch scratch;
    t.id = sample_filtered(logits, sc, rng, scratch);
    return t;
  };
  Scheduler sched(engine, cfg, sample);
  auto t_loaded = Clock::now();
  std::fprintf(stderr, "loaded %s (%s) in %.2f s, %d threads; prompt %zu tokens; drafting up to %d (%s)\n",
               folder.c_str(), model.info().family.c_str(), seconds(t0, t_loaded), backend.threads(),
               ids.size(), spec.n_max, spec.ngram() ? "n-gram lookup" : "MTP");
  if (tok) {
    std::fputs(tok->decode_text(ids).c_str(), stdout);
    std::fflush(stdout);
  }
  std::unique_ptr<StreamDecoder> stream = tok ? std::make_unique<StreamDecoder>(*tok) : nullptr;
  std::vector<int32_t> out;
  std::promise<FinishInfo> done;
  GenRequest req;
  req.prompt = ids;
  req.n_predict = n_predict;
  req.sampling.temperature = sc.temperature;
  req.sampling.seed = sc.seed;
  req.eos_ids = eos;
  req.ignore_eos = ignore_eos;
  req.on_token = [&](const SampledToken& t) {
    out.push_back(t.id);
    if (stream) {
      std::fputs(stream->push(t.id).c_str(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  req.on_finish = [&](const FinishInfo& f) { done.set_value(f); };
  sched.submit(std::move(req));
  const FinishInfo f = done.get_future().get();
  if (!f.error.empty()) raise("E_RUN", Where{folder, "", ""}, "a generation", f.error);
  finish_output(stream.get(), out, print_ids);
  const DraftCounts c = sched.stats().drafts;
  std::fprintf(stderr,
               "prompt: %zu tokens in %.3f s; generation: %zu tokens in %.3f s (%.1f tokens/s)\ndrafts: %s\n",
               ids.size(), f.prompt_ms / 1e3, out.size(), f.predicted_ms / 1e3,
               f.predicted_ms > 0 && out.size() > 1 ? (out.size() - 1) * 1e3 / f.predicted_ms : 0.0,
               draft_counts_line(c).c_str());
  if (const std::string per = acceptance_by_position(c); !per.empty())
    std::fprintf(stderr, "acceptance by draft position:%s\n", per.c_str());
  return 0;
}

int run_run(int argc, char** argv) {
  CLI::App app{"Generate text with a model folder on the CPU or CUDA backend."};
  std::string folder, prompt, prompt_ids, logits_out, backend_name = "auto";
  int n_predict = 64, threads = 0, top_k = 0;
  float temp = 0.0f, top_p = 1.0f, min_p = 0.0f;
  uint64_t seed = 0;
  bool print_ids = false, ignore_eos = false, no_progress = false, per_weight = false;
  uint64_t mem_budget_mib = 0;
  SpecFlags spec;
  TpFlags tp_flags;
  app.add_option("-m,--model", folder, "model folder (safetensors + config.json)")->required();
  app.add_option("-p,--prompt", prompt, "prompt text (special-token text such as <|im_start|> is parsed)");
  app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids (no tokenizer needed)");
  app.add_option("-n,--n-predict", n_predict, "tokens to generate")->check(CLI::NonNegativeNumber);
  app.add_option("--temp", temp, "temperature (0 = greedy)");
  app.add_option("--top-k", top_k, "top-k (0 = off)");
  app.add_option("--top-p", top_p, "top-p (1 = off)");
  app.add_option("--min-p", min_p, "min-p (0 = off)");
  app.add_option("--seed", seed, "sampling seed");
  app.add_option("-t,--threads", threads, "CPU threads (0 = every core)");
  app.add_flag("--print-ids", print_ids, "print the generated token ids after the text");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating after an end-of-sequence token");
  app.add_option(
      "--logits-out", logits_out,
      "write f32 logits (raw little-endian, one row of vocab_size per position) of the last prompt "
      "position and of every generated step");
  app.add_option(
         "--backend", backend_name,
         "auto (CUDA when built, a device is present and the family runs on it; else CPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--mem-budget", mem_budget_mib,
                 "refuse to load when the memory plan exceeds this many MiB (default: the free memory)");
  app.add_flag("--no-progress", no_progress, "no load progress bar and no memory plan on stderr");
  app.add_flag("--load-per-weight", per_weight,
               "load weight after weight through Backend::load_weight instead of the parallel loader");
  add_spec_options(app, spec);
  add_tp_options(app, tp_flags);
  KvCacheFlags kv_flags;
  add_kv_cache_options(app, kv_flags);
  respell_kv_cache_flags(argc, argv);
  CLI11_PARSE(app, argc, argv);
  const TpLayout layout = resolve_tp(tp_flags);
  const int tp_size = layout.size;
  const int node_rank = layout.rank;
  const bool drafting = spec.on();
  if (drafting && !logits_out.empty()) {
    std::fprintf(stderr, "error: --logits-out is not written with --spec-type draft-mtp\n");
    return 2;
  }

  if (node_rank == 0 && prompt.empty() == prompt_ids.empty()) {
    std::fprintf(stderr, "error: give exactly one of -p/--prompt and --prompt-ids\n");
    return 2;
  }
  // --backend cuda: refuse a family whose ops the card lacks before loading anything (helper J).
  backend_name = pick_backend(backend_name, folder).name;
  check_backend_runs(backend_name, folder);

  auto t0 = Clock::now();
  LoadOptions load;
  // The plan reserves state for the longest this run can get: every prompt byte a token (byte-level BPE
  // never makes more), a BOS, and the generated tokens.
  const int64_t prompt_tokens =
      prompt_ids.empty() ? static_cast<int64_t>(prompt.size()) + 1
                         : static_cast<int64_t>(std::count(prompt_ids.begin(), prompt_ids.end(), ',')) + 1;
  load.plan.context = prompt_tokens + n_predict + 1;
  load.plan.sequences = 1;
  load.plan.budget_bytes = mem_budget_mib << 20;
  load.progress = no_progress ? ProgressMode::Quiet : ProgressMode::Auto;
  load.bulk = !per_weight;
  load.require_draft = spec.type == "draft-mtp";  // refused before anything is allocated, on every rank
  load.kv_type = kv_flags.type();
  load.on_plan = [&](const MemoryPlan& plan) {
    if (no_progress) return;
    for (const std::string& line : plan.lines()) std::fprintf(stderr, "%s\n", line.c_str());
  };
  // --tp N / --nodes: rank 0 (this process, or rank 0 of --nodes) drives, the other ranks follow.
  TpGroup group(
      layout, folder, load, [&](int n, int rank) { return make_backend(backend_name, n, rank); }, threads);
  if (group.follower()) {
    group.follow();
    return 0;
  }
  Backend* backend = &group.backend();
  LoadedModel* lm = &group.model();
  if (!no_progress) std::fprintf(stderr, "loaded %s\n", lm->stats.summary().c_str());
  if (!no_progress && layout.distributed())
    std::fprintf(stderr, "tensor parallel: collectives %s\n", group.collectives().c_str());
  Model& model = *lm->model;
  const ModelInfo& info = model.info();
  for (const auto& w : lm->warnings.summary()) std::fprintf(stderr, "warning: %s\n", w.c_str());

  // The tokenizer is optional with --prompt-ids: ids are then printed instead of text.
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = std::make_unique<Tokenizer>(Tokenizer::from_folder(lm->source->config_dir()));
  } catch (const Error& e) {
    if (!prompt_ids.empty()) {
      std::fprintf(stderr, "note: no tokenizer (%s); printing ids\n", e.what());
      print_ids = true;
    } else {
      throw;
    }
  }
  std::vector<int32_t> ids;
  if (!prompt_ids.empty()) {
    ids = parse_ids(prompt_ids);
  } else {
    ids = tok->encode(prompt, true);
    if (tok->add_bos() && tok->bos_id()) ids.insert(ids.begin(), *tok->bos_id());
    if (ids.empty()) raise("E_PROMPT", Where{"", "", "--prompt"}, "a prompt of at least one token", "empty");
  }
  for (int32_t id : ids)
    if (id >= info.vocab_size)
      raise("E_TOKEN_RANGE", Where{"", "", "prompt"}, "ids below " + std::to_string(info.vocab_size),
            std::to_string(id));
  std::vector<int32_t> eos = info.eos_ids;
  if (eos.empty() && tok) eos = tok->eos_ids();

  if (drafting)
    return run_drafting(
        model, *backend, group.comm(),
        std::clamp(layout.timeout / 2, std::chrono::milliseconds(1), std::chrono::milliseconds(5000)),
        lm->folder, spec, missing_draft_tensors(*lm), ids, eos, n_predict, ignore_eos, print_ids, tok.get(),
        SamplerConfig{temp, top_k, top_p, min_p, seed}, t0);

  SeqId seq = group.add_sequence(static_cast<int64_t>(ids.size()) + n_predict + 1);
  Sampler sampler(SamplerConfig{temp, top_k, top_p, min_p, seed});
  std::ofstream logits_file;
  if (!logits_out.empty()) {
    logits_file.open(logits_out, std::ios::binary);
    if (!logits_file) raise("E_IO_OPEN", Where{logits_out, "", ""}, "a writable file", "cannot open");
  }
  auto write_row = [&](const std::vector<float>& row) {
    if (logits_file.is_open())
      logits_file.write(reinterpret_cast<const char*>(row.data()),
                        static_cast<std::streamsize>(row.size() * 4));
  };
  auto t_loaded = Clock::now();
  std::fprintf(stderr, "loaded %s (%s) in %.2f s, %d threads%s; prompt %zu tokens\n", folder.c_str(),
               info.family.c_str(), seconds(t0, t_loaded), backend->threads(),
               tp_size > 1 ? fmt::format(" per rank, tp {}", tp_size).c_str() : "", ids.size());
  if (tok) {
    std::fputs(tok->decode_text(ids).c_str(), stdout);
    std::fflush(stdout);
  }

  std::vector<float> row = group.prefill(seq, ids);
  auto t_prompt = Clock::now();
  std::vector<int32_t> out;
  std::unique_ptr<StreamDecoder> stream = tok ? std::make_unique<StreamDecoder>(*tok) : nullptr;
  for (int i = 0; i < n_predict; ++i) {
    write_row(row);
    const int32_t next = sampler.sample(row);
    out.push_back(next);
    if (stream) {
      std::fputs(stream->push(next).c_str(), stdout);
      std::fflush(stdout);
    }
    const bool is_eos = std::find(eos.begin(), eos.end(), next) != eos.end();
    if ((is_eos && !ignore_eos) || i + 1 == n_predict) break;
    SeqId seqs[] = {seq};
    int32_t toks[] = {next};
    row = group.decode(seqs, toks)[0];
  }
  auto t_end = Clock::now();
  group.stop();
  finish_output(stream.get(), out, print_ids);
  const double tp = seconds(t_loaded, t_prompt), tg = seconds(t_prompt, t_end);
  std::fprintf(
      stderr,
      "prompt: %zu tokens in %.3f s (%.1f tokens/s); generation: %zu tokens in %.3f s (%.1f tokens/s)\n",
      ids.size(), tp, tp > 0 ? ids.size() / tp : 0.0, out.size(), tg,
      tg > 0 && out.size() > 1 ? (out.size() - 1) / tg : 0.0);
  return 0;
}

RegisterCommand reg{"run", "generate text from a prompt (CPU or CUDA engine): -m <folder> -p \"text\"",
                    run_run};

}  // namespace
}  // namespace bloomery::tools
