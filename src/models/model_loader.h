// Loading a model folder: open (TensorSource), resolve formats, let the family declare its tensors, refuse a
// missing or mis-shaped tensor BEFORE any weight is decoded, then decode through the backend and bind.
#pragma once

#include <filesystem>
#include <memory>

#include "backend/backend.h"
#include "core/error.h"
#include "formats/classify.h"
#include "formats/tensor_source.h"
#include "models/model.h"

namespace bloomery {

struct LoadedModel {
  std::unique_ptr<TensorSource> source;  // records and streamed weights point into it: never moved
  ResolvedCheckpoint checkpoint;
  ModelConfig config;
  WeightSet weights;
  std::unique_ptr<Model> model;
  Warnings warnings;
};

// Checks only: the family's declarations against the checkpoint (E_MODEL_TENSOR_MISSING, E_DENSE_SHAPE).
// Returns, per declaration, the record to load (null for an absent optional tensor).
std::vector<const WeightRecord*> match_declarations(const std::vector<TensorDecl>& decls,
                                                    const std::vector<WeightRecord>& records);

// The whole road: folder → bound model. Throws bloomery::Error on any structural problem, before compute.
std::unique_ptr<LoadedModel> load_model(const std::filesystem::path& folder, Backend& backend);

}  // namespace bloomery
