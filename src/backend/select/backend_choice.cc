// Backend selection: which backends this binary has, which families each can run, and the automatic choice.
#include "backend/select/backend_choice.h"
#include <algorithm>

#include <fstream>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#ifdef BLOOMERY_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#endif

namespace bloomery {

bool cuda_built() {
#ifdef BLOOMERY_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef BLOOMERY_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error for the caller, just none
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads, int tp_rank) {
  if (name == "cpu") return make_cpu_backend(threads);
#ifdef BLOOMERY_HAVE_CUDA
  // Tensor-parallel rank r of this host takes GPU r mod (GPUs seen): one GPU each when there are enough,
  // else several ranks share one (the loopback in one process). CUDA_VISIBLE_DEVICES picks the GPUs.
  if (name == "cuda") return make_cuda_backend(tp_rank % std::max(1, cuda_device_count()));
#endif
  raise("E_BACKEND_UNAVAILABLE", Where{"", "", "--backend"},
        cuda_built() ? "cpu or cuda" : "cpu (this binary was built without CUDA)", name);
}

std::vector<std::string> missing_family_ops(const std::string& backend, const std::string& model_type) {
  if (backend != "cuda") return {};
  // The CUDA backend implements every generic op of backend.h and the family ops of every family the
  // registry knows (qwen4_exp: family/qwen4_ops.cc; glm5_next: family/glm_ops.cc). A family added later
  // whose ops the card lacks is listed here by model_type until they exist.
  (void)model_type;
  return {};
}

std::string folder_model_type(const std::filesystem::path& folder) {
  std::filesystem::path cfg = folder / "config.json";
  if (!std::filesystem::exists(cfg)) cfg = folder / "metadata" / "config.json";
  std::ifstream f(cfg);
  if (!f) return "";
  nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  std::string type = j.value("model_type", std::string());
  if (j.contains("text_config") && j["text_config"].is_object())
    type += " " + j["text_config"].value("model_type", std::string());
  return type;
}

void check_backend_runs(const std::string& backend, const std::filesystem::path& folder) {
  if (backend != "cuda") return;
  const std::string type = folder_model_type(folder);
  const std::vector<std::string> missing = missing_family_ops(backend, type);
  if (missing.empty()) return;
  std::string list;
  for (const auto& op : missing) list += (list.empty() ? "" : ", ") + op;
  raise("E_BACKEND_UNSUPPORTED", Where{(folder / "config.json").string(), "", "model_type"},
        "a family whose ops the cuda backend implements (qwen3_next, qwen4_exp, glm5_next)",
        type + " (the cuda backend lacks the family ops " + list + ")",
        "run it with the CPU engine (--backend cpu / --device none) until those ops exist on CUDA");
}

BackendPick pick_backend(const std::string& requested, const std::filesystem::path& folder) {
  if (requested != "auto") return {requested, "asked for"};
  if (!cuda_built()) return {"cpu", "auto: this build has no CUDA backend"};
  if (cuda_device_count() == 0) return {"cpu", "auto: no CUDA device found"};
  const std::vector<std::string> missing = missing_family_ops("cuda", folder_model_type(folder));
  if (!missing.empty())
    return {"cpu", "auto: this family's ops (" + missing.front() + ", ...) are not on the CUDA backend yet"};
  return {"cuda", "auto: CUDA device 0"};
}

}  // namespace bloomery
