// `bloomery inspect <folder>`: every logical weight with its stored dtypes, shape, resolved format and bytes;
// totals per format and per role; the warnings summary. Refuses a structurally broken folder by its E_ id.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "formats/classify.h"
#include "formats/weight_decode.h"
#include "models/roles.h"
#include "server/checkpoint_checks.h"
#include "tools/command.h"
#include "tools/inspect_common.h"

namespace bloomery::tools {
namespace {

struct Total {
  uint64_t count = 0, bytes = 0, params = 0;
};

nlohmann::json total_json(const Total& t) {
  return {{"count", t.count}, {"bytes", t.bytes}, {"params", t.params}};
}

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", v, units[u]);
}

int run_inspect(int argc, char** argv) {
  CLI::App app{"List every logical weight of a model folder with its stored format, and totals"};
  std::string folder;
  bool as_json = false, check = false, formats_only = false;
  app.add_option("folder", folder, "model folder (safetensors, sharded, CSF container or serving folder)")
      ->required();
  app.add_flag("--json", as_json, "machine-readable output on stdout");
  app.add_flag("--check", check, "also read and validate every weight's bytes (scales, NaN codes)");
  app.add_flag(
      "--formats-only", formats_only,
      "only the format layer's checks (for folders that are not a whole checkpoint, e.g. one layout's "
      "sample tensors): skip the model, config, tokenizer and template checks bloomery-serve runs");
  CLI11_PARSE(app, argc, argv);

  Warnings warnings;
  try {
    // Every check bloomery-serve runs before loading (the same function), so inspect refuses what serve
    // refuses, with the same error.
    if (!formats_only) server::check_checkpoint(folder, "cpu", cpu::CpuBackend(1).memory_info(), "");
    TensorSource src = TensorSource::open(folder, warnings);
    ResolvedCheckpoint rc = resolve_checkpoint(src, warnings);
    const RoleContext roles = role_context_from_config(src.config());

    nlohmann::json tensors = nlohmann::json::array();
    std::map<std::string, Total> by_format, by_role;
    Total all;
    for (const WeightRecord& r : rc.weights) {
      if (check && !r.skipped && r.kind != RecordKind::KvScale) decode_weight(src, r, warnings, true);
      const std::string role(role_name(role_of(r.name, roles)));
      const std::string format = record_format_label(r);
      const uint64_t bytes = r.stored_bytes(), params = record_params(r);
      nlohmann::json t = {{"name", r.name},
                          {"kind", record_kind_name(r.kind)},
                          {"role", role},
                          {"format", format},
                          {"csf_scales", r.scale_encoding == ScaleEncoding::NvFp4Csf},
                          {"dtypes", record_dtypes_json(r)},
                          {"shape", r.shape},
                          {"bytes", bytes},
                          {"params", params},
                          {"skipped", r.skipped},
                          {"tensors", record_tensor_names(r)}};
      if (r.block_n) t["block"] = {r.block_n, r.block_k};
      tensors.push_back(std::move(t));
      const std::string key = r.skipped ? "skipped" : format;
      for (Total* tot : {&by_format[key], &by_role[role], &all}) {
        tot->count++;
        tot->bytes += bytes;
        tot->params += params;
      }
    }

    if (as_json) {
      nlohmann::json out;
      out["folder"] = folder;
      out["kind"] = std::string(folder_kind_name(src.kind()));
      out["plan"] = plan_json(rc.plan);
      out["tensors"] = std::move(tensors);
      nlohmann::json bf = nlohmann::json::object(), br = nlohmann::json::object();
      for (const auto& [k, v] : by_format) bf[k] = total_json(v);
      for (const auto& [k, v] : by_role) br[k] = total_json(v);
      out["totals"] = {{"by_format", bf}, {"by_role", br}, {"all", total_json(all)}};
      out["warnings"] = warnings.summary();
      std::printf("%s\n", out.dump(1).c_str());
      return 0;
    }

    std::printf("folder: %s (%s, %zu files)\n", folder.c_str(),
                std::string(folder_kind_name(src.kind())).c_str(), src.file_count());
    std::printf("plan:   %s\n\n", plan_summary(rc.plan).c_str());
    size_t width = 20;
    for (const auto& t : tensors) width = std::max(width, t["name"].get<std::string>().size());
    width = std::min<size_t>(width, 90);
    std::printf("%-*s  %-26s  %-22s  %-22s  %12s  %s\n", static_cast<int>(width), "tensor", "stored dtypes",
                "shape", "format", "bytes", "role");
    for (const auto& t : tensors) {
      std::string fmt_label = t["format"].get<std::string>();
      if (t["csf_scales"].get<bool>()) fmt_label += " (csf scales)";
      if (t.contains("block"))
        fmt_label += fmt::format(" {}x{}", t["block"][0].get<int>(), t["block"][1].get<int>());
      if (t["skipped"].get<bool>()) fmt_label = "skipped (" + fmt_label + ")";
      std::printf("%-*s  %-26s  %-22s  %-22s  %12llu  %s\n", static_cast<int>(width),
                  t["name"].get<std::string>().c_str(), dtypes_label(t["dtypes"]).c_str(),
                  shape_label(t["shape"]).c_str(), fmt_label.c_str(),
                  static_cast<unsigned long long>(t["bytes"].get<uint64_t>()),
                  t["role"].get<std::string>().c_str());
    }
    auto print_totals = [](const char* title, const std::map<std::string, Total>& m) {
      std::printf("\n%s\n", title);
      for (const auto& [k, v] : m)
        std::printf("  %-22s %8llu tensors  %14llu bytes (%s)  %16llu params\n", k.c_str(),
                    static_cast<unsigned long long>(v.count), static_cast<unsigned long long>(v.bytes),
                    human_bytes(v.bytes).c_str(), static_cast<unsigned long long>(v.params));
    };
    print_totals("totals by format:", by_format);
    print_totals("totals by role:", by_role);
    std::printf("\nall: %llu records, %llu bytes (%s), %llu params\n",
                static_cast<unsigned long long>(all.count), static_cast<unsigned long long>(all.bytes),
                human_bytes(all.bytes).c_str(), static_cast<unsigned long long>(all.params));
    std::printf("\nwarnings:%s\n", warnings.empty() ? " none" : "");
    for (const auto& line : warnings.summary()) std::printf("  %s\n", line.c_str());
    return 0;
  } catch (const Error& e) {
    if (as_json) {
      nlohmann::json out = {{"error", {{"id", e.id()}, {"message", e.what()}}},
                            {"warnings", warnings.summary()}};
      std::printf("%s\n", out.dump(1).c_str());
    }
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

RegisterCommand reg{"inspect", "list a model folder's weights, formats, bytes and warnings", run_inspect};

}  // namespace
}  // namespace bloomery::tools
