// GPU golden test: every fixture folder whose family the CUDA backend can run, on the card, against the
// transformers goldens (tests/fixtures/README.md) and against the CPU engine: the 32-token greedy
// continuation identical, prompt logits with top-1 agreement >= 99% and mean KL <= 1e-3 per position.
// Families the card cannot run yet (family ops missing) are skipped with the op named, never passed.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "../golden/golden_file.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "models/model_loader.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using test::GoldenTensor;

constexpr double kMinTop1 = 0.99;    // fraction of positions whose argmax agrees
constexpr double kMaxMeanKl = 1e-3;  // mean over positions of KL(reference ‖ cuda), nats

// The GPU machine runs the carried binary from another path: the env var wins over the build's path.
fs::path fixtures_dir() {
  const char* env = std::getenv("BLOOMERY_SOURCE_DIR");
  return fs::path(env && *env ? env : BLOOMERY_SOURCE_DIR) / "tests/fixtures";
}

std::vector<std::string> fixture_folders() {
  std::vector<std::string> r;
  const fs::path m = fixtures_dir() / "models";
  if (fs::is_directory(m))
    for (const auto& e : fs::directory_iterator(m))
      if (e.is_directory()) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  if (r.empty()) r.push_back("none");
  return r;
}

std::vector<int32_t> ids_of(const GoldenTensor& t) {
  return std::vector<int32_t>(t.i64.begin(), t.i64.end());
}

// KL(p_ref ‖ p_got) of one logits row, in nats (f64 log-softmax).
double kl_row(const float* ref, const float* got, int64_t V) {
  double mr = ref[0], mg = got[0];
  for (int64_t i = 1; i < V; ++i) mr = std::max<double>(mr, ref[i]), mg = std::max<double>(mg, got[i]);
  double zr = 0, zg = 0;
  for (int64_t i = 0; i < V; ++i) zr += std::exp(ref[i] - mr), zg += std::exp(got[i] - mg);
  const double lr = mr + std::log(zr), lg = mg + std::log(zg);
  double kl = 0;
  for (int64_t i = 0; i < V; ++i) {
    const double a = ref[i] - lr, b = got[i] - lg;
    kl += std::exp(a) * (a - b);
  }
  return std::max(kl, 0.0);
}

struct Agreement {
  int64_t rows = 0, top1 = 0;
  double kl_sum = 0, kl_max = 0;
  void add(const float* ref, const float* got, int64_t V) {
    ++rows;
    top1 += argmax({ref, static_cast<size_t>(V)}) == argmax({got, static_cast<size_t>(V)});
    const double k = kl_row(ref, got, V);
    kl_sum += k;
    kl_max = std::max(kl_max, k);
  }
  double top1_rate() const { return rows ? double(top1) / rows : 0.0; }
  double mean_kl() const { return rows ? kl_sum / rows : 0.0; }
};

struct Side {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LoadedModel> lm;
  std::unique_ptr<Engine> engine;
};

struct Loaded {
  Side cuda, cpu;
  std::map<std::string, GoldenTensor> golden;
  std::string skip;
  std::string error;  // the CUDA side failed for another reason: every test of the folder fails with it
};

// Prompt logits [T, V] and the greedy continuation of `want.size()` tokens on one engine.
std::vector<float> prompt_logits(Engine& e, const std::vector<int32_t>& ids) {
  SeqId s = e.add_sequence(512);
  auto r = e.prefill(s, ids, true);
  e.remove_sequence(s);
  return r;
}

std::vector<int32_t> greedy(Engine& e, const std::vector<int32_t>& prompt, size_t n) {
  SeqId s = e.add_sequence(512);
  std::vector<float> row = e.prefill(s, prompt);
  std::vector<int32_t> got;
  while (got.size() < n) {
    got.push_back(argmax(row));
    if (got.size() == n) break;
    SeqId seqs[] = {s};
    int32_t tok[] = {got.back()};
    row = e.decode(seqs, tok)[0];
  }
  e.remove_sequence(s);
  return got;
}

// One load per folder. A family the card cannot run is found by trying: loading and one prompt forward; an
// E_BACKEND_UNSUPPORTED there becomes the skip reason (naming the op), so the test follows the backend.
Loaded& load(const std::string& folder) {
  static std::map<std::string, std::unique_ptr<Loaded>> cache;
  auto& slot = cache[folder];
  if (slot) return *slot;
  slot = std::make_unique<Loaded>();
  const fs::path dir = fixtures_dir() / "models" / folder;
  try {
    slot->cuda.backend = make_cuda_backend(0);
    slot->cuda.lm = load_model(dir, *slot->cuda.backend);
    slot->cuda.engine = std::make_unique<Engine>(*slot->cuda.backend, *slot->cuda.lm->model);
    const int32_t probe[] = {0, 1};
    prompt_logits(*slot->cuda.engine, {probe[0], probe[1]});
  } catch (const Error& e) {
    // Only a missing op is a skip; any other refusal (a kernel's shape limit, a load error) is a failure.
    if (e.id() == "E_BACKEND_UNSUPPORTED" || e.id() == "E_MODEL_TYPE_UNSUPPORTED")
      slot->skip = e.what();
    else
      slot->error = e.what();
    return *slot;
  }
  slot->cpu.backend = make_cpu_backend(0);
  slot->cpu.lm = load_model(dir, *slot->cpu.backend);
  slot->cpu.engine = std::make_unique<Engine>(*slot->cpu.backend, *slot->cpu.lm->model);
  slot->golden = test::read_goldens((fixtures_dir() / "goldens" / (folder + ".safetensors")).string());
  return *slot;
}

class GoldenCuda : public ::testing::TestWithParam<std::string> {
 protected:
  Loaded* setup() {
    if (GetParam() == "none") {
      skip_ = "no fixture folders under " + fixtures_dir().string();
      return nullptr;
    }
    Loaded& l = load(GetParam());
    if (!l.skip.empty()) {
      skip_ = "the CUDA backend cannot run this family yet: " + l.skip;
      return nullptr;
    }
    if (!l.error.empty()) {
      ADD_FAILURE() << "CUDA engine failed on " << GetParam() << ": " << l.error;
      return nullptr;
    }
    return &l;
  }
  static int prompts(const Loaded& l) {
    int n = 0;
    while (l.golden.count("prompt" + std::to_string(n) + ".ids")) ++n;
    return n;
  }
  std::string skip_;
};

TEST_P(GoldenCuda, GreedyTokensIdentical) {
  Loaded* l = setup();
  if (!l) {
    if (skip_.empty()) return;  // failed above
    GTEST_SKIP() << skip_;
  }
  ASSERT_GT(prompts(*l), 0);
  for (int i = 0; i < prompts(*l); ++i) {
    const std::string p = std::to_string(i);
    auto prompt = ids_of(l->golden.at("prompt" + p + ".ids"));
    auto want = ids_of(l->golden.at("greedy" + p + ".ids"));
    auto got = greedy(*l->cuda.engine, prompt, want.size());
    EXPECT_EQ(got, want) << "cuda greedy" << p << " vs golden";
    EXPECT_EQ(got, greedy(*l->cpu.engine, prompt, want.size())) << "cuda greedy" << p << " vs cpu engine";
  }
}

TEST_P(GoldenCuda, PromptLogitsAgree) {
  Loaded* l = setup();
  if (!l) {
    if (skip_.empty()) return;  // failed above
    GTEST_SKIP() << skip_;
  }
  const int64_t V = l->cuda.lm->model->info().vocab_size;
  Agreement vs_golden, vs_cpu;
  for (int i = 0; i < prompts(*l); ++i) {
    const std::string p = "prompt" + std::to_string(i);
    auto ids = ids_of(l->golden.at(p + ".ids"));
    const auto& ref = l->golden.at(p + ".logits").f32;
    auto got = prompt_logits(*l->cuda.engine, ids);
    auto cpu = prompt_logits(*l->cpu.engine, ids);
    ASSERT_EQ(got.size(), ids.size() * V);
    ASSERT_EQ(ref.size(), got.size());
    ASSERT_EQ(cpu.size(), got.size());
    for (size_t t = 0; t < ids.size(); ++t) {
      vs_golden.add(ref.data() + t * V, got.data() + t * V, V);
      vs_cpu.add(cpu.data() + t * V, got.data() + t * V, V);
    }
  }
  std::printf("    %s cuda vs golden: %lld positions, top-1 %.4f, mean KL %.3g, max KL %.3g\n",
              GetParam().c_str(), (long long)vs_golden.rows, vs_golden.top1_rate(), vs_golden.mean_kl(),
              vs_golden.kl_max);
  std::printf("    %s cuda vs cpu:    %lld positions, top-1 %.4f, mean KL %.3g, max KL %.3g\n",
              GetParam().c_str(), (long long)vs_cpu.rows, vs_cpu.top1_rate(), vs_cpu.mean_kl(),
              vs_cpu.kl_max);
  EXPECT_GE(vs_golden.top1_rate(), kMinTop1);
  EXPECT_LE(vs_golden.mean_kl(), kMaxMeanKl);
  EXPECT_GE(vs_cpu.top1_rate(), kMinTop1);
  EXPECT_LE(vs_cpu.mean_kl(), kMaxMeanKl);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenCuda, ::testing::ValuesIn(fixture_folders()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           std::replace_if(
                               n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace bloomery
