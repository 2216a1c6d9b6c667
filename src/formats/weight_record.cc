#include "formats/weight_record.h"

namespace bloomery {

uint64_t WeightRecord::stored_bytes() const {
  uint64_t total = 0;
  for (const TensorEntry* t : main) total += t->nbytes;
  for (const TensorEntry* t : block_scale_shards) total += t->nbytes;
  for (const TensorEntry* t : {block_scale, global_scale, input_scale, csf_fixed, csf_exceptions})
    if (t) total += t->nbytes;
  return total;
}

}  // namespace bloomery
