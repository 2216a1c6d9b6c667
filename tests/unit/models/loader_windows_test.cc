// The host side of the CUDA parallel loader (backend/cuda/loader/window_plan.h, direct_reader.h), run on the
// CPU: every fixture folder's weights split into windows, read with O_DIRECT (or the buffered fallback),
// validated and staged, then assembled into a host image of the device arena — which must equal the format
// layer's own whole-weight read (and its exact f32 widening of FP8 scale grids) byte for byte.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "backend/cuda/loader/window_plan.h"

#include "../../common/fixture_folders.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
const fs::path kModels = testing_fixtures::models_root();

using testing_fixtures::fixture_folders;

struct AlignedBuffer {
  explicit AlignedBuffer(uint64_t n)
      : p(static_cast<uint8_t*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {}
  ~AlignedBuffer() { std::free(p); }
  uint8_t* p;
};

std::vector<WeightJob> loaded_jobs(const LoadedModel& lm) {
  std::vector<WeightJob> jobs;
  for (const WeightJob& j : lm.jobs)
    if (!j.streamed) jobs.push_back(j);
  return jobs;
}

TEST(LoaderWindows, EveryFixtureAssemblesToTheFormatLayersBytes) {
  for (const fs::path& dir : fixture_folders()) {
    SCOPED_TRACE(dir.filename().string());
    std::unique_ptr<LoadedModel> lm = prepare_model(dir, "cuda", Backend::MemoryInfo{});
    const std::vector<WeightJob> jobs = loaded_jobs(*lm);
    std::vector<cuda::Item> items = cuda::plan_items(*lm->source, jobs);
    const uint64_t arena = cuda::assign_arena(items);
    // The arena plus the small f32 copies is exactly the plan's weight total.
    uint64_t copies = 0, max_unit = 0, read = 0;
    for (const cuda::Item& it : items) {
      copies += it.layout.dense_copy;
      max_unit = std::max(max_unit, cuda::unit_bytes(it));
      read += it.job->read_bytes;
    }
    EXPECT_EQ(arena + copies, lm->plan.weights_total);
    int kinds[4] = {}, f32 = 0, indirect = 0;
    for (const cuda::Item& it : items) {
      ++kinds[static_cast<int>(it.scale)];
      f32 += it.layout.decode_f32;
      indirect += !it.direct && !it.layout.decode_f32;
    }
    std::printf(
        "[loader] %s: %zu weights: %d no scales, %d raw scales, %d FP8 channel, %d FP8 block, %d decoded "
        "to f32, %d through the format layer (CSF / split)\n",
        dir.filename().string().c_str(), items.size(), kinds[0], kinds[1], kinds[2], kinds[3], f32, indirect);
    for (uint64_t usable : {uint64_t(64) << 10, uint64_t(16) << 20}) {
      SCOPED_TRACE(usable);
      const std::vector<cuda::Window> windows = cuda::make_windows(items, usable);
      std::vector<uint8_t> image(arena, 0xCD);
      AlignedBuffer slot(std::max(usable, max_unit) + cuda::kSlotSlack);
      int notes = 0;
      cuda::DirectReader reader(*lm->source, [&](const std::string&) { ++notes; });
      Warnings w;
      uint64_t progress = 0;
      std::vector<uint64_t> rows_seen(items.size(), 0);
      for (const cuda::Window& win : windows) {
        const cuda::Item& it = items[win.item];
        EXPECT_EQ(win.r0 % it.unit, 0u) << it.rec->name;
        EXPECT_EQ(win.r0, rows_seen[win.item]) << it.rec->name;  // in order, no gap, no overlap
        rows_seen[win.item] += win.n;
        const cuda::Filled f = cuda::fill_window(*lm->source, items, win, reader, slot.p, w);
        ASSERT_LE(f.main_dev + f.main_len, arena);
        std::memcpy(image.data() + f.main_dev, f.main, f.main_len);
        if (f.scales_len) {
          ASSERT_LE(f.scales_dev + f.scales_len, arena);
          std::memcpy(image.data() + f.scales_dev, f.scales, f.scales_len);
        }
        progress += win.progress;
      }
      EXPECT_EQ(progress, read);
      EXPECT_GE(windows.size(), items.size());
      EXPECT_LE(notes, 1);
      EXPECT_EQ(reader.direct_bytes() + reader.buffered_bytes() > 0, true);
      for (size_t i = 0; i < items.size(); ++i) {
        const cuda::Item& it = items[i];
        const WeightRecord& rec = *it.rec;
        SCOPED_TRACE(rec.name);
        EXPECT_EQ(rows_seen[i], rec.rows());
        Warnings w2;
        if (it.layout.decode_f32) {
          const std::vector<float> want = decode_weight(*lm->source, rec, w2);
          ASSERT_EQ(want.size() * 4, it.layout.main);
          EXPECT_EQ(std::memcmp(image.data() + it.main_off, want.data(), it.layout.main), 0);
          continue;
        }
        const LoadedWeight lw = load_weight_rows(*lm->source, rec, 0, rec.rows(), w2);
        ASSERT_EQ(lw.main.size(), it.layout.main);
        EXPECT_EQ(std::memcmp(image.data() + it.main_off, lw.main.data(), lw.main.size()), 0);
        if (it.scale == cuda::ScaleKind::Raw) {
          ASSERT_EQ(lw.block_scale.size(), it.layout.scales);
          EXPECT_EQ(std::memcmp(image.data() + it.scale_off, lw.block_scale.data(), lw.block_scale.size()),
                    0);
        } else if (it.scale != cuda::ScaleKind::None) {
          const uint64_t count = it.layout.scales / 4;
          std::vector<float> want(count);
          for (uint64_t k = 0; k < count; ++k)
            want[k] = scale_value(lw.bytes.scale_dtype, lw.block_scale.data(), k);
          EXPECT_EQ(std::memcmp(image.data() + it.scale_off, want.data(), count * 4), 0);
        }
      }
    }
  }
}

TEST(LoaderWindows, DirectReadsEqualBufferedReadsAtAnyOffset) {
  const fs::path dir = kModels / "qwen3_next-bf16";
  Warnings w;
  TensorSource src = TensorSource::open(dir, w);
  std::string note;
  cuda::DirectReader reader(src, [&](const std::string& s) { note = s; });
  std::mt19937_64 rng(7);
  AlignedBuffer region(cuda::DirectReader::region_bytes(300000));
  for (int k = 0; k < 200; ++k) {
    const uint32_t file = static_cast<uint32_t>(rng() % src.file_count());
    const uint64_t size = src.file(file).size();
    const uint64_t len = std::min<uint64_t>(size, 1 + rng() % 300000);
    const uint64_t off = rng() % (size - len + 1);
    std::vector<uint8_t> want(len);
    src.file(file).read(off, len, want.data());
    const uint8_t* got = reader.read(file, off, len, region.p);
    ASSERT_GE(got, region.p);
    ASSERT_LE(got + len, region.p + cuda::DirectReader::region_bytes(len));
    ASSERT_EQ(std::memcmp(got, want.data(), len), 0)
        << "file " << file << " offset " << off << " len " << len;
  }
  // The whole tail of a file (O_DIRECT past the end returns short).
  const uint64_t size = src.file(0).size();
  std::vector<uint8_t> tail(777);
  src.file(0).read(size - 777, 777, tail.data());
  EXPECT_EQ(std::memcmp(reader.read(0, size - 777, 777, region.p), tail.data(), 777), 0);
  std::printf("[loader] direct %llu bytes, buffered %llu bytes%s%s\n",
              static_cast<unsigned long long>(reader.direct_bytes()),
              static_cast<unsigned long long>(reader.buffered_bytes()), note.empty() ? "" : "; ",
              note.c_str());
  EXPECT_TRUE(reader.direct_bytes() > 0 || !note.empty());  // either direct, or it said why not
  // Past the end: E_IO_READ naming the file.
  try {
    reader.read(0, size - 10, 100, region.p);
    FAIL() << "expected E_IO_READ";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_IO_READ");
    EXPECT_NE(std::string(e.what()).find(src.display_path(0)), std::string::npos) << e.what();
  }
}

TEST(LoaderWindows, ANaNBlockScaleIsRefusedNamingTheTensor) {
  const fs::path tmp = fs::temp_directory_path() / ("bloomery-loader-cpu-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::copy(kModels / "qwen3_next-modelopt-mixed", tmp, fs::copy_options::recursive);
  std::unique_ptr<LoadedModel> lm = prepare_model(tmp, "cuda", Backend::MemoryInfo{});
  std::vector<WeightJob> jobs = loaded_jobs(*lm);
  std::vector<cuda::Item> items = cuda::plan_items(*lm->source, jobs);
  size_t victim = items.size();
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].direct && items[i].scale == cuda::ScaleKind::Raw &&
        items[i].rec->format == FormatId::NVFP4) {
      victim = i;
      break;
    }
  ASSERT_LT(victim, items.size());
  const TensorEntry& s = *items[victim].rec->block_scale;
  {
    std::fstream f(lm->source->file(s.file_index).path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(s.offset + s.nbytes - 1));
    f.put(static_cast<char>(0x7F));  // E4M3 NaN in the last block of the last row
  }
  cuda::assign_arena(items);
  const std::vector<cuda::Window> windows = cuda::make_windows(items, uint64_t(1) << 20);
  AlignedBuffer slot((uint64_t(1) << 20) + cuda::kSlotSlack);
  cuda::DirectReader reader(*lm->source, nullptr);
  Warnings w;
  bool refused = false;
  for (const cuda::Window& win : windows) {
    if (win.item != victim) continue;
    try {
      cuda::fill_window(*lm->source, items, win, reader, slot.p, w);
    } catch (const Error& e) {
      EXPECT_EQ(e.id(), "E_NVFP4_SCALE_NAN");
      EXPECT_NE(std::string(e.what()).find(items[victim].rec->name), std::string::npos) << e.what();
      refused = true;
    }
  }
  EXPECT_TRUE(refused);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace bloomery
