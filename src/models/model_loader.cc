// load_model: TensorSource → resolve_checkpoint → ModelSpec declarations checked → weights decoded → bind.
#include "models/model_loader.h"

#include <map>

#include "models/model_registry.h"

namespace bloomery {

std::vector<const WeightRecord*> match_declarations(const std::vector<TensorDecl>& decls,
                                                    const std::vector<WeightRecord>& records) {
  std::map<std::string_view, const WeightRecord*> by_name;
  for (const WeightRecord& r : records) by_name[r.name] = &r;
  std::vector<const WeightRecord*> out;
  out.reserve(decls.size());
  for (const TensorDecl& d : decls) {
    auto it = by_name.find(d.name);
    if (it == by_name.end()) {
      if (!d.optional)
        raise("E_MODEL_TENSOR_MISSING", Where{"", d.name, ""},
              d.shape.empty() ? "a tensor" : "a tensor of shape " + shape_string(d.shape), "none");
      out.push_back(nullptr);
      continue;
    }
    const WeightRecord& r = *it->second;
    if (!d.shape.empty()) {
      std::vector<int64_t> stored(r.shape.begin(), r.shape.end());
      int64_t want = 1, have = 1;
      for (int64_t x : d.shape) want *= x;
      for (int64_t x : stored) have *= x;
      // Exact dims when the ranks agree; equal element counts otherwise (e.g. A_log [H] vs [1, 1, H, 1]).
      bool ok = stored.size() == d.shape.size() ? stored == d.shape : want == have;
      if (!ok)
        raise("E_DENSE_SHAPE", Where{"", d.name, "shape"}, shape_string(d.shape), shape_string(stored));
    }
    out.push_back(&r);
  }
  return out;
}

std::unique_ptr<LoadedModel> load_model(const std::filesystem::path& folder, Backend& backend) {
  auto lm = std::make_unique<LoadedModel>();
  lm->source = std::make_unique<TensorSource>(TensorSource::open(folder, lm->warnings));
  std::vector<std::string> names;
  names.reserve(lm->source->tensors().size());
  for (const TensorEntry& t : lm->source->tensors()) names.push_back(t.name);
  lm->config = read_model_config(lm->source->config(), names);
  lm->model = create_model(lm->config);
  lm->checkpoint = resolve_checkpoint(*lm->source, lm->warnings);
  const std::vector<TensorDecl> decls = lm->model->declare();
  const std::vector<const WeightRecord*> recs = match_declarations(decls, lm->checkpoint.weights);
  for (size_t i = 0; i < decls.size(); ++i) {
    const WeightRecord* r = recs[i];
    if (!r) continue;
    const TensorDecl& d = decls[i];
    std::vector<int64_t> shape =
        d.shape.empty() ? std::vector<int64_t>(r->shape.begin(), r->shape.end()) : d.shape;
    if (d.streamed)
      lm->weights.put(d.name, backend.stream_weight(*lm->source, *r, lm->warnings));
    else
      lm->weights.put(d.name, backend.load_weight(*lm->source, *r, shape, lm->warnings));
  }
  lm->model->bind(backend, lm->weights);
  return lm;
}

}  // namespace bloomery
