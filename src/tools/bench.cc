// `bloomery bench -m <folder>`: llama-bench style throughput: prompt processing (-p), decode (-n) at a
// context depth (-d) with concurrent sequences (-c), repeated (-r); medians and p95; a table or --json; and
// a roofline line for decode (bytes read per token against the copy bandwidth the tool measures itself).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/model_loader.h"
#include "runtime/engine.h"
#include "tools/backend_choice.h"
#include "tools/bench_bytes.h"
#include "tools/command.h"

namespace bloomery::tools {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Nearest-rank percentile (q in [0, 1]) of a copy of v.
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

struct Row {
  Row(std::string t, int64_t n, int64_t d, int64_t c) : test(std::move(t)), tokens(n), depth(d), conc(c) {}
  std::string test;  // "pp512" / "tg128"
  int64_t tokens = 0, depth = 0, conc = 1;
  std::vector<double> tps;  // tokens/s per repeat (all sequences together)
  std::vector<double> ms;   // pp: prompt latency per repeat and sequence; tg: latency per decode step
  double bytes_per_token = 0, gbps = 0, roofline = 0;  // tg only
};

class Bench {
 public:
  Bench(Engine& e, int64_t vocab) : e_(e), dist_(0, static_cast<int32_t>(vocab - 1)) {}

  std::vector<int32_t> tokens(int64_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = dist_(rng_);
    return t;
  }

  // c sequences, each already holding `depth` tokens (the depth prefill is not timed).
  std::vector<SeqId> sequences(int64_t c, int64_t depth, int64_t room) {
    std::vector<SeqId> s;
    for (int64_t i = 0; i < c; ++i) {
      s.push_back(e_.add_sequence(depth + room + 8));
      if (depth > 0) e_.prefill(s.back(), tokens(depth));
    }
    return s;
  }
  void drop(const std::vector<SeqId>& s) {
    for (SeqId id : s) e_.remove_sequence(id);
  }

  void pp(Row& row) {
    auto seqs = sequences(row.conc, row.depth, row.tokens);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < seqs.size(); ++i) prompts.push_back(tokens(row.tokens));
    auto t0 = Clock::now();
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto t1 = Clock::now();
      e_.prefill(seqs[i], prompts[i]);  // returns host logits: the device work is finished
      row.ms.push_back(since(t1) * 1e3);
    }
    row.tps.push_back(row.conc * row.tokens / since(t0));
    drop(seqs);
  }

  void tg(Row& row) {
    auto seqs = sequences(row.conc, row.depth, row.tokens);
    auto t0 = Clock::now();
    for (int64_t j = 0; j < row.tokens; ++j) {
      auto ids = tokens(row.conc);
      auto t1 = Clock::now();
      e_.decode(seqs, ids);
      row.ms.push_back(since(t1) * 1e3);
    }
    row.tps.push_back(row.conc * row.tokens / since(t0));
    drop(seqs);
  }

 private:
  Engine& e_;
  std::mt19937 rng_{1234};
  std::uniform_int_distribution<int32_t> dist_;
};

int run_bench(int argc, char** argv) {
  CLI::App app{"Benchmark prompt processing and decode (llama-bench style)."};
  std::string folder, backend_name = "cpu", synthetic;
  std::vector<int64_t> ps{512}, ns{128}, ds{0}, cs{1};
  int repeats = 5, threads = 0;
  bool json = false;
  app.add_option("-m,--model", folder, "model folder")->required();
  app.add_option("-p,--n-prompt", ps, "prompt tokens (comma list; 0 = skip)")->delimiter(',');
  app.add_option("-n,--n-gen", ns, "decoded tokens (comma list; 0 = skip)")->delimiter(',');
  app.add_option("-d,--n-depth", ds, "context depth before the test (comma list)")->delimiter(',');
  app.add_option("-c,--concurrent", cs, "concurrent sequences (comma list)")->delimiter(',');
  app.add_option("-r,--repetitions", repeats, "repeats per test")->check(CLI::PositiveNumber);
  app.add_option("-t,--threads", threads, "CPU threads (0 = every core)");
  app.add_option("--backend", backend_name, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--synthetic", synthetic, "family[:config.json] with random weights (not implemented yet)");
  app.add_flag("--json", json, "print JSON instead of a table");
  CLI11_PARSE(app, argc, argv);
  if (!synthetic.empty())
    raise("E_BENCH_UNSUPPORTED", Where{"", "", "--synthetic"},
          "-m <folder> (synthetic models are not built yet)", synthetic);
  for (auto v : {&ps, &ns, &ds, &cs})
    for (int64_t x : *v)
      if (x < 0)
        raise("E_BENCH_ARGS", Where{"", "", "-p/-n/-d/-c"}, "non-negative values", std::to_string(x));
  for (int64_t c : cs)
    if (c < 1) raise("E_BENCH_ARGS", Where{"", "", "-c"}, "at least 1 sequence", std::to_string(c));

  check_backend_runs(backend_name, folder);
  std::unique_ptr<Backend> backend = make_backend(backend_name, threads);
  auto t_load = Clock::now();
  std::unique_ptr<LoadedModel> lm = load_model(folder, *backend);
  const double load_s = since(t_load);
  const ModelInfo& info = lm->model->info();
  Engine engine(*backend, *lm->model);
  Bench bench(engine, info.vocab_size);
  const double bw = copy_bandwidth(backend_name);

  // Warm-up (kernel first launches, allocator growth), not reported.
  {
    Row w{"warm", 8, 0, 1};
    bench.pp(w);
    w.tokens = 4;
    bench.tg(w);
  }

  std::vector<Row> rows;
  for (int64_t c : cs)
    for (int64_t d : ds) {
      for (int64_t p : ps) {
        if (p == 0) continue;
        Row r{"pp" + std::to_string(p), p, d, c};
        for (int i = 0; i < repeats; ++i) bench.pp(r);
        rows.push_back(std::move(r));
      }
      for (int64_t n : ns) {
        if (n == 0) continue;
        Row r{"tg" + std::to_string(n), n, d, c};
        for (int i = 0; i < repeats; ++i) bench.tg(r);
        // Bytes at the mean depth of the run; the engine decodes sequences one by one (no batched GEMM
        // yet), so every sequence re-reads the weights: bytes per token do not shrink with -c.
        const DecodeBytes b = decode_bytes(*lm, backend_name, d + n / 2);
        r.bytes_per_token = static_cast<double>(b.total());
        r.gbps = r.bytes_per_token * percentile(r.tps, 0.5) / 1e9;
        r.roofline = bw > 0 ? r.gbps * 1e9 / bw : 0.0;
        rows.push_back(std::move(r));
      }
    }

  const DecodeBytes b0 = decode_bytes(*lm, backend_name, 0);
  if (json) {
    nlohmann::json j;
    j["model"] = folder;
    j["family"] = info.family;
    j["backend"] = backend_name;
    j["threads"] = backend->threads();
    j["load_s"] = load_s;
    j["copy_bandwidth_GBps"] = bw / 1e9;
    j["decode_bytes_depth0"] = {{"dense", b0.dense},
                                {"experts", b0.experts},
                                {"state", b0.state},
                                {"state_modelled", b0.state_known}};
    j["repetitions"] = repeats;
    for (const Row& r : rows) {
      nlohmann::json x{{"test", r.test},
                       {"depth", r.depth},
                       {"concurrent", r.conc},
                       {"tps_median", percentile(r.tps, 0.5)},
                       {"tps_p05", percentile(r.tps, 0.05)},
                       {"ms_median", percentile(r.ms, 0.5)},
                       {"ms_p95", percentile(r.ms, 0.95)},
                       {"tps", r.tps}};
      if (r.test[0] == 't')
        x.update({{"bytes_per_token", r.bytes_per_token}, {"GBps", r.gbps}, {"roofline", r.roofline}});
      j["results"].push_back(x);
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("model %s (%s), backend %s, %d thread(s), loaded in %.2f s, %d repetitions\n", folder.c_str(),
              info.family.c_str(), backend_name.c_str(), backend->threads(), load_s, repeats);
  std::printf("copy bandwidth (%s, read + written): %.1f GB/s\n",
              backend_name == "cuda" ? "device-to-device cudaMemcpy" : "host memcpy, 1 thread", bw / 1e9);
  std::printf("decode bytes/token at depth 0: dense %.3f MB + selected experts %.3f MB + state %.3f MB%s\n",
              b0.dense / 1e6, b0.experts / 1e6, b0.state / 1e6,
              b0.state_known ? "" : " (state not modelled)");
  std::printf("| %-8s | %6s | %3s | %12s | %10s | %10s | %9s | %8s |\n", "test", "depth", "c", "t/s (median)",
              "ms median", "ms p95", "GB/s", "roofline");
  std::printf(
      "|----------|--------|-----|--------------|------------|------------|-----------|----------|\n");
  for (const Row& r : rows) {
    char gb[32] = "", rf[32] = "";
    if (r.test[0] == 't') {
      std::snprintf(gb, sizeof gb, "%.2f", r.gbps);
      std::snprintf(rf, sizeof rf, "%.2f%%", r.roofline * 100);
    }
    std::printf("| %-8s | %6lld | %3lld | %12.1f | %10.3f | %10.3f | %9s | %8s |\n", r.test.c_str(),
                (long long)r.depth, (long long)r.conc, percentile(r.tps, 0.5), percentile(r.ms, 0.5),
                percentile(r.ms, 0.95), gb, rf);
  }
  std::printf("(pp ms: one sequence's prompt; tg ms: one decode step over all sequences)\n");
  return 0;
}

RegisterCommand reg{"bench", "throughput benchmark (llama-bench style): -m <folder> -p 512 -n 128",
                    run_bench};

}  // namespace
}  // namespace bloomery::tools
