// Helpers for the families' speculative forwards (Model::BatchEntry::speculative): the recurrent parts of a
// verify entry run on copies registered here, and each GDN/KDA/conv/PLE step records how to redo itself over
// fewer rows; Model::commit (spec_state.cc) then takes the copies or replays. See SpecPending in model.h.
#pragma once

#include <functional>

#include "models/model.h"

namespace bloomery {

// Starts the pending record of a speculative entry (batch_rows calls it for entries marked speculative).
void spec_begin(SequenceState& state, int64_t p0, int64_t T);

// The tensor a mixer of `state` updates this pass: the slot itself, or for a speculative entry a copy of it
// that commit takes when every row is accepted (the slot stays as it was until then).
Tensor spec_fork(Backend& be, SequenceState& state, Tensor& slot);

// For a speculative entry: how to rebuild a slot from its untouched state over the first n rows.
void spec_on_partial(SequenceState& state, std::function<void(Backend&, int64_t)> replay);

}  // namespace bloomery

namespace bloomery {

// The usual replays, each over the first n rows of the verify's own inputs (views kept alive by the record):
// a causal conv into `slot` (its output is not needed again) and the step-form delta rules into `slot`.
void spec_conv_replay(SequenceState* st, Tensor* slot, const Tensor& x, const Weight* w, int dilation,
                      Act act);
void spec_gdn_replay(SequenceState* st, Tensor* slot, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& g, const Tensor& beta, bool l2norm_qk);
void spec_kda_replay(SequenceState* st, Tensor* slot, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& g, const Tensor& beta);

}  // namespace bloomery
