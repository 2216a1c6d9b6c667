// `bloomery tensor <folder> <name> [--out file]`: decodes one logical weight to f32 (raw little-endian with
// --out, else a short summary), through the same classification and decoders the loader uses.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "formats/classify.h"
#include "formats/weight_decode.h"
#include "tools/command.h"
#include "tools/inspect_common.h"

namespace bloomery::tools {
namespace {

static_assert(sizeof(float) == 4);

bool host_is_little_endian() {
  const uint32_t one = 1;
  uint8_t b = 0;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

int run_tensor(int argc, char** argv) {
  CLI::App app{"Decode one logical weight of a model folder to f32"};
  std::string folder, name, out_path;
  app.add_option("folder", folder, "model folder")->required();
  app.add_option("name", name, "logical weight name (as inspect lists it) or any of its stored tensors")
      ->required();
  app.add_option("--out", out_path, "write the values as raw little-endian f32, row-major");
  CLI11_PARSE(app, argc, argv);

  Warnings warnings;
  TensorSource src = TensorSource::open(folder, warnings);
  ResolvedCheckpoint rc = resolve_checkpoint(src, warnings);
  const WeightRecord* rec = nullptr;
  for (const WeightRecord& r : rc.weights) {
    if (r.name == name) rec = &r;
    for (const std::string& t : record_tensor_names(r))
      if (!rec && t == name) rec = &r;
    if (rec) break;
  }
  if (!rec)
    raise("E_TOOL_NO_TENSOR", {folder, name, ""}, "a logical weight or stored tensor name", "no such name");
  if (rec->skipped)
    raise("E_TOOL_SKIPPED", {folder, rec->name, ""}, "a tensor the model loads",
          "a vision-tower tensor (listed by inspect, never decoded)");

  std::vector<float> values = decode_weight(src, *rec, warnings);
  std::string label = record_format_label(*rec);
  if (rec->scale_encoding == ScaleEncoding::NvFp4Csf) label += " (csf scales)";
  std::fprintf(stderr, "%s: %s %s, %zu values\n", rec->name.c_str(), label.c_str(),
               shape_label(nlohmann::json(rec->shape)).c_str(), values.size());
  for (const auto& line : warnings.summary()) std::fprintf(stderr, "warning: %s\n", line.c_str());

  if (!out_path.empty()) {
    if (!host_is_little_endian()) {
      for (float& v : values) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        u = __builtin_bswap32(u);
        std::memcpy(&v, &u, 4);
      }
    }
    std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * 4));
    out.close();
    if (!out) raise("E_IO_WRITE", {out_path, "", ""}, "a writable file", std::strerror(errno));
    return 0;
  }
  double sum = 0, sum_sq = 0;
  float lo = INFINITY, hi = -INFINITY;
  size_t nonfinite = 0;
  for (float v : values) {
    if (!std::isfinite(v)) {
      ++nonfinite;
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(values.size() - nonfinite);
  std::printf("name: %s\nformat: %s\nshape: %s\nvalues: %zu\n", rec->name.c_str(), label.c_str(),
              shape_label(nlohmann::json(rec->shape)).c_str(), values.size());
  if (n > 0)
    std::printf("min: %.9g\nmax: %.9g\nmean: %.9g\nrms: %.9g\n", lo, hi, sum / n, std::sqrt(sum_sq / n));
  std::printf("nonfinite: %zu\nfirst:", nonfinite);
  for (size_t i = 0; i < values.size() && i < 8; ++i) std::printf(" %.9g", values[i]);
  std::printf("\n");
  return 0;
}

RegisterCommand reg{"tensor", "decode one logical weight to f32 (raw with --out)", run_tensor};

}  // namespace
}  // namespace bloomery::tools
