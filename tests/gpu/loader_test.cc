// The CUDA parallel loader (backend/cuda/loader): every fixture folder through the parallel path gives the
// same device bytes as the one-weight path; a refused plan takes no device memory; a bad scale byte is
// refused naming its tensor with nothing left allocated; and the load throughput on a synthetic multi-GiB
// folder, cold (page cache dropped), parallel O_DIRECT path against the one-weight path.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backend/cuda/loader/parallel_loader.h"
#include "backend_util.h"
#include "formats/classify.h"
#include "formats/weight_decode.h"
#include "models/model_loader.h"

#include "../common/fixture_folders.h"

namespace bloomery::gputest {
namespace {

namespace fs = std::filesystem;
// The fixtures of the checkout the binary runs in (the GPU machine's copy lives elsewhere than the build's).
const fs::path kModels = testing_fixtures::models_root();

using testing_fixtures::fixture_folders;

uint64_t free_device_bytes() {
  size_t f = 0, t = 0;
  EXPECT_EQ(cudaMemGetInfo(&f, &t), cudaSuccess);
  return f;
}

std::vector<uint8_t> download(const void* p, uint64_t n) {
  std::vector<uint8_t> v(n);
  if (n) EXPECT_EQ(cudaMemcpy(v.data(), p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// Meaningful device bytes of a weight's main buffer and scale buffer, from its format and shape alone.
std::pair<uint64_t, uint64_t> device_sizes(const cuda::DeviceWeight& d) {
  const uint64_t n = d.rows * d.cols;
  switch (d.format) {
    case FormatId::BF16:
    case FormatId::F16:
      return {n * 2, 0};
    case FormatId::F32:
      return {n * 4, 0};
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
      return {n / 2, n / 16};
    case FormatId::MXFP4:
      return {n / 2, n / 32};
    case FormatId::MXFP8:
      return {n, n / 32};
    case FormatId::FP8_TENSOR:
      return {n, 0};
    case FormatId::FP8_CHANNEL:
      return {n, d.rows * 4};
    case FormatId::FP8_BLOCK:
      return {n, (d.rows + d.block_n - 1) / d.block_n * ((d.cols + d.block_k - 1) / d.block_k) * 4};
    default:
      return {0, 0};
  }
}

struct BulkRun {
  std::unique_ptr<LoadedModel> lm;
  std::vector<WeightJob> jobs;
  std::vector<Weight> weights;
  LoadStats stats;
  uint64_t progress_done = 0;
};

BulkRun run_bulk(cuda::CudaBackend& be, const fs::path& dir, int threads = 0) {
  BulkRun r;
  LoadOptions o;
  o.progress = ProgressMode::Quiet;
  r.lm = prepare_model(dir, "cuda", be.memory_info(), o);
  for (const WeightJob& j : r.lm->jobs)
    if (!j.streamed) r.jobs.push_back(j);
  Progress progress("t", r.lm->plan.read_bytes, ProgressMode::Quiet);
  BulkLoadContext ctx{*r.lm->source, r.jobs, r.lm->warnings, progress, r.stats, threads};
  BulkLoadFn fn = find_bulk_loader("cuda");
  EXPECT_EQ(fn, &cuda::parallel_load);  // registered by the backend library
  r.weights = fn(be, ctx);
  r.progress_done = progress.done();
  return r;
}

// Every record of a folder that has no model config (the synthetic throughput folder), loaded in bulk.
struct RecordRun {
  Warnings warnings;
  std::unique_ptr<TensorSource> source;
  ResolvedCheckpoint checkpoint;
  std::vector<WeightJob> jobs;
  std::vector<Weight> weights;
  LoadStats stats;
};

std::unique_ptr<RecordRun> open_records(const fs::path& dir) {
  auto r = std::make_unique<RecordRun>();
  r->source = std::make_unique<TensorSource>(TensorSource::open(dir, r->warnings));
  r->checkpoint = resolve_checkpoint(*r->source, r->warnings);
  for (const WeightRecord& rec : r->checkpoint.weights) {
    WeightJob j;
    j.name = rec.name;
    j.record = &rec;
    j.shape.assign(rec.shape.begin(), rec.shape.end());
    j.read_bytes = rec.stored_bytes();
    r->jobs.push_back(std::move(j));
  }
  return r;
}

TEST(Loader, EveryFixtureFolderGivesTheSameDeviceBytesAsTheOneWeightPath) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaBackend be(0);
  for (const fs::path& dir : fixture_folders()) {
    SCOPED_TRACE(dir.filename().string());
    for (int threads : {1, 4}) {
      BulkRun r = run_bulk(be, dir, threads);
      ASSERT_EQ(r.weights.size(), r.jobs.size());
      EXPECT_EQ(r.progress_done, r.lm->plan.read_bytes);
      int compared = 0;
      for (size_t i = 0; i < r.jobs.size(); ++i) {
        const WeightJob& j = r.jobs[i];
        SCOPED_TRACE(j.name);
        Warnings w;
        Weight old = be.load_weight(*r.lm->source, *j.record, j.shape, w);
        const Weight& neu = r.weights[i];
        EXPECT_EQ(neu.name(), old.name());
        EXPECT_EQ(neu.shape(), old.shape());
        const cuda::DeviceWeight &a = cuda::device_weight(neu, "test"), &b = cuda::device_weight(old, "test");
        ASSERT_EQ(a.format, b.format);
        EXPECT_EQ(a.rows, b.rows);
        EXPECT_EQ(a.cols, b.cols);
        EXPECT_EQ(std::memcmp(&a.global, &b.global, sizeof a.global), 0);
        EXPECT_EQ(a.block_n, b.block_n);
        EXPECT_EQ(a.block_k, b.block_k);
        const auto [main, scales] = device_sizes(a);
        EXPECT_EQ(download(a.data, main), download(b.data, main));
        if (scales) {
          const void* sa = a.scale_f32 ? static_cast<const void*>(a.scale_f32) : a.block_scales;
          const void* sb = b.scale_f32 ? static_cast<const void*>(b.scale_f32) : b.block_scales;
          ASSERT_NE(sa, nullptr);
          EXPECT_EQ(download(sa, scales), download(sb, scales));
        }
        EXPECT_EQ(neu.dense().defined(), old.dense().defined());
        if (neu.dense().defined()) EXPECT_EQ(be.download(neu.dense()), be.download(old.dense()));
        ++compared;
      }
      EXPECT_GT(compared, 10);
      std::printf("[loader] %-28s threads %d: %zu weights, %llu bytes read, %s\n",
                  dir.filename().string().c_str(), threads, r.jobs.size(),
                  static_cast<unsigned long long>(r.progress_done), r.stats.path.c_str());
    }
  }
}

TEST(Loader, RefusedPlanTakesNoDeviceMemory) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaBackend be(0);
  const fs::path dir = kModels / "qwen3_next-modelopt-mixed";
  be.synchronize();
  const uint64_t before = free_device_bytes();
  LoadOptions o;
  o.progress = ProgressMode::Quiet;
  o.bulk = true;
  o.plan.budget_bytes = 1 << 20;  // 1 MiB: the weights alone are more
  bool printed = false;
  o.on_plan = [&](const MemoryPlan&) { printed = true; };
  try {
    load_model(dir, be, o);
    FAIL() << "expected E_MEMORY_PLAN";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_MEMORY_PLAN") << e.what();
    std::printf("[loader] refusal: %s\n", e.what());
  }
  EXPECT_TRUE(printed);
  EXPECT_EQ(free_device_bytes(), before);
  // Against the card's real free memory: a context × sequences whose state cannot fit.
  LoadOptions big;
  big.progress = ProgressMode::Quiet;
  big.bulk = true;
  big.plan.context = int64_t(1) << 24;
  big.plan.sequences = 4096;
  std::unique_ptr<LoadedModel> probe = prepare_model(dir, "cuda", be.memory_info(), big);
  if (probe->plan.state_known) {
    EXPECT_THROW(load_model(dir, be, big), Error);
    EXPECT_EQ(free_device_bytes(), before);
  }
}

TEST(Loader, ABadScaleByteIsRefusedByNameAndNothingStaysAllocated) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  // A copy of an NVFP4 folder with one E4M3 block scale turned into NaN (0x7F).
  const fs::path tmp = fs::temp_directory_path() / ("bloomery-loader-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(kModels / "qwen3_next-modelopt-mixed", tmp, fs::copy_options::recursive);
  std::string victim;
  {
    Warnings w;
    TensorSource src = TensorSource::open(tmp, w);
    ResolvedCheckpoint ck = resolve_checkpoint(src, w);
    for (const WeightRecord& r : ck.weights)
      if (r.format == FormatId::NVFP4 && r.block_scale && r.block_scale->nbytes > 8) {
        victim = r.name;
        std::fstream f(src.file(r.block_scale->file_index).path(),
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(static_cast<std::streamoff>(r.block_scale->offset + r.block_scale->nbytes - 1));
        f.put(static_cast<char>(0x7F));
        break;
      }
  }
  ASSERT_FALSE(victim.empty()) << "no NVFP4 weight in the fixture";
  cuda::CudaBackend be(0);
  be.synchronize();
  const uint64_t before = free_device_bytes();
  LoadOptions o;
  o.progress = ProgressMode::Quiet;
  o.bulk = true;
  try {
    load_model(tmp, be, o);
    ADD_FAILURE() << "expected E_NVFP4_SCALE_NAN";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_NVFP4_SCALE_NAN") << e.what();
    EXPECT_NE(std::string(e.what()).find(victim), std::string::npos) << e.what();
  }
  be.synchronize();
  EXPECT_EQ(free_device_bytes(), before);
  fs::remove_all(tmp);
}

// ---- throughput -------------------------------------------------------------------------------------------

void drop_cache(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// A folder of `shards` safetensors files of BF16 [8192, 4096] tensors (64 MiB each), `gib` GiB in all.
fs::path write_synthetic(const fs::path& dir, int gib, int shards) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  const uint64_t rows = 8192, cols = 4096, tbytes = rows * cols * 2;
  const int tensors = gib * 16;
  std::vector<uint16_t> block(rows * cols);
  for (size_t i = 0; i < block.size(); ++i)
    block[i] = static_cast<uint16_t>(0x3C00 + (i * 2654435761u >> 20) % 512);
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < shards; ++s) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards);
    nlohmann::json h = nlohmann::json::object();
    uint64_t off = 0;
    std::vector<std::string> names;
    for (int t = s; t < tensors; t += shards) {
      const std::string tn = fmt::format("layers.{}.mlp.down_proj.weight", t);
      h[tn] = {{"dtype", "BF16"}, {"shape", {rows, cols}}, {"data_offsets", {off, off + tbytes}}};
      index["weight_map"][tn] = name;
      off += tbytes;
      names.push_back(tn);
    }
    std::string hs = h.dump();
    hs.resize((hs.size() + 8 + 4095) / 4096 * 4096 - 8,
              ' ');  // data starts 4 KiB-aligned, like big producers
    std::ofstream f(dir / name, std::ios::binary);
    const uint64_t hl = hs.size();
    f.write(reinterpret_cast<const char*>(&hl), 8);
    f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    for (size_t k = 0; k < names.size(); ++k) {
      block[k % block.size()] ^= 1;  // tensors differ
      f.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(tbytes));
    }
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump();
  return dir;
}

TEST(Loader, ThroughputOnASyntheticFolder) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const char* g = std::getenv("BLOOMERY_LOADER_BENCH_GIB");
  const int gib = g ? std::atoi(g) : 0;
  if (gib <= 0) GTEST_SKIP() << "set BLOOMERY_LOADER_BENCH_GIB";
  const char* d = std::getenv("BLOOMERY_LOADER_BENCH_DIR");
  const fs::path dir = fs::path(d ? d : ".") / "loader-bench";
  fs::remove_all(dir);
  auto w0 = std::chrono::steady_clock::now();
  write_synthetic(dir, gib, 4);
  const double wsec = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  const double bytes = double(gib) * double(uint64_t(1) << 30);
  std::printf("[loader] synthetic %d GiB in %zu shards written in %.1f s\n", gib, files.size(), wsec);

  cuda::CudaBackend be(0);
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& f : files) drop_cache(f);
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<RecordRun> r = open_records(dir);
    uint64_t total = 0;
    for (const WeightJob& j : r->jobs) total += j.read_bytes;
    Progress progress("loading synthetic", total, ProgressMode::Plain, stdout, 1.0);
    BulkLoadContext ctx{*r->source, r->jobs, r->warnings, progress, r->stats, 0};
    r->weights = cuda::parallel_load(be, ctx);
    be.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    progress.finish();
    std::printf("[loader] parallel path (cold cache) pass %d: %.2f s, %.2f GB/s, %s, %llu bytes direct\n",
                pass, s, bytes / s / 1e9, r->stats.path.c_str(),
                static_cast<unsigned long long>(r->stats.direct_bytes));
    ASSERT_EQ(r->weights.size(), size_t(gib) * 16);
    EXPECT_EQ(progress.done(), total);
    // Spot check: the last row of one tensor equals the file's bytes.
    const size_t k = r->jobs.size() / 2;
    const WeightJob& j = r->jobs[k];
    Warnings w;
    LoadedWeight lw = load_weight_rows(*r->source, *j.record, j.record->rows() - 1, 1, w);
    const cuda::DeviceWeight& dw = cuda::device_weight(r->weights[k], "test");
    const auto* last = static_cast<const uint8_t*>(dw.data) + (dw.rows - 1) * dw.cols * 2;
    EXPECT_EQ(download(last, dw.cols * 2), lw.main);
  }
  {
    for (const auto& f : files) drop_cache(f);
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<RecordRun> r = open_records(dir);
    for (const WeightJob& j : r->jobs)
      r->weights.push_back(be.load_weight(*r->source, *j.record, j.shape, r->warnings));
    be.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[loader] one-weight path (cold cache): %.2f s, %.2f GB/s\n", s, bytes / s / 1e9);
  }
  fs::remove_all(dir);
}

// The largest fixture folder through load_model (plan, bulk load, bind), timed.
TEST(Loader, LargestFixtureFolderLoadTime) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  fs::path largest;
  uintmax_t most = 0;
  for (const fs::path& dir : fixture_folders()) {
    uintmax_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") n += e.file_size();
    if (n > most) most = n, largest = dir;
  }
  cuda::CudaBackend be(0);
  BulkRun warm = run_bulk(be, largest);  // first touch of the folder (page cache, CUDA context)
  const auto t0 = std::chrono::steady_clock::now();
  BulkRun r = run_bulk(be, largest);
  be.synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[loader] largest fixture %s (%ju bytes of shards): prepare + parallel load %.3f s; plan: %s\n",
              largest.filename().string().c_str(), most, s, r.lm->plan.summary().c_str());
}

}  // namespace
}  // namespace bloomery::gputest
