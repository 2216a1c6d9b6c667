// libFuzzer target: arbitrary JSON as config.json / hf_quant_config.json. The plan resolver must either
// refuse it with an E_CFG_ / E_CSF_ error or return a plan whose predictions (and a classification of a few
// synthetic tensors against it) raise only named errors.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/classify.h"
#include "formats/quant_plan.h"

namespace {

bloomery::TensorEntry entry(const char* name, bloomery::DType d, std::vector<uint64_t> shape) {
  bloomery::TensorEntry t;
  t.name = name;
  t.dtype = d;
  t.shape = shape;
  for (uint64_t s : shape) t.numel *= s;
  t.nbytes = bloomery::dtype_bytes_for(d, t.numel).value_or(0);
  return t;
}

bool named(const bloomery::Error& e) {
  const std::string& id = e.id();
  return id.rfind("E_CFG_", 0) == 0 || id.rfind("E_CSF_", 0) == 0 || id.rfind("E_Q_", 0) == 0 ||
         id.rfind("E_FP8_", 0) == 0 || id.rfind("E_MX", 0) == 0 || id.rfind("E_NVFP4_", 0) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte picks the role of the JSON: config.json, hf_quant_config.json, or a CSF folder's config.
  const int mode = data[0] % 3;
  nlohmann::json j = nlohmann::json::parse(data + 1, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  // re: patterns match in linear time (module_regex.h); names stay short only to keep runs fast.
  static const std::vector<bloomery::TensorEntry> tensors = {
      entry("m.q.weight", bloomery::DType::U8, {16, 16}),
      entry("m.q.weight_scale", bloomery::DType::F8_E4M3, {16, 2}),
      entry("m.q.weight_scale_2", bloomery::DType::F32, {}),
      entry("m.k.weight", bloomery::DType::F8_E4M3, {16, 32}),
      entry("m.k.weight_scale_inv", bloomery::DType::F32, {1, 1}),
      entry("m.v.weight", bloomery::DType::BF16, {16, 32}),
      entry("m.norm.weight", bloomery::DType::BF16, {32}),
  };
  bloomery::Warnings w;
  try {
    bloomery::QuantPlan plan = mode == 1 ? bloomery::resolve_quant_plan(nullptr, j, false, w)
                                         : bloomery::resolve_quant_plan(j, nullptr, mode == 2, w);
    for (const char* m : {"m.q", "model.x", "lm_head", "mtp.l.0", "a"}) (void)plan.predict(m, true, w);
    bloomery::ClassifyOptions opt;
    (void)bloomery::classify_tensors(tensors, plan, opt, w);
  } catch (const bloomery::Error& e) {
    if (!named(e)) __builtin_trap();
  }
  return 0;
}
