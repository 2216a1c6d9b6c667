// GPU tests of the host-resident row table (backend/cuda/host_table.h): gathers from every qwen4_exp
// fixture's PLE table (BF16, FP8 per-tensor, split NVFP4 with per-shard scales; mapped and pinned placements)
// equal the CPU backend's gather_rows bit for bit; tables made by make_host_table in every format equal the
// CPU decoders; range errors; prefetch then gather. HostTableBench.* times gathers from a full-size in-memory
// table when BLOOMERY_HOST_TABLE_BENCH_ROWS is set (skipped otherwise).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cuda/host_table.h"
#include "backend/cuda/host_table/host_table_impl.h"
#include "backend_util.h"
#include "formats/classify.h"
#include "formats/tensor_source.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using gputest::random_bytes;
using gputest::random_e4m3;
using gputest::ScopedEnv;

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

// Index of the first differing element, or -1.
int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  const auto x = bits(a), y = bits(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i]) return static_cast<int64_t>(i);
  return -1;
}

std::vector<float> gather(Backend& be, const Weight& t, const std::vector<int64_t>& ids) {
  Tensor out = be.alloc({static_cast<int64_t>(ids.size()), t.cols()});
  be.gather_rows(out, t, ids);
  return be.download(out);
}

std::string error_id(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.id();
  }
  return "none";
}

fs::path models_dir() {
  const char* env = std::getenv("BLOOMERY_SOURCE_DIR");
  return fs::path(env && *env ? env : BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";
}

// A fixture folder's PLE table record (its TensorSource and records kept alive).
struct FixtureTable {
  Warnings warnings;
  std::unique_ptr<TensorSource> source;
  ResolvedCheckpoint ck;
  const WeightRecord* rec = nullptr;
};

std::unique_ptr<FixtureTable> open_ple(const fs::path& dir) {
  auto f = std::make_unique<FixtureTable>();
  f->source = std::make_unique<TensorSource>(TensorSource::open(dir, f->warnings));
  f->ck = resolve_checkpoint(*f->source, f->warnings);
  for (const WeightRecord& r : f->ck.weights)
    if (r.kind == RecordKind::Weight && r.name.find("ngram_embedding") != std::string::npos) f->rec = &r;
  return f;
}

std::vector<fs::path> qwen4_folders() {
  std::vector<fs::path> r;
  if (fs::is_directory(models_dir()))
    for (const auto& e : fs::directory_iterator(models_dir()))
      if (e.is_directory() && e.path().filename().string().rfind("qwen4_exp-", 0) == 0) r.push_back(e.path());
  std::sort(r.begin(), r.end());
  return r;
}

// First and last rows, every shard boundary, repeats, and random rows.
std::vector<int64_t> probe_ids(const WeightRecord& rec, std::mt19937& rng, size_t random_count) {
  const int64_t R = static_cast<int64_t>(rec.rows());
  std::vector<int64_t> ids = {0, R - 1, 0, 7, 7, 7, R - 1};
  int64_t first = 0;
  for (const TensorEntry* t : rec.main) {
    first += t->shape.empty() ? 1 : static_cast<int64_t>(t->shape[0]);
    for (int64_t d : {first - 1, first})
      if (d >= 0 && d < R) ids.push_back(d);
  }
  std::uniform_int_distribution<int64_t> d(0, R - 1);
  for (size_t i = 0; i < random_count; ++i) ids.push_back(d(rng));
  return ids;
}

class HostTableTest : public gputest::BackendPair {};

TEST_F(HostTableTest, FixturePleTablesEqualCpuGather) {
  const auto folders = qwen4_folders();
  ASSERT_GE(folders.size(), 3u) << "qwen4_exp fixture folders under " << models_dir();
  bool saw_split_nvfp4 = false, saw_fp8 = false, saw_bf16 = false;
  for (const fs::path& dir : folders) {
    SCOPED_TRACE(dir.filename().string());
    auto fx = open_ple(dir);
    ASSERT_NE(fx->rec, nullptr) << "no PLE table record";
    const WeightRecord& rec = *fx->rec;
    saw_split_nvfp4 |= (rec.format == FormatId::NVFP4 || rec.format == FormatId::W4A16_NVFP4) &&
                       !rec.block_scale_shards.empty();
    saw_fp8 |= rec.format == FormatId::FP8_TENSOR;
    saw_bf16 |= rec.format == FormatId::BF16;
    Weight cpu_t = cpu_->stream_weight(*fx->source, rec, fx->warnings);
    const std::vector<int64_t> ids = probe_ids(rec, rng_, 300);
    const std::vector<float> want = gather(*cpu_, cpu_t, ids);
    for (const char* placement : {"mapped", "pinned"}) {
      SCOPED_TRACE(placement);
      ScopedEnv env("BLOOMERY_PLE_PLACEMENT", placement);
      Weight gpu_t = gpu_->stream_weight(*fx->source, rec, fx->warnings);
      ASSERT_TRUE(gpu_t.streamed());
      EXPECT_EQ(gpu_t.shape(), cpu_t.shape());
      EXPECT_EQ(first_diff(gather(*gpu_, gpu_t, ids), want), -1) << format_name(rec.format);
      // One row at a time (the smallest gather) and a large one (the parallel packing path).
      EXPECT_EQ(first_diff(gather(*gpu_, gpu_t, {ids[1]}), gather(*cpu_, cpu_t, {ids[1]})), -1);
      const std::vector<int64_t> big = probe_ids(rec, rng_, 6000);
      EXPECT_EQ(first_diff(gather(*gpu_, gpu_t, big), gather(*cpu_, cpu_t, big)), -1);
      const cuda::HostTableStats st = cuda::host_table_stats(gpu_t);
      EXPECT_EQ(st.pinned, std::string(placement) == "pinned");
      EXPECT_EQ(st.gathers, 3u);
      EXPECT_EQ(st.rows, ids.size() + 1 + big.size());
    }
  }
  EXPECT_TRUE(saw_split_nvfp4 && saw_fp8 && saw_bf16) << "every PLE table form of the fixtures";
}

TEST_F(HostTableTest, RowsOutOfRangeAreRefused) {
  auto fx = open_ple(models_dir() / "qwen4_exp-fp4local-csf");
  ASSERT_NE(fx->rec, nullptr);
  Weight t = gpu_->stream_weight(*fx->source, *fx->rec, fx->warnings);
  const int64_t R = t.rows();
  EXPECT_EQ(error_id([&] { gather(*gpu_, t, {0, R}); }), "E_TOKEN_RANGE");
  EXPECT_EQ(error_id([&] { gather(*gpu_, t, {-1}); }), "E_TOKEN_RANGE");
  EXPECT_EQ(error_id([&] { gpu_->prefetch_rows(t, std::vector<int64_t>{R + 5}); }), "E_TOKEN_RANGE");
  EXPECT_EQ(cuda::host_table_stats(t).gathers, 0u);
  // A table on the card: prefetch is a no-op, and the stats call names what it got.
  Weight dense = gpu_->upload_weight("dense", std::vector<float>(32, 1.0f), {4, 8});
  gpu_->prefetch_rows(dense, std::vector<int64_t>{1});
  EXPECT_EQ(error_id([&] { cuda::host_table_stats(dense); }), "E_BACKEND_UNSUPPORTED");
}

TEST_F(HostTableTest, PrefetchThenGatherGivesTheSameRows) {
  auto fx = open_ple(models_dir() / "qwen4_exp-fp4local-csf");
  ASSERT_NE(fx->rec, nullptr);
  Weight cpu_t = cpu_->stream_weight(*fx->source, *fx->rec, fx->warnings);
  Weight t = gpu_->stream_weight(*fx->source, *fx->rec, fx->warnings);
  std::vector<std::vector<int64_t>> sets;
  for (size_t n : {16, 16, 48, 4096, 16}) sets.push_back(probe_ids(*fx->rec, rng_, n));
  // One prefetch, then its gather.
  gpu_->prefetch_rows(t, sets[0]);
  EXPECT_EQ(first_diff(gather(*gpu_, t, sets[0]), gather(*cpu_, cpu_t, sets[0])), -1);
  EXPECT_EQ(cuda::host_table_stats(t).prefetch_hits, 1u);
  // Several prefetches (sequences of a batch), gathered in another order; a big one packs on threads.
  for (size_t i = 1; i < 4; ++i) gpu_->prefetch_rows(t, sets[i]);
  for (size_t i : {3, 1, 2})
    EXPECT_EQ(first_diff(gather(*gpu_, t, sets[i]), gather(*cpu_, cpu_t, sets[i])), -1);
  EXPECT_EQ(cuda::host_table_stats(t).prefetch_hits, 4u);
  // A gather that was not prefetched, and a prefetch never gathered: still right, no hit counted.
  gpu_->prefetch_rows(t, sets[0]);
  EXPECT_EQ(first_diff(gather(*gpu_, t, sets[4]), gather(*cpu_, cpu_t, sets[4])), -1);
  EXPECT_EQ(cuda::host_table_stats(t).prefetch_hits, 4u);
  // More pending prefetches than staging slots: the oldest are dropped, the newest still hit.
  std::vector<std::vector<int64_t>> many;
  for (int i = 0; i < 40; ++i) many.push_back(probe_ids(*fx->rec, rng_, 32));
  for (const auto& s : many) gpu_->prefetch_rows(t, s);
  EXPECT_EQ(first_diff(gather(*gpu_, t, many.back()), gather(*cpu_, cpu_t, many.back())), -1);
  EXPECT_EQ(first_diff(gather(*gpu_, t, many.front()), gather(*cpu_, cpu_t, many.front())), -1);
  EXPECT_EQ(cuda::host_table_stats(t).prefetch_hits, 5u);
  EXPECT_EQ(cuda::host_table_stats(t).prefetches, 45u);
}

// ---- make_host_table --------------------------------------------------------------------------------------

// A random table of `rows` in format f, stored in 3 shards (the middle one with padded pitches), plus the
// same bytes packed whole for the CPU decoder.
struct SyntheticTable {
  FormatId format;
  uint64_t rows = 0, cols = 0;
  std::vector<std::vector<uint8_t>> elements, scales;  // per shard, as laid out (pitches)
  std::vector<uint8_t> whole_main, whole_scales, grid;
  float global = 0.37f;
  cuda::HostTableBytes bytes;
  WeightBytes wb;  // the whole table for decode_rows
};

std::unique_ptr<SyntheticTable> make_synthetic(FormatId f, std::mt19937& rng) {
  auto s = std::make_unique<SyntheticTable>();
  s->format = f;
  s->cols = 64;
  const std::vector<uint64_t> shard_rows = {100, 37, 203};
  for (uint64_t r : shard_rows) s->rows += r;
  const uint64_t c = s->cols;
  uint64_t er = c, sr = 0;  // element / scale bytes per row
  DType main_dtype = DType::F8_E4M3, scale_dtype = DType::U8;
  bool grid = false;
  switch (f) {
    case FormatId::BF16:
    case FormatId::F16:
      er = 2 * c, main_dtype = f == FormatId::BF16 ? DType::BF16 : DType::F16;
      break;
    case FormatId::F32:
      er = 4 * c, main_dtype = DType::F32;
      break;
    case FormatId::NVFP4:
      er = c / 2, sr = c / 16, main_dtype = DType::U8, scale_dtype = DType::F8_E4M3;
      break;
    case FormatId::MXFP4:
      er = c / 2, sr = c / 32, main_dtype = DType::U8, scale_dtype = DType::F8_E8M0;
      break;
    case FormatId::MXFP8:
      sr = c / 32, scale_dtype = DType::F8_E8M0;
      break;
    case FormatId::FP8_CHANNEL:
    case FormatId::FP8_BLOCK:
      grid = true, scale_dtype = DType::BF16;
      break;
    default:
      break;  // FP8_TENSOR
  }
  // Element bytes of the whole table (no NaN codes, so both sides produce the same bits).
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> main(s->rows * er);
  if (main_dtype == DType::F8_E4M3) {
    main = random_e4m3(main.size(), rng);
  } else if (main_dtype == DType::U8) {
    main = random_bytes(main.size(), rng);
  } else {
    for (uint64_t i = 0; i < s->rows * c; ++i) {
      const float v = nd(rng);
      if (main_dtype == DType::F32) {
        std::memcpy(&main[4 * i], &v, 4);
      } else {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        // BF16: the top half. F16: a finite half built from a small exponent and random mantissa.
        const uint16_t h = main_dtype == DType::BF16
                               ? static_cast<uint16_t>(b >> 16)
                               : static_cast<uint16_t>((b & 0x83FFu) | (((b >> 23) % 24 + 3) << 10));
        std::memcpy(&main[2 * i], &h, 2);
      }
    }
  }
  std::vector<uint8_t> scales;
  if (sr)
    scales = scale_dtype == DType::F8_E4M3 ? random_e4m3(s->rows * sr, rng, true)
                                           : random_bytes(s->rows * sr, rng, 115, 135);
  s->whole_main = main;
  s->whole_scales = scales;
  // Shards: copies of the whole table's rows; shard 1 gets padded pitches (garbage between rows).
  uint64_t first = 0;
  for (size_t i = 0; i < shard_rows.size(); ++i) {
    const uint64_t n = shard_rows[i], ep = i == 1 ? er + 24 : er, sp = i == 1 ? sr + 5 : sr;
    std::vector<uint8_t> e = random_bytes(n * ep, rng), sc = random_bytes(n * sp, rng);
    for (uint64_t r = 0; r < n; ++r) {
      std::memcpy(&e[r * ep], &main[(first + r) * er], er);
      if (sr) std::memcpy(&sc[r * sp], &scales[(first + r) * sr], sr);
    }
    s->elements.push_back(std::move(e));
    s->scales.push_back(std::move(sc));
    cuda::HostTableShard hs;
    hs.rows = n;
    hs.elements = s->elements.back().data();
    hs.element_pitch = i == 1 ? ep : 0;
    hs.block_scales = sr ? s->scales.back().data() : nullptr;
    hs.scale_pitch = i == 1 ? sp : 0;
    s->bytes.shards.push_back(hs);
    first += n;
  }
  WeightBytes& w = s->wb;
  w.format = f;
  w.main_dtype = main_dtype;
  w.scale_dtype = scale_dtype;
  w.global_dtype = DType::F32;
  w.rows = s->rows;
  w.cols = c;
  w.main = s->whole_main;
  w.block_scale = s->whole_scales;
  w.global_scale = {reinterpret_cast<const uint8_t*>(&s->global), 4};
  if (grid) {
    const int bn = f == FormatId::FP8_BLOCK ? 4 : 1, bk = f == FormatId::FP8_BLOCK ? 32 : static_cast<int>(c);
    const uint64_t count = (s->rows + bn - 1) / bn * ((c + bk - 1) / bk);
    std::uniform_real_distribution<float> ud(1e-3f, 2.0f);
    s->grid.resize(count * 2);
    for (uint64_t i = 0; i < count; ++i) {
      const float v = ud(rng);
      uint32_t b;
      std::memcpy(&b, &v, 4);
      const uint16_t h = static_cast<uint16_t>(b >> 16);
      std::memcpy(&s->grid[2 * i], &h, 2);
    }
    w.block_scale = s->grid;
    w.block_n = bn, w.block_k = bk;
    s->bytes.scale_grid = s->grid.data();
    s->bytes.grid_dtype = DType::BF16;
    s->bytes.block_n = bn, s->bytes.block_k = bk;
  }
  s->bytes.format = f;
  s->bytes.cols = c;
  s->bytes.global = s->global;
  return s;
}

std::vector<float> cpu_decode(const SyntheticTable& s, const std::vector<int64_t>& ids) {
  std::vector<float> out(ids.size() * s.cols);
  for (size_t i = 0; i < ids.size(); ++i)
    decode_rows(s.wb, static_cast<uint64_t>(ids[i]), 1, &out[i * s.cols]);
  return out;
}

TEST_F(HostTableTest, MakeHostTableEqualsCpuDecodeInEveryFormat) {
  for (FormatId f : {FormatId::BF16, FormatId::F16, FormatId::F32, FormatId::FP8_TENSOR, FormatId::NVFP4,
                     FormatId::MXFP4, FormatId::MXFP8, FormatId::FP8_CHANNEL, FormatId::FP8_BLOCK}) {
    SCOPED_TRACE(format_name(f));
    auto s = make_synthetic(f, rng_);
    // The owner keeps the synthetic bytes alive even after `s` goes (as b1's bench relies on).
    std::shared_ptr<SyntheticTable> keep(std::move(s));
    cuda::HostTableBytes b = keep->bytes;
    b.owner = keep;
    const int64_t R = static_cast<int64_t>(keep->rows);
    Weight t = cuda::make_host_table(*gpu_, "synthetic", {R, 4, 16}, b);
    ASSERT_TRUE(t.streamed());
    EXPECT_EQ(t.cols(), 64);
    std::vector<int64_t> ids = {0, R - 1, 99, 100, 136, 137, 137, 137, 0};
    std::uniform_int_distribution<int64_t> d(0, R - 1);
    for (int i = 0; i < 400; ++i) ids.push_back(d(rng_));
    EXPECT_EQ(first_diff(gather(*gpu_, t, ids), cpu_decode(*keep, ids)), -1);
    std::vector<int64_t> big(5000);
    for (auto& x : big) x = d(rng_);
    gpu_->prefetch_rows(t, big);
    EXPECT_EQ(first_diff(gather(*gpu_, t, big), cpu_decode(*keep, big)), -1);
    EXPECT_EQ(cuda::host_table_stats(t).prefetch_hits, 1u);
    EXPECT_EQ(error_id([&] { gather(*gpu_, t, {R}); }), "E_TOKEN_RANGE");
  }
}

TEST_F(HostTableTest, MakeHostTableRefusesBadDescriptions) {
  auto s = make_synthetic(FormatId::NVFP4, rng_);
  const int64_t R = static_cast<int64_t>(s->rows);
  auto id_of = [&](cuda::HostTableBytes b, std::vector<int64_t> shape) {
    return error_id([&] { cuda::make_host_table(*gpu_, "bad", std::move(shape), std::move(b)); });
  };
  EXPECT_EQ(id_of(s->bytes, {R, 64}), "none");
  EXPECT_EQ(id_of(s->bytes, {R + 1, 64}), "E_BACKEND_SHAPE");  // rows ≠ Σ shard rows
  EXPECT_EQ(id_of(s->bytes, {R, 32}), "E_BACKEND_SHAPE");      // cols ≠ width
  EXPECT_EQ(id_of(s->bytes, {R * 64}), "E_BACKEND_SHAPE");     // rank 1
  cuda::HostTableBytes b = s->bytes;
  b.shards[2].block_scales = nullptr;
  EXPECT_EQ(id_of(b, {R, 64}), "E_BACKEND_SHAPE");  // NVFP4 without block scales
  b = s->bytes;
  b.shards[0].element_pitch = 8;
  EXPECT_EQ(id_of(b, {R, 64}), "E_BACKEND_SHAPE");  // pitch below the row's 32 bytes
  b = s->bytes;
  b.cols = 24;
  EXPECT_EQ(id_of(b, {R, 24}), "E_BACKEND_SHAPE");  // NVFP4 rows must be whole 16-element blocks
  b = s->bytes;
  b.format = FormatId::FP8_BLOCK;
  EXPECT_EQ(id_of(b, {R, 64}), "E_BACKEND_SHAPE");  // no tile sizes
}

// ---- timing
// --------------------------------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// Fills `bytes` of `mem` with random E4M3 bytes (never the 0x7F/0xFF NaN codes) on every core.
void fill_e4m3(uint8_t* mem, uint64_t bytes) {
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([=] {
      const uint64_t a = bytes / threads * t, b = t + 1 == threads ? bytes : bytes / threads * (t + 1);
      uint64_t x = 0x9E3779B97F4A7C15ull * (t + 1);
      for (uint64_t i = a; i < b; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint64_t w = x & 0x7E7E7E7E7E7E7E7Eull;
        std::memcpy(mem + i, &w, std::min<uint64_t>(8, b - i));
      }
    });
  for (auto& th : pool) th.join();
}

// Times gathers of n random rows of an FP8_TENSOR table (elements at base, packed rows of `cols` bytes):
// gather + synchronize, optionally after a prefetch_rows issued `work_ms` earlier (the forward it overlaps).
// Then checks one more gather against the CPU decoder.
void time_gathers(cuda::CudaBackend& be, const Weight& t, const uint8_t* base, float scale, size_t n,
                  int iters, bool prefetch, double work_ms, std::mt19937& rng, const char* label,
                  int warmup = 3) {
  using clk = std::chrono::steady_clock;
  const int64_t cols = t.cols();
  std::uniform_int_distribution<int64_t> d(0, t.rows() - 1);
  auto random_ids = [&] {
    std::vector<int64_t> v(n);
    for (auto& x : v) x = d(rng);
    return v;
  };
  Tensor out = be.alloc({static_cast<int64_t>(n), cols});
  std::vector<double> ms;
  for (int i = -warmup; i < iters; ++i) {
    const std::vector<int64_t> ids = random_ids();
    if (prefetch) {
      be.prefetch_rows(t, ids);
      const auto until = clk::now() + std::chrono::microseconds(static_cast<int64_t>(work_ms * 1000));
      while (clk::now() < until) {
      }
    }
    const auto a = clk::now();
    be.gather_rows(out, t, ids);
    be.synchronize();
    if (i >= 0) ms.push_back(std::chrono::duration<double, std::milli>(clk::now() - a).count());
  }
  std::printf(
      "[bench] %s: gather %6zu rows (%8.1f KiB)%s: median %.3f ms, p90 %.3f ms, max %.3f ms over %d\n", label,
      n, n * cols / 1024.0, prefetch ? " after prefetch" : "               ", median(ms), pct(ms, 0.9),
      pct(ms, 1.0), iters);
  const std::vector<int64_t> ids = random_ids();
  const std::vector<float> got = gather(be, t, ids);
  WeightBytes w;
  w.format = FormatId::FP8_TENSOR;
  w.main_dtype = DType::F8_E4M3;
  w.global_dtype = DType::F32;
  w.rows = 1;
  w.cols = static_cast<uint64_t>(cols);
  w.global_scale = {reinterpret_cast<const uint8_t*>(&scale), 4};
  std::vector<float> want(n * cols);
  for (size_t i = 0; i < n; ++i) {
    w.main = {base + ids[i] * cols, static_cast<size_t>(cols)};
    decode_rows(w, 0, 1, &want[i * cols]);
  }
  EXPECT_EQ(first_diff(got, want), -1) << label;
}

// Gathers from an FP8 table of BLOOMERY_HOST_TABLE_BENCH_ROWS × 160 (the NVIDIA export's form; 320001536 rows
// is the shipped 47.7 GiB table) in 128 shards of one host allocation, filled with random E4M3 bytes.
TEST_F(HostTableTest, BenchGatherFromFullSizeTable) {
  const char* env = std::getenv("BLOOMERY_HOST_TABLE_BENCH_ROWS");
  if (!env || !*env) GTEST_SKIP() << "set BLOOMERY_HOST_TABLE_BENCH_ROWS (e.g. 320001536) to time gathers";
  const uint64_t rows = std::stoull(env), cols = 160, shards = 128, per = (rows + shards - 1) / shards;
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<uint8_t[]> mem(new uint8_t[rows * cols]);
  fill_e4m3(mem.get(), rows * cols);
  const double fill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cuda::HostTableBytes b;
  b.format = FormatId::FP8_TENSOR;
  b.cols = cols;
  b.global = 0.0625f;
  for (uint64_t s = 0; s * per < rows; ++s) {
    cuda::HostTableShard hs;
    hs.rows = std::min(per, rows - s * per);
    hs.elements = mem.get() + s * per * cols;
    b.shards.push_back(hs);
  }
  b.owner = mem;
  Weight t = cuda::make_host_table(*gpu_, "ple", {static_cast<int64_t>(rows), static_cast<int64_t>(cols)}, b);
  std::printf("[bench] table %llu x %llu FP8 = %.2f GiB in %zu shards, filled in %.1f s\n",
              static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols),
              rows * cols / 1073741824.0, b.shards.size(), fill_s);
  time_gathers(*gpu_, t, mem.get(), b.global, 16, 300, false, 0, rng_, "memory");
  time_gathers(*gpu_, t, mem.get(), b.global, 16, 300, true, 2.0, rng_, "memory");
  time_gathers(*gpu_, t, mem.get(), b.global, 4096 * 16, 20, false, 0, rng_, "memory");
  time_gathers(*gpu_, t, mem.get(), b.global, 4096 * 16, 20, true, 100.0, rng_, "memory");
  const cuda::HostTableStats st = cuda::host_table_stats(t);
  std::printf("[bench] %llu gathers, %llu prefetch hits, %.1f MiB sent\n",
              static_cast<unsigned long long>(st.gathers), static_cast<unsigned long long>(st.prefetch_hits),
              st.bytes_copied / 1048576.0);
}

// The same from a FILE mapped read-only (the default placement of a checkpoint's table) whose pages were
// dropped from the page cache first (posix_fadvise DONTNEED), so gathers fault rows in from disk.
// BLOOMERY_HOST_TABLE_BENCH_FILE_ROWS rows × 160, written under /tmp (skipped when unset).
TEST_F(HostTableTest, BenchGatherFromColdMappedFile) {
  const char* env = std::getenv("BLOOMERY_HOST_TABLE_BENCH_FILE_ROWS");
  if (!env || !*env)
    GTEST_SKIP() << "set BLOOMERY_HOST_TABLE_BENCH_FILE_ROWS to time gathers from a cold file";
  const uint64_t rows = std::stoull(env), cols = 160, bytes = rows * cols;
  const std::string path = "/tmp/bloomery_host_table_bench.bin";
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<uint8_t> chunk(64ull << 20);
    fill_e4m3(chunk.data(), chunk.size());
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    for (uint64_t at = 0; at < bytes; at += chunk.size()) {
      chunk[at / chunk.size() % chunk.size()] ^= 0x10;  // chunks differ a little (never into a NaN code)
      const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk.size(), bytes - at));
      ASSERT_EQ(std::fwrite(chunk.data(), 1, len, f), len);
    }
    std::fclose(f);
  }
  const int fd = open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED);
  madvise(p, bytes, MADV_RANDOM);  // as checkpoint_table.cc maps a checkpoint's shards
  std::shared_ptr<const void> owner(p, [bytes, fd, path](const void* q) {
    munmap(const_cast<void*>(q), bytes);
    close(fd);
    unlink(path.c_str());
  });
  std::printf("[bench] file %.2f GiB written and dropped from the page cache in %.1f s\n",
              bytes / 1073741824.0,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  cuda::HostTableBytes b;
  b.format = FormatId::FP8_TENSOR;
  b.cols = cols;
  b.global = 0.0625f;
  b.shards.push_back({rows, p, 0, nullptr, 0});
  b.owner = owner;
  b.file_backed = true;
  Weight t = cuda::make_host_table(*gpu_, "ple", {static_cast<int64_t>(rows), static_cast<int64_t>(cols)}, b);
  const auto* base = static_cast<const uint8_t*>(p);
  time_gathers(*gpu_, t, base, b.global, 16, 100, false, 0, rng_, "cold file");
  time_gathers(*gpu_, t, base, b.global, 16, 100, true, 2.0, rng_, "cold file");
  time_gathers(*gpu_, t, base, b.global, 4096 * 16, 2, false, 0, rng_, "cold file", 0);
  time_gathers(*gpu_, t, base, b.global, 4096 * 16, 2, true, 100.0, rng_, "cold file", 0);
}

// The host-decoding fallback (stored forms the packed path does not read): rows come from a decoder as f32.
TEST_F(HostTableTest, DecodedFallbackRows) {
  const uint64_t rows = 1000, cols = 48;
  auto row_value = [](uint64_t r, uint64_t c) {
    return static_cast<float>(r) * 0.5f - static_cast<float>(c);
  };
  cuda::HostTableBytes b;
  b.cols = cols;
  auto t = std::make_shared<cuda::host::HostTable>(
      "fallback", rows, b,
      [&](uint64_t row0, uint64_t n, float* dst) {
        for (uint64_t r = 0; r < n; ++r)
          for (uint64_t c = 0; c < cols; ++c) dst[r * cols + c] = row_value(row0 + r, c);
      },
      false);
  std::vector<int64_t> ids = {0, 999, 5, 5, 500};
  std::uniform_int_distribution<int64_t> d(0, rows - 1);
  for (int i = 0; i < 3000; ++i) ids.push_back(d(rng_));
  Tensor out = gpu_->alloc({static_cast<int64_t>(ids.size()), static_cast<int64_t>(cols)});
  t->prefetch(ids, 0);  // a no-op for the fallback (its decoder is not thread-safe)
  t->gather(out.f32(), ids, gpu_->stream());
  const std::vector<float> got = gpu_->download(out);
  std::vector<float> want(ids.size() * cols);
  for (size_t i = 0; i < ids.size(); ++i)
    for (uint64_t c = 0; c < cols; ++c) want[i * cols + c] = row_value(static_cast<uint64_t>(ids[i]), c);
  EXPECT_EQ(first_diff(got, want), -1);
  EXPECT_EQ(t->stats().prefetch_hits, 0u);
  EXPECT_EQ(t->stats().prefetches, 0u);
}

}  // namespace
}  // namespace bloomery
