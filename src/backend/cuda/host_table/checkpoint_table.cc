// A checkpoint's streamed table → HostTable. Default placement: the files are mapped read-only (mmap), so
// opening costs nothing, only rows a prompt touches are ever read from disk, and the page cache keeps hot
// rows without locking 48-95 GB of RAM next to the rest of the model. BLOOMERY_PLE_PLACEMENT=pinned copies
// the rows once into pinned memory instead (every row resident, no page faults; costs the whole table in
// locked RAM).
#include "backend/cuda/host_table/checkpoint_table.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "formats/decode.h"
#include "formats/weight_decode.h"

namespace bloomery::cuda::host {
namespace {

// Read-only mappings of the byte range a table uses in each of its files; unmapped with the table.
struct Mappings {
  struct Map {
    void* addr = nullptr;
    size_t len = 0;
    uint64_t file_offset = 0;  // file offset of addr
  };
  std::map<uint32_t, Map> by_file;
  ~Mappings() {
    for (auto& [f, m] : by_file) munmap(m.addr, m.len);
  }
  const uint8_t* at(const TensorEntry& t) const {
    const Map& m = by_file.at(t.file_index);
    return static_cast<const uint8_t*>(m.addr) + (t.offset - m.file_offset);
  }
};

std::shared_ptr<Mappings> map_tensors(const TensorSource& src, const std::vector<const TensorEntry*>& parts,
                                      const std::string& name) {
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> range;  // file → [lo, hi)
  for (const TensorEntry* t : parts) {
    if (t->nbytes == 0) continue;
    auto [it, fresh] = range.try_emplace(t->file_index, t->offset, t->offset + t->nbytes);
    if (!fresh)
      it->second = {std::min(it->second.first, t->offset),
                    std::max(it->second.second, t->offset + t->nbytes)};
  }
  auto maps = std::make_shared<Mappings>();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (const auto& [f, r] : range) {
    const uint64_t off = r.first / page * page, len = r.second - off;
    void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, src.file(f).fd(), static_cast<off_t>(off));
    if (p == MAP_FAILED)
      raise(
          "E_IO_READ", Where{src.display_path(f), name, "mmap"},
          "a read-only mapping of bytes [" + std::to_string(r.first) + ", " + std::to_string(r.second) + ")",
          std::strerror(errno));
    // Rows are hashed n-grams: reading ahead around a faulted page would fetch neighbours nobody asked for.
    madvise(p, len, MADV_RANDOM);
    maps->by_file[f] = {p, len, off};
  }
  return maps;
}

// The format the packed path decodes this record with, or false when it must fall back to host decoding.
bool packed_format(const WeightRecord& rec, const WeightBytes& wb, FormatId* out) {
  if (rec.scale_encoding != ScaleEncoding::Plain) return false;
  const FormatId f = rec.format;
  switch (f) {
    case FormatId::BF16:
    case FormatId::F16:
    case FormatId::F32:  // a dense table is decoded by its stored dtype (exact widening either way)
      if (wb.main_dtype == DType::BF16) return *out = FormatId::BF16, true;
      if (wb.main_dtype == DType::F16) return *out = FormatId::F16, true;
      if (wb.main_dtype == DType::F32) return *out = FormatId::F32, true;
      return false;
    case FormatId::MXFP4:
    case FormatId::MXFP8:  // the kernels read E8M0 bytes only
      if (wb.scale_dtype != DType::U8 && wb.scale_dtype != DType::F8_E8M0) return false;
      return *out = f, true;
    case FormatId::FP8_CHANNEL:
    case FormatId::FP8_BLOCK:
      if (wb.scale_dtype == DType::F8_E4M3) return false;
      return *out = f, true;
    default:
      return *out = f, true;
  }
}

// Copies every part into one pinned block (several threads: a 48 GB table is read once at load).
std::shared_ptr<const void> pin_copy(HostTableBytes& b, const RowBytes& r, uint64_t grid_bytes,
                                     const std::string& name) {
  uint64_t total = grid_bytes;
  for (const HostTableShard& s : b.shards) total += s.rows * (r.elements + r.scales);
  void* block = nullptr;
  BLOOMERY_CUDA_CHECK(cudaHostAlloc(&block, std::max<uint64_t>(total, 1), cudaHostAllocPortable),
                      "pin host table " + name + " (" + std::to_string(total) + " bytes)");
  std::shared_ptr<const void> owner(block, [](const void* p) { cudaFreeHost(const_cast<void*>(p)); });
  struct Copy {
    const uint8_t* src;
    uint64_t src_pitch, row_bytes, rows;
    uint8_t* dst;
  };
  std::vector<Copy> copies;
  auto* at = static_cast<uint8_t*>(block);
  for (HostTableShard& s : b.shards) {
    const uint64_t ep = s.element_pitch ? s.element_pitch : r.elements;
    copies.push_back({static_cast<const uint8_t*>(s.elements), ep, r.elements, s.rows, at});
    s.elements = at, s.element_pitch = r.elements, at += s.rows * r.elements;
    if (r.scales) {
      const uint64_t sp = s.scale_pitch ? s.scale_pitch : r.scales;
      copies.push_back({static_cast<const uint8_t*>(s.block_scales), sp, r.scales, s.rows, at});
      s.block_scales = at, s.scale_pitch = r.scales, at += s.rows * r.scales;
    }
  }
  if (grid_bytes) {
    copies.push_back({static_cast<const uint8_t*>(b.scale_grid), grid_bytes, grid_bytes, 1, at});
    b.scale_grid = at;
  }
  // Split every copy into chunks of rows and hand them to threads round-robin.
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      size_t k = 0;
      for (const Copy& c : copies)
        for (uint64_t r0 = 0; r0 < c.rows; r0 += 65536, ++k) {
          if (k % threads != t) continue;
          const uint64_t r1 = std::min(c.rows, r0 + 65536);
          if (c.src_pitch == c.row_bytes)
            std::memcpy(c.dst + r0 * c.row_bytes, c.src + r0 * c.row_bytes, (r1 - r0) * c.row_bytes);
          else
            for (uint64_t i = r0; i < r1; ++i)
              std::memcpy(c.dst + i * c.row_bytes, c.src + i * c.src_pitch, c.row_bytes);
        }
    });
  for (auto& th : pool) th.join();
  return owner;
}

bool pinned_placement(const std::string& name) {
  const char* v = std::getenv("BLOOMERY_PLE_PLACEMENT");
  const std::string p = v ? v : "";
  if (p.empty() || p == "mapped") return false;
  if (p == "pinned") return true;
  raise("E_BACKEND_UNSUPPORTED", Where{"", name, "BLOOMERY_PLE_PLACEMENT"}, "mapped or pinned", p);
}

}  // namespace

std::shared_ptr<HostTable> open_checkpoint_table(const TensorSource& source, const WeightRecord& record,
                                                 Warnings& warnings) {
  const uint64_t R = record.rows();
  // The format layer's checks of the whole table (dtypes, shard shapes, part sizes), and the header bytes.
  LoadedWeight lw = load_weight_rows(source, record, 0, R > 0 ? 1 : 0, warnings);
  const WeightBytes& wb = lw.bytes;
  HostTableBytes b;
  b.cols = record.cols();
  if (R == 0 || !packed_format(record, wb, &b.format)) {
    // Host decoding of the requested rows; the decode warnings were already reported by the check above.
    auto sink = std::make_shared<Warnings>();
    RowDecoder dec = [&source, record, sink](uint64_t row0, uint64_t n, float* dst) {
      decode_weight_rows(source, record, row0, n, dst, *sink);
    };
    return std::make_shared<HostTable>(record.name, R, std::move(b), std::move(dec), false);
  }
  const PartSizes want = expected_part_sizes(wb, Where{"", record.name, ""});
  if (is_nvfp4(b.format)) b.global = nvfp4_global_multiplier(wb);
  if (b.format == FormatId::FP8_TENSOR) b.global = scale_value(wb.global_dtype, wb.global_scale.data(), 0);

  std::vector<const TensorEntry*> parts(record.main.begin(), record.main.end());
  parts.insert(parts.end(), record.block_scale_shards.begin(), record.block_scale_shards.end());
  if (record.block_scale) parts.push_back(record.block_scale);
  auto maps = map_tensors(source, parts, record.name);

  const bool block_scaled = is_nvfp4(b.format) || b.format == FormatId::MXFP4 || b.format == FormatId::MXFP8;
  uint64_t first = 0;
  for (size_t i = 0; i < record.main.size(); ++i) {
    const TensorEntry& t = *record.main[i];
    HostTableShard s;
    s.rows = record.main.size() == 1 ? R : (t.shape.empty() ? 1 : t.shape[0]);
    s.elements = maps->at(t);
    s.element_pitch = want.main_row;
    if (block_scaled) {
      // Per-shard scales (the fixtures' split NVFP4 convention), or rows of one table-wide scale tensor.
      s.block_scales = record.block_scale_shards.empty()
                           ? maps->at(*record.block_scale) + first * want.block_scale_row
                           : maps->at(*record.block_scale_shards[i]);
      s.scale_pitch = want.block_scale_row;
    }
    b.shards.push_back(s);
    first += s.rows;
  }
  uint64_t grid_bytes = 0;
  if (b.format == FormatId::FP8_CHANNEL || b.format == FormatId::FP8_BLOCK) {
    b.scale_grid = maps->at(*record.block_scale);
    b.grid_dtype = wb.scale_dtype;
    b.block_n = b.format == FormatId::FP8_BLOCK ? record.block_n : 1;
    b.block_k = b.format == FormatId::FP8_BLOCK ? record.block_k : static_cast<int>(b.cols);
    grid_bytes = record.block_scale->nbytes;
  }
  std::vector<int64_t> shape(record.shape.begin(), record.shape.end());
  validate_bytes(b, shape, record.name);
  const bool pinned = pinned_placement(record.name);
  if (pinned) {
    b.owner = pin_copy(b, row_bytes(b, record.name), grid_bytes, record.name);  // the mappings go with `maps`
  } else {
    b.owner = maps;
    b.file_backed = true;
  }
  return std::make_shared<HostTable>(record.name, R, std::move(b), nullptr, pinned);
}

}  // namespace bloomery::cuda::host
