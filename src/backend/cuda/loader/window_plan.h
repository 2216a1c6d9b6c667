// The host side of the parallel loader, free of CUDA so CPU tests can run it: each weight's plan (the format
// layer's header checks on a zero-row window, its layout on the card, how its scales are handled), its split
// into windows of whole rows that fit one staging slot, and the filling of one slot (read, validate, widen).
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cuda/loader/direct_reader.h"
#include "formats/weight_decode.h"
#include "models/memory_plan.h"
#include "models/model_loader.h"

namespace bloomery::cuda {

// Worst-case alignment slack of the three regions of a slot (main, raw scales, widened scales).
constexpr uint64_t kSlotSlack = 3 * 3 * kDirectAlign;

inline uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}
inline uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

enum class ScaleKind { None, Raw, WidenChannel, WidenBlock };

// One weight: how it is read and where it goes in the arena.
struct Item {
  const WeightJob* job = nullptr;
  const WeightRecord* rec = nullptr;
  LoadedWeight head;   // the zero-row window: owns the global / input scale bytes the header points to
  WeightBytes header;  // the whole weight's header (rows = R), global / input spans into `head`
  StoredLayout layout;
  PartSizes parts;
  bool direct = false;  // stored parts read by DirectReader (one main tensor, plain scales)
  ScaleKind scale = ScaleKind::None;
  uint64_t unit = 1;                     // window rows are a multiple of this (FP8 block: block_n)
  uint64_t dev_row = 0;                  // device bytes of one row of main
  uint64_t grid_cols = 0;                // FP8 block: scale grid columns
  uint64_t main_off = 0, scale_off = 0;  // arena offsets
  Where where;
};

struct Window {
  uint32_t item = 0;
  uint64_t r0 = 0, n = 0;
  uint64_t progress = 0;  // this window's share of the weight's checkpoint bytes
};

// What a reader left in a slot for the main thread.
struct Filled {
  size_t window = 0;
  const uint8_t* main = nullptr;
  uint64_t main_len = 0, main_dev = 0;
  const uint8_t* scales = nullptr;
  uint64_t scales_len = 0, scales_dev = 0;
};

// The f32 scale grid of an FP8 channel / block weight (exact widening), count elements from `bytes`.
inline void widen_scale_grid(DType t, const uint8_t* bytes, uint64_t count, float* out) {
  for (uint64_t i = 0; i < count; ++i) out[i] = scale_value(t, bytes, i);
}

inline bool plain_scales(FormatId f) {
  return f == FormatId::NVFP4 || f == FormatId::W4A16_NVFP4 || f == FormatId::NVFP4_CT ||
         f == FormatId::MXFP4 || f == FormatId::MXFP8;
}

// Everything but the bytes: header (the format layer's checks on a zero-row window), layout, scale handling.
inline Item plan_item(const TensorSource& src, const WeightJob& job, Warnings& scratch) {
  Item it;
  it.job = &job;
  it.rec = job.record;
  const WeightRecord& rec = *job.record;
  int64_t numel = 1;
  for (int64_t d : job.shape) numel *= d;
  it.where = Where{src.display_path(rec.main[0]->file_index), rec.name, {}};
  if (decodes_to_f32(rec)) {
    it.layout = stored_layout(rec, WeightBytes{}, numel);
    it.dev_row = rec.cols() * 4;
    return it;
  }
  it.head = load_weight_rows(src, rec, 0, 0, scratch);
  it.header = it.head.bytes;
  it.header.rows = rec.rows();
  it.header.main = it.header.block_scale = {};
  it.layout = stored_layout(rec, it.header, numel);
  it.parts = expected_part_sizes(it.header, it.where);
  it.dev_row = it.parts.main_row;
  const FormatId f = rec.format;
  if (plain_scales(f)) it.scale = ScaleKind::Raw;
  if (f == FormatId::FP8_CHANNEL) it.scale = ScaleKind::WidenChannel;
  if (f == FormatId::FP8_BLOCK) {
    it.scale = ScaleKind::WidenBlock;
    it.unit = static_cast<uint64_t>(rec.block_n);
    it.grid_cols = ceil_div(rec.cols(), static_cast<uint64_t>(rec.block_k));
  }
  it.direct = rec.main.size() == 1 && rec.scale_encoding != ScaleEncoding::NvFp4Csf &&
              rec.block_scale_shards.empty() && (!it.parts.block_scale || rec.block_scale);
  return it;
}

// Pinned bytes one unit of rows needs (main + raw scales + widened scales).
inline uint64_t unit_bytes(const Item& it) {
  const uint64_t main = it.unit * it.dev_row;
  const bool block = it.scale == ScaleKind::WidenBlock;
  const uint64_t raw = it.parts.block_scale ? (block ? 1 : it.unit) * it.parts.block_scale_row : 0;
  const uint64_t wide = it.scale == ScaleKind::WidenChannel ? it.unit * 4 : block ? it.grid_cols * 4 : 0;
  return main + raw + wide;
}

// Every job's plan (its header checks run here, before anything is allocated).
inline std::vector<Item> plan_items(const TensorSource& src, std::span<const WeightJob> jobs) {
  Warnings scratch;  // the header pass's warnings come again from the windows
  std::vector<Item> items;
  items.reserve(jobs.size());  // Items hold spans into their own LoadedWeight: no reallocation after this
  for (const WeightJob& j : jobs) items.push_back(plan_item(src, j, scratch));
  return items;
}

// Places every item's buffers in one arena (device_buffer_bytes each, as the memory plan counts them) and
// returns its size.
inline uint64_t assign_arena(std::vector<Item>& items) {
  uint64_t bytes = 0;
  for (Item& it : items) {
    it.main_off = bytes;
    bytes += device_buffer_bytes(it.layout.main);
    if (it.layout.scales) {
      it.scale_off = bytes;
      bytes += device_buffer_bytes(it.layout.scales);
    }
  }
  return bytes;
}

// Windows of every item, in file order (each shard read front to back); `usable` pinned bytes per window.
inline std::vector<Window> make_windows(const std::vector<Item>& items, uint64_t usable) {
  std::vector<uint32_t> order(items.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    const TensorEntry &a = *items[x].rec->main[0], &b = *items[y].rec->main[0];
    return a.file_index != b.file_index ? a.file_index < b.file_index : a.offset < b.offset;
  });
  std::vector<Window> windows;
  for (uint32_t i : order) {
    const Item& it = items[i];
    const uint64_t R = it.rec->rows();
    const uint64_t step = std::max<uint64_t>(1, usable / std::max<uint64_t>(1, unit_bytes(it))) * it.unit;
    const unsigned __int128 rb = it.job->read_bytes;
    for (uint64_t r0 = 0; r0 < R; r0 += step) {
      const uint64_t r1 = std::min(R, r0 + step);
      windows.push_back(Window{i, r0, r1 - r0, static_cast<uint64_t>(rb * r1 / R - rb * r0 / R)});
    }
  }
  return windows;
}

// Reads, validates and stages one window into `a` (a slot of at least the window's bytes + kSlotSlack,
// kDirectAlign-aligned). Returns where the main and scale bytes are and where they go in the arena.
inline Filled fill_window(const TensorSource& src_, const std::vector<Item>& items_, const Window& win,
                          DirectReader& reader_, uint8_t* a, Warnings& warnings) {
  const Item& it = items_[win.item];
  const WeightRecord& rec = *it.rec;
  Filled f;
  f.main_len = win.n * it.dev_row;
  f.main_dev = it.main_off + win.r0 * it.dev_row;
  if (it.layout.decode_f32) {  // a parameter kept as f32: the format layer decodes (and validates) it
    decode_weight_rows(src_, rec, win.r0, win.n, reinterpret_cast<float*>(a), warnings);
    f.main = a;
    return f;
  }
  const bool block = it.scale == ScaleKind::WidenBlock;
  const uint64_t g0 = block ? win.r0 / it.unit : win.r0;
  const uint64_t g1 = block ? ceil_div(win.r0 + win.n, it.unit) : win.r0 + win.n;
  const uint64_t raw_len = it.parts.block_scale ? (g1 - g0) * it.parts.block_scale_row : 0;
  uint8_t* b = a + DirectReader::region_bytes(f.main_len);
  uint8_t* c = b + DirectReader::region_bytes(raw_len);
  const uint8_t* raw = nullptr;
  if (it.direct) {
    const TensorEntry& m = *rec.main[0];
    f.main = reader_.read(m.file_index, m.offset + win.r0 * it.parts.main_row, f.main_len, a);
    if (raw_len) {
      const TensorEntry& s = *rec.block_scale;
      raw = reader_.read(s.file_index, s.offset + g0 * it.parts.block_scale_row, raw_len, b);
    }
    // The format layer's validation of this window, as load_weight_rows runs it.
    WeightBytes wb = it.header;
    wb.rows = win.n;
    wb.main = {f.main, f.main_len};
    wb.block_scale = {raw, raw_len};
    validate_weight_bytes(wb, it.where, warnings);
  } else {  // CSF-coded scales, split tables: the format layer reads, decodes and validates the window
    LoadedWeight lw = load_weight_rows(src_, rec, win.r0, win.n, warnings);
    if (lw.first_row != 0 || lw.main.size() != f.main_len || lw.block_scale.size() != raw_len)
      raise("E_INTERNAL_LOADER", it.where, fmt::format("a window of {} + {} bytes", f.main_len, raw_len),
            fmt::format("{} + {} bytes (first row {})", lw.main.size(), lw.block_scale.size(), lw.first_row));
    std::memcpy(a, lw.main.data(), f.main_len);
    if (raw_len) std::memcpy(b, lw.block_scale.data(), raw_len);
    f.main = a;
    raw = b;
  }
  switch (it.scale) {
    case ScaleKind::None:
      break;
    case ScaleKind::Raw:
      f.scales = raw;
      f.scales_len = raw_len;
      f.scales_dev = it.scale_off + g0 * it.parts.block_scale_row;
      break;
    case ScaleKind::WidenChannel:
    case ScaleKind::WidenBlock: {
      const uint64_t per = block ? it.grid_cols : 1, count = (g1 - g0) * per;
      widen_scale_grid(it.header.scale_dtype, raw, count, reinterpret_cast<float*>(c));
      f.scales = c;
      f.scales_len = count * 4;
      f.scales_dev = it.scale_off + g0 * per * 4;
      break;
    }
  }

  return f;
}

}  // namespace bloomery::cuda
