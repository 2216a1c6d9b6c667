// GPU golden test: every fixture folder whose family the CUDA backend can run, on the card, against the
// transformers goldens (tests/fixtures/README.md) and against the CPU engine, under the CUDA accuracy gate
// (accuracy_gate.h, docs/accuracy.md "The CUDA gate"). Teacher-forced, per position, for the prompt logits,
// the 32 decode rows (fed the golden tokens), the prompt fed in chunks and interleaved with decode steps, and
// the draft (MTP) layer's logits: mean KL(reference ‖ cuda) ≤ max(1e-3, 2 × transformers' BF16-vs-f32 mean
// KL) and top-1 agreement ≥ that BF16 forward's − 1 point. Free-running greedy: the 32-token continuation
// identical up to the first token whose f32 reference top-2 margin is below δ = 2 × the BF16 forward's
// largest logit error. A folder without a calibration in tests/fixtures/calibration/bf16_noise.json keeps the
// fixed bands (mean KL ≤ 1e-3, top-1 ≥ 99 %, all 32 greedy tokens identical) and says so. qwen3_next,
// qwen4_exp and glm5_next must run on the card (a missing op is a failure there); other families the card
// cannot run yet are skipped with the op named, never passed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <span>

#include <gtest/gtest.h>

#include "../golden/golden_file.h"
#include "accuracy_gate.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm/gemm_internal.h"
#include "backend_util.h"
#include "models/kv_cache_type.h"
#include "models/model_loader.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using test::Agreement;
using test::Gate;
using test::GoldenTensor;

// Families whose every op the CUDA backend implements: their fixtures must run, never skip.
bool must_run(const std::string& folder) {
  return folder.rfind("qwen3_next", 0) == 0 || folder.rfind("qwen4_exp", 0) == 0 ||
         folder.rfind("glm5_next", 0) == 0;
}

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

struct Side {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LoadedModel> lm;
  std::unique_ptr<Engine> engine;
};

struct Loaded {
  Side cuda, cpu;
  std::map<std::string, GoldenTensor> golden;
  Gate gate;  // the bands of this folder (calibrated or fixed)
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

// The logits rows the greedy continuation is chosen from, fed the golden tokens (teacher forcing, so one
// early difference does not cascade): row 0 from the prompt, row j after want[j − 1]. [want.size(), V].
std::vector<float> forced_rows(Engine& e, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& want) {
  SeqId s = e.add_sequence(512);
  std::vector<float> rows = e.prefill(s, prompt);
  for (size_t j = 1; j < want.size(); ++j) {
    SeqId seqs[] = {s};
    int32_t tok[] = {want[j - 1]};
    auto r = e.decode(seqs, tok)[0];
    rows.insert(rows.end(), r.begin(), r.end());
  }
  e.remove_sequence(s);
  return rows;
}

// Prompt logits [T, V] fed two ways at once on one engine: sequence A a 7-token chunk then single decode
// steps, sequence B three chunks (the second fed while A is mid-way). Both exercise cached multi-token steps
// (q0 > 0) of every mixer, the QSA block selection among them.
std::pair<std::vector<float>, std::vector<float>> chunked_rows(Engine& e, const std::vector<int32_t>& ids) {
  const size_t T = ids.size();
  SeqId a = e.add_sequence(512), b = e.add_sequence(512);
  std::vector<float> rows_a = e.prefill(a, std::span(ids).first(7), true);
  const size_t c1 = T / 3, c2 = 2 * T / 3;
  std::vector<float> rows_b = e.prefill(b, std::span(ids).first(c1), true);
  for (size_t t = 7; t < T; ++t) {
    SeqId seqs[] = {a};
    int32_t tok[] = {ids[t]};
    auto r = e.decode(seqs, tok)[0];
    rows_a.insert(rows_a.end(), r.begin(), r.end());
    if (t == c1 + 3) {
      auto rb = e.prefill(b, std::span(ids).subspan(c1, c2 - c1), true);
      rows_b.insert(rows_b.end(), rb.begin(), rb.end());
    }
  }
  auto rb = e.prefill(b, std::span(ids).subspan(c2), true);
  rows_b.insert(rows_b.end(), rb.begin(), rb.end());
  e.remove_sequence(a);
  e.remove_sequence(b);
  return {rows_a, rows_b};
}

// Prints one comparison with the folder's bands and checks it against them.
void expect_bands(const std::string& what, const Agreement& a, const Gate& g) {
  std::printf("    %s: %lld positions, top-1 %.4f (band >= %.4f), mean KL %.3g (band <= %.3g), max KL %.3g\n",
              what.c_str(), (long long)a.rows, a.top1_rate(), g.min_top1, a.mean_kl(), g.max_mean_kl,
              a.kl_max);
  EXPECT_GT(a.rows, 0) << what;
  EXPECT_GE(a.top1_rate(), g.min_top1) << what;
  EXPECT_LE(a.mean_kl(), g.max_mean_kl) << what;
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
  // BLOOMERY_GOLDEN_KV=bf16|f32 (default: auto, i.e. f32): both engines' K/V caches in that type, so
  // the whole suite runs against the goldens under the BF16 cache too (scripts/gpu/kv-bf16.sh).
  LoadOptions load;
  if (const char* kv = std::getenv("BLOOMERY_GOLDEN_KV"); kv && *kv) load.kv_type = kv_cache_type(kv, "auto");
  try {
    slot->cuda.backend = make_cuda_backend(0);
    slot->cuda.lm = load_model(dir, *slot->cuda.backend, load);
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
  slot->cpu.lm = load_model(dir, *slot->cpu.backend, load);
  slot->cpu.engine = std::make_unique<Engine>(*slot->cpu.backend, *slot->cpu.lm->model);
  slot->golden = test::read_goldens((fixtures_dir() / "goldens" / (folder + ".safetensors")).string());
  const fs::path noise = fixtures_dir() / "calibration" / "bf16_noise.json";
  try {
    slot->gate = test::gate_for(test::read_bf16_noise(noise, "models", folder), folder, noise.string());
    std::printf("    %s\n", slot->gate.line.c_str());
  } catch (const std::runtime_error& e) {
    slot->error = std::string("the accuracy gate's calibration: ") + e.what();
  }
  return *slot;
}

class GoldenCuda : public ::testing::TestWithParam<std::string> {
 protected:
  // The gate judges what users run: the engine's prompt GEMM mode at start (its default, or the one
  // BLOOMERY_CUDA_GEMM names), not the reference mode the unit tests hold to f32 bounds (backend_util.h). A
  // folder's engine runs on first use inside a test, so every test sets it.
  void SetUp() override { cuda::set_gemm_mode(cuda::gemm_mode_at_start()); }
  void TearDown() override { cuda::set_gemm_mode(gputest::unit_test_gemm_mode()); }
  Loaded* setup() {
    if (GetParam() == "none") {
      skip_ = "no fixture folders under " + fixtures_dir().string();
      return nullptr;
    }
    Loaded& l = load(GetParam());
    if (!l.skip.empty() && must_run(GetParam())) {
      ADD_FAILURE() << GetParam() << " must run on the CUDA backend: " << l.skip;
      return nullptr;
    }
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
  const Gate& gate = l->gate;
  size_t checked = 0, total = 0;
  for (int i = 0; i < prompts(*l); ++i) {
    const std::string p = std::to_string(i);
    auto prompt = ids_of(l->golden.at("prompt" + p + ".ids"));
    auto want = ids_of(l->golden.at("greedy" + p + ".ids"));
    auto got = greedy(*l->cuda.engine, prompt, want.size());
    auto cpu = greedy(*l->cpu.engine, prompt, want.size());
    // The tokens that must agree: all, or those before the first reference top-2 margin below δ.
    size_t n = want.size();
    if (gate.delta) {
      const auto margin = test::reference_margins(l->golden, p, want.size());
      const auto low = std::find_if(margin.begin(), margin.end(), [&](double m) { return m < *gate.delta; });
      n = std::min<size_t>(n, low - margin.begin());
    }
    checked += n;
    total += want.size();
    const auto first = [n](const std::vector<int32_t>& v) {
      return std::vector<int32_t>(v.begin(), v.begin() + n);
    };
    EXPECT_EQ(first(got), first(want)) << "cuda greedy" << p << " vs golden, the first " << n << " tokens";
    EXPECT_EQ(first(got), first(cpu)) << "cuda greedy" << p << " vs cpu engine, the first " << n << " tokens";
  }
  if (gate.delta)
    std::printf(
        "    %s greedy: %zu of %zu tokens checked (up to the first reference margin < delta = %.3g)\n",
        GetParam().c_str(), checked, total, *gate.delta);
  else
    std::printf("    %s greedy: all %zu tokens checked\n", GetParam().c_str(), total);
  if (checked == 0)
    GTEST_SKIP() << "every prompt's first greedy token has a reference top-2 margin below delta = "
                 << *gate.delta << ": nothing to compare";
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
  expect_bands(GetParam() + " prompt cuda vs golden", vs_golden, l->gate);
  expect_bands(GetParam() + " prompt cuda vs cpu", vs_cpu, l->gate);
}

TEST_P(GoldenCuda, DecodeLogitsAgree) {
  Loaded* l = setup();
  if (!l) {
    if (skip_.empty()) return;  // failed above
    GTEST_SKIP() << skip_;
  }
  const int64_t V = l->cuda.lm->model->info().vocab_size;
  Agreement vs_golden, vs_cpu;
  for (int i = 0; i < prompts(*l); ++i) {
    const std::string p = std::to_string(i);
    auto prompt = ids_of(l->golden.at("prompt" + p + ".ids"));
    auto want = ids_of(l->golden.at("greedy" + p + ".ids"));
    const auto& ref = l->golden.at("greedy" + p + ".logits").f32;
    auto got = forced_rows(*l->cuda.engine, prompt, want);
    auto cpu = forced_rows(*l->cpu.engine, prompt, want);
    ASSERT_EQ(got.size(), want.size() * V);
    ASSERT_EQ(ref.size(), got.size());
    ASSERT_EQ(cpu.size(), got.size());
    for (size_t j = 0; j < want.size(); ++j) {
      vs_golden.add(ref.data() + j * V, got.data() + j * V, V);
      vs_cpu.add(cpu.data() + j * V, got.data() + j * V, V);
    }
  }
  expect_bands(GetParam() + " decode rows cuda vs golden", vs_golden, l->gate);
  expect_bands(GetParam() + " decode rows cuda vs cpu", vs_cpu, l->gate);
}

TEST_P(GoldenCuda, ChunkedPromptAndStepsAgree) {
  Loaded* l = setup();
  if (!l) {
    if (skip_.empty()) return;  // failed above
    GTEST_SKIP() << skip_;
  }
  const int64_t V = l->cuda.lm->model->info().vocab_size;
  auto ids = ids_of(l->golden.at("prompt2.ids"));  // the long prompt
  const auto& ref = l->golden.at("prompt2.logits").f32;
  ASSERT_GT(ids.size(), 12u);
  auto [rows_a, rows_b] = chunked_rows(*l->cuda.engine, ids);
  ASSERT_EQ(rows_a.size(), ref.size());
  ASSERT_EQ(rows_b.size(), ref.size());
  Agreement a, b;
  for (size_t t = 0; t < ids.size(); ++t) {
    a.add(ref.data() + t * V, rows_a.data() + t * V, V);
    b.add(ref.data() + t * V, rows_b.data() + t * V, V);
  }
  // 5-token chunks: every chunk a cached multi-token step on the decode-size matmul path (≤ 8 rows), the
  // chunk starts unaligned to the indexer's 4-token blocks.
  std::vector<float> rows_c;
  SeqId s = l->cuda.engine->add_sequence(512);
  for (size_t t0 = 0; t0 < ids.size(); t0 += 5) {
    auto r =
        l->cuda.engine->prefill(s, std::span(ids).subspan(t0, std::min<size_t>(5, ids.size() - t0)), true);
    rows_c.insert(rows_c.end(), r.begin(), r.end());
  }
  l->cuda.engine->remove_sequence(s);
  ASSERT_EQ(rows_c.size(), ref.size());
  Agreement c;
  for (size_t t = 0; t < ids.size(); ++t) c.add(ref.data() + t * V, rows_c.data() + t * V, V);
  expect_bands(GetParam() + " chunk + decode steps vs golden", a, l->gate);
  expect_bands(GetParam() + " three chunks vs golden", b, l->gate);
  expect_bands(GetParam() + " 5-token chunks vs golden", c, l->gate);
}

TEST_P(GoldenCuda, DraftLogitsAgree) {
  Loaded* l = setup();
  if (!l) {
    if (skip_.empty()) return;  // failed above
    GTEST_SKIP() << skip_;
  }
  if (!l->golden.count("mtp0.logits")) GTEST_SKIP() << "golden file has no draft outputs";
  const ModelInfo& info = l->cuda.lm->model->info();
  ASSERT_TRUE(info.has_draft) << "the checkpoint ships a draft layer but the model did not bind it";
  const int64_t V = info.vocab_size;
  Backend& be = *l->cuda.backend;
  Engine& e = *l->cuda.engine;
  Agreement vs_golden;
  for (int i = 0; i < prompts(*l); ++i) {
    const std::string p = "mtp" + std::to_string(i);
    if (!l->golden.count(p + ".logits")) continue;
    const auto& hid = l->golden.at(p + ".hidden");
    auto toks = ids_of(l->golden.at(p + ".tokens"));
    const auto& ref = l->golden.at(p + ".logits").f32;
    const int64_t T = static_cast<int64_t>(toks.size());
    // The draft layer over the golden target hiddens, after the target took the prompt (as the CPU test).
    SeqId s = e.add_sequence(512);
    e.prefill(s, ids_of(l->golden.at("prompt" + std::to_string(i) + ".ids")));
    Tensor h = be.upload(hid.f32, {T, info.draft_hidden_size});
    ForwardResult r = l->cuda.lm->model->draft(be, e.state(s), h, toks);
    auto logits = be.download(r.logits);
    e.remove_sequence(s);
    ASSERT_EQ(logits.size(), ref.size()) << p;
    for (int64_t t = 0; t < T; ++t) vs_golden.add(ref.data() + t * V, logits.data() + t * V, V);
  }
  // The draft layer is held to the folder's bands (the calibration measures the target model's BF16 noise).
  expect_bands(GetParam() + " draft logits cuda vs golden", vs_golden, l->gate);
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
