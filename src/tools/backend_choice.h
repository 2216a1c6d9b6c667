// Backend selection for the CLI tools (`--backend cpu|cuda`) and the model families each backend can run.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace bloomery::tools {

// True when this binary was built with the CUDA backend.
bool cuda_built();

// The named backend ("cpu" with `threads` workers, 0 = every core; "cuda" on device 0). Throws
// E_BACKEND_UNAVAILABLE when the binary has no such backend.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads);

// The family ops `backend` lacks for `model_type` (empty: it can run that family).
std::vector<std::string> missing_family_ops(const std::string& backend, const std::string& model_type);

// Reads the folder's model_type (config.json, or metadata/config.json of a CSF container; text_config's type
// when present) and refuses, before any weight is loaded, a family the backend cannot run:
// E_BACKEND_UNSUPPORTED naming the missing ops. A folder whose config cannot be read is left to the loader's
// own errors.
void check_backend_runs(const std::string& backend, const std::filesystem::path& folder);

}  // namespace bloomery::tools
