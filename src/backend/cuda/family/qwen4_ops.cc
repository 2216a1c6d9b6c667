// CudaBackend qwen4_exp family ops (hyper-connection read/write, PLE gate, QSA block indexer). Placeholders
// that refuse until the kernels land.
#include "backend/cuda/cuda_backend.h"

namespace bloomery::cuda {

void CudaBackend::hc_read_mix(Tensor&, const Tensor&, const Tensor&, int) {
  unsupported("hc_read_mix");
}
void CudaBackend::hc_inject(Tensor&, const Tensor&, const Tensor&) {
  unsupported("hc_inject");
}
void CudaBackend::ple_gate(Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unsupported("ple_gate");
}
void CudaBackend::qsa_index_append(Tensor&, Tensor&, const Tensor&, int64_t, const Weight&,
                                   const QsaIndexSpec&) {
  unsupported("qsa_index_append");
}
int64_t CudaBackend::qsa_index_select(Tensor&, const Tensor&, const Tensor&, int64_t, const QsaIndexSpec&) {
  unsupported("qsa_index_select");
}

}  // namespace bloomery::cuda
