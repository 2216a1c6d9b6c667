// Backend selection for the CLI tools and the server: which backends this build has, whether a GPU is
// present, which families each backend can run, and the automatic choice ("auto": the fastest setup the
// checkpoint allows).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace bloomery {

// True when this binary was built with the CUDA backend.
bool cuda_built();

// CUDA devices visible to this process (0 without CUDA, a driver or a device).
int cuda_device_count();

// The named backend ("cpu" with `threads` workers, 0 = every core; "cuda" on device tp_rank mod the GPUs
// seen). Throws
// E_BACKEND_UNAVAILABLE when the binary has no such backend.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads, int tp_rank = 0);

// The family ops `backend` lacks for `model_type` (empty: it can run that family).
std::vector<std::string> missing_family_ops(const std::string& backend, const std::string& model_type);

// The folder's model_type (config.json, or metadata/config.json of a CSF container, plus text_config's type
// when present); empty when the config cannot be read (the loader reports that itself).
std::string folder_model_type(const std::filesystem::path& folder);

// Refuses, before any weight is loaded, a family the backend cannot run: E_BACKEND_UNSUPPORTED naming the
// missing ops.
void check_backend_runs(const std::string& backend, const std::filesystem::path& folder);

// "auto" → "cuda" when this build has CUDA, a device is present and the folder's family runs on it, else
// "cpu"; "cpu" / "cuda" are kept (cuda is checked by check_backend_runs). `why` says what decided.
struct BackendPick {
  std::string name;
  std::string why;
};
BackendPick pick_backend(const std::string& requested, const std::filesystem::path& folder);

}  // namespace bloomery
