// `bloomery perplexity -m <folder> -f <text>`: llama-perplexity's measurement on the CPU or CUDA engine.
// The text is tokenized whole and cut into non-overlapping windows of --ctx tokens; each window is one fresh
// sequence, and only its second half is scored (row j predicts token j+1 for j in [ctx/2, ctx-1)), so every
// scored token sees at least ctx/2 tokens of context. Prints PPL with its ± error (from the spread of the
// per-token NLL). --kl-divergence-base FILE saves the scored log-probabilities; --kl-divergence FILE compares
// this run against them: mean/max KL, same top token %, top-1 accuracy of both.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "backend/select/backend_choice.h"
#include "core/error.h"
#include "models/model_loader.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"
#include "tools/command.h"

namespace bloomery::tools {
namespace {

constexpr char kMagic[8] = {'B', 'L', 'M', 'K', 'L', 'D', '1', '\0'};

// Running mean and spread of a per-token quantity (Welford), for "x ± err" lines.
struct Stat {
  double n = 0, mean = 0, m2 = 0, max = 0;
  void add(double v) {
    n += 1;
    const double d = v - mean;
    mean += d / n;
    m2 += d * (v - mean);
    max = std::max(max, v);
  }
  double err() const { return n > 1 ? std::sqrt(m2 / (n - 1) / n) : 0.0; }
};

// log_softmax of one logits row, in double.
void log_softmax(const float* row, int64_t V, std::vector<double>& out) {
  out.resize(V);
  double mx = row[0];
  for (int64_t i = 1; i < V; ++i) mx = std::max(mx, double(row[i]));
  double s = 0;
  for (int64_t i = 0; i < V; ++i) s += std::exp(double(row[i]) - mx);
  const double lse = mx + std::log(s);
  for (int64_t i = 0; i < V; ++i) out[i] = double(row[i]) - lse;
}

int64_t argmax(const std::vector<double>& v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

// The saved base: ctx, vocab, chunks, the tokens, then per scored row the f32 log-probabilities.
struct KldBase {
  uint32_t ctx = 0, vocab = 0, chunks = 0;
  std::vector<int32_t> tokens;
  std::ifstream in;  // positioned at the first row
};

void write_u32(std::ofstream& f, uint32_t v) {
  f.write(reinterpret_cast<const char*>(&v), 4);
}

KldBase open_base(const std::string& path) {
  KldBase b;
  b.in.open(path, std::ios::binary);
  if (!b.in) raise("E_IO_OPEN", Where{path, "", "--kl-divergence"}, "a readable file", "cannot open");
  char magic[8];
  b.in.read(magic, 8);
  if (!b.in || std::memcmp(magic, kMagic, 8) != 0)
    raise("E_KLD_FORMAT", Where{path, "", "--kl-divergence"},
          "a file written by bloomery perplexity --kl-divergence-base", "another format");
  b.in.read(reinterpret_cast<char*>(&b.ctx), 4);
  b.in.read(reinterpret_cast<char*>(&b.vocab), 4);
  b.in.read(reinterpret_cast<char*>(&b.chunks), 4);
  b.tokens.resize(size_t(b.ctx) * b.chunks);
  b.in.read(reinterpret_cast<char*>(b.tokens.data()), std::streamsize(b.tokens.size() * 4));
  if (!b.in)
    raise("E_KLD_FORMAT", Where{path, "", "--kl-divergence"}, "a complete header", "a truncated file");
  return b;
}

void require_same(const std::string& path, const char* field, uint64_t base, uint64_t now) {
  if (base != now)
    raise("E_KLD_MISMATCH", Where{path, "", field}, "the base's " + std::to_string(base),
          std::to_string(now) + " in this run");
}

int run_perplexity(int argc, char** argv) {
  CLI::App app{"Perplexity of a text file in context windows (llama-perplexity style), with KL-divergence."};
  std::string folder, text_file, kld_base, kld, json_out, backend_name = "auto";
  int ctx = 512, threads = 0, max_chunks = 0;
  bool no_progress = false;
  app.add_option("-m,--model", folder, "model folder")->required();
  app.add_option("-f,--file", text_file, "text file to score")->required();
  app.add_option("-c,--ctx", ctx, "tokens per window (the second half of each is scored)")
      ->check(CLI::Range(4, 1 << 20));
  app.add_option("--chunks", max_chunks, "score at most this many windows (0 = all)")
      ->check(CLI::NonNegativeNumber);
  auto* base_opt = app.add_option("--kl-divergence-base", kld_base,
                                  "write the scored log-probabilities to FILE (for a later --kl-divergence)");
  app.add_option("--kl-divergence", kld, "compare this run's log-probabilities against a saved base FILE")
      ->excludes(base_opt);
  app.add_option("--json-out", json_out, "also write tokens, per-token NLL and the summary as JSON");
  app.add_option("--backend", backend_name, "auto, cpu or cuda (as bloomery run)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("-t,--threads", threads, "CPU threads (0 = every core)");
  app.add_flag("--no-progress", no_progress, "no load progress and no per-window line");
  CLI11_PARSE(app, argc, argv);

  backend_name = pick_backend(backend_name, folder).name;
  check_backend_runs(backend_name, folder);
  std::unique_ptr<Backend> backend = make_backend(backend_name, threads);
  LoadOptions load;
  load.plan.context = ctx;
  load.plan.sequences = 1;
  load.progress = no_progress ? ProgressMode::Quiet : ProgressMode::Auto;
  std::unique_ptr<LoadedModel> lm = load_model(folder, *backend, load);
  Model& model = *lm->model;
  const int64_t V = model.info().vocab_size;
  Tokenizer tok = Tokenizer::from_folder(lm->source->config_dir());

  std::ifstream tf(text_file, std::ios::binary);
  if (!tf) raise("E_IO_OPEN", Where{text_file, "", "-f"}, "a readable text file", "cannot open");
  std::stringstream ss;
  ss << tf.rdbuf();
  // The file is text: special-token spellings in it are plain characters (HF encode_special_tokens).
  std::vector<int32_t> ids = tok.encode(ss.str(), false);
  if (tok.add_bos() && tok.bos_id()) ids.insert(ids.begin(), *tok.bos_id());
  int64_t chunks = int64_t(ids.size()) / ctx;
  if (max_chunks > 0) chunks = std::min<int64_t>(chunks, max_chunks);
  if (chunks < 1)
    raise("E_PPL_TOO_SHORT", Where{text_file, "", "--ctx"}, "at least " + std::to_string(ctx) + " tokens",
          std::to_string(ids.size()) + " tokens");
  const int first = ctx / 2;
  std::fprintf(stderr, "perplexity: %zu tokens, %lld windows of %d (scoring %d tokens each), %s backend\n",
               ids.size(), static_cast<long long>(chunks), ctx, ctx - 1 - first, backend_name.c_str());

  std::ofstream base_out;
  if (!kld_base.empty()) {
    base_out.open(kld_base, std::ios::binary);
    if (!base_out)
      raise("E_IO_OPEN", Where{kld_base, "", "--kl-divergence-base"}, "a writable file", "cannot open");
    base_out.write(kMagic, 8);
    write_u32(base_out, uint32_t(ctx));
    write_u32(base_out, uint32_t(V));
    write_u32(base_out, uint32_t(chunks));
    base_out.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(size_t(chunks) * ctx * 4));
  }
  KldBase base;
  if (!kld.empty()) {
    base = open_base(kld);
    require_same(kld, "ctx", base.ctx, uint64_t(ctx));
    require_same(kld, "vocab", base.vocab, uint64_t(V));
    require_same(kld, "chunks", base.chunks, uint64_t(chunks));
    for (size_t i = 0; i < base.tokens.size(); ++i)
      if (base.tokens[i] != ids[i])
        raise("E_KLD_MISMATCH", Where{kld, "", "tokens[" + std::to_string(i) + "]"},
              "the base's token " + std::to_string(base.tokens[i]), std::to_string(ids[i]) + " in this run");
  }

  Engine engine(*backend, model);
  Stat nll, kl, base_nll;
  int64_t same_top = 0, top1 = 0, base_top1 = 0;
  std::vector<double> lp;
  std::vector<float> lp32(V), blp(V);
  std::vector<double> nll_all;
  for (int64_t c = 0; c < chunks; ++c) {
    std::span<const int32_t> win(ids.data() + c * ctx, size_t(ctx));
    SeqId seq = engine.add_sequence(ctx);
    std::vector<float> logits = engine.prefill(seq, win, true);
    engine.remove_sequence(seq);
    for (int j = first; j < ctx - 1; ++j) {
      log_softmax(logits.data() + size_t(j) * V, V, lp);
      const int32_t next = win[size_t(j) + 1];
      nll.add(-lp[next]);
      nll_all.push_back(-lp[next]);
      const int64_t am = argmax(lp);
      top1 += am == next;
      if (base_out.is_open()) {
        for (int64_t i = 0; i < V; ++i) lp32[i] = float(lp[i]);
        base_out.write(reinterpret_cast<const char*>(lp32.data()), std::streamsize(V * 4));
      }
      if (base.in.is_open()) {
        base.in.read(reinterpret_cast<char*>(blp.data()), std::streamsize(V * 4));
        if (!base.in)
          raise("E_KLD_FORMAT", Where{kld, "", "--kl-divergence"}, "a row per scored token",
                "a truncated file");
        double k = 0;
        int64_t bam = 0;
        for (int64_t i = 0; i < V; ++i) {
          k += std::exp(double(blp[i])) * (double(blp[i]) - lp[i]);
          if (blp[i] > blp[bam]) bam = i;
        }
        kl.add(std::max(0.0, k));
        base_nll.add(-double(blp[next]));
        same_top += bam == am;
        base_top1 += bam == next;
      }
    }
    if (!no_progress) std::printf("[%lld]%.4f,", static_cast<long long>(c + 1), std::exp(nll.mean));
    std::fflush(stdout);
  }
  if (!no_progress) std::printf("\n");
  const double ppl = std::exp(nll.mean), ppl_err = ppl * nll.err();
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, ppl_err);
  std::printf("scored tokens: %.0f in %lld windows of %d; top-1 accuracy %.3f %%\n", nll.n,
              static_cast<long long>(chunks), ctx, 100.0 * top1 / nll.n);
  if (base.in.is_open()) {
    const double bppl = std::exp(base_nll.mean);
    std::printf("PPL(base)      : %.4f\n", bppl);
    std::printf("ln(PPL/PPL_base): %.6f\n", nll.mean - base_nll.mean);
    std::printf("Mean    KLD    : %.6f +/- %.6f\n", kl.mean, kl.err());
    std::printf("Maximum KLD    : %.6f\n", kl.max);
    std::printf("Same top token : %.3f %%\n", 100.0 * same_top / nll.n);
    std::printf("Top-1 accuracy : %.3f %% (base %.3f %%)\n", 100.0 * top1 / nll.n, 100.0 * base_top1 / nll.n);
  }
  if (!json_out.empty()) {
    nlohmann::json j;
    j["ppl"] = ppl;
    j["ppl_err"] = ppl_err;
    j["ctx"] = ctx;
    j["chunks"] = chunks;
    j["backend"] = backend_name;
    j["tokens"] = std::vector<int32_t>(ids.begin(), ids.begin() + chunks * ctx);
    j["nll"] = nll_all;
    j["top1"] = double(top1) / nll.n;
    if (base.in.is_open()) {
      j["kld_mean"] = kl.mean;
      j["kld_max"] = kl.max;
      j["same_top"] = double(same_top) / nll.n;
      j["ppl_base"] = std::exp(base_nll.mean);
    }
    std::ofstream jf(json_out);
    if (!jf) raise("E_IO_OPEN", Where{json_out, "", "--json-out"}, "a writable file", "cannot open");
    jf << j.dump() << "\n";
  }
  return 0;
}

RegisterCommand reg{"perplexity",
                    "perplexity of a text file in windows, KL against a saved base: -m <folder> -f <text>",
                    run_perplexity};

}  // namespace
}  // namespace bloomery::tools
