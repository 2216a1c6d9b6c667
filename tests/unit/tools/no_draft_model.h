// A fixture model with its draft layer hidden (info().has_draft false), for the bench tests' refusals and
// skipped rows; everything else is the model's own.
#pragma once

#include "models/model.h"

namespace bloomery::tools {

class NoDraft : public Model {
 public:
  explicit NoDraft(Model& m) : m_(m), info_(m.info()) { info_.has_draft = false; }
  const ModelInfo& info() const override { return info_; }
  std::vector<TensorDecl> declare() const override { return m_.declare(); }
  void bind(Backend& be, const WeightSet& w) override { m_.bind(be, w); }
  std::unique_ptr<SequenceState> new_state(Backend& be, int64_t capacity) const override {
    return m_.new_state(be, capacity);
  }
  ForwardResult forward(Backend& be, SequenceState& st, std::span<const int32_t> ids, bool all) override {
    return m_.forward(be, st, ids, all);
  }
  std::vector<ForwardResult> forward_batch(Backend& be, std::span<const BatchEntry> entries) override {
    return m_.forward_batch(be, entries);
  }
  std::vector<StatePart> state_parts(SequenceState& st) const override { return m_.state_parts(st); }
  void commit(Backend& be, SequenceState& st, int64_t n) override { m_.commit(be, st, n); }

 private:
  Model& m_;
  ModelInfo info_;
};

}  // namespace bloomery::tools
