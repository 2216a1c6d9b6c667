// CUDA weights: a checkpoint weight goes to the card in its stored format (element bytes and NVFP4/MX block
// scales as stored; FP8 channel/block scale grids and BF16 scales widened to f32, which is exact). Small
// dense parameters also get an f32 copy for the ops that read them whole. Matmul, embedding gather and the
// routed experts run on these stored bytes. Whole checkpoints load through loader/parallel_loader.cc
// (parallel direct reads into pinned staging, registered below as the "cuda" bulk loader); load_weight here
// is the one-weight road (tests, callers without the loader), and both set the device view through the same
// helpers.
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/loader/parallel_loader.h"
#include "backend/cuda/loader/weight_build.h"
#include "backend/op_checks.h"
#include "formats/tensor_source.h"
#include "formats/weight_decode.h"
#include "formats/weight_record.h"

namespace bloomery::cuda {

namespace {

// Dense weights up to this many elements also keep an f32 copy (norms, conv kernels, A_log, biases); the
// memory plan counts the same copies.
constexpr int64_t kDenseCopyMax = kDenseCopyMaxElements;

// make_weight is protected in Backend; this derived name (never instantiated) makes it reachable from
// wrap_cuda_weight, which the parallel loader calls.
struct WeightMaker : Backend {
  using Backend::make_weight;
};

// The whole-checkpoint loader of this backend (models/model_loader.h registry).
[[maybe_unused]] const bool kBulkRegistered = register_bulk_loader("cuda", &parallel_load);

std::shared_ptr<void> device_bytes(const void* host, size_t bytes, const std::string& what) {
  void* p = nullptr;
  BLOOMERY_CUDA_CHECK(cudaMalloc(&p, bytes + 16), "upload " + what);
  if (bytes) BLOOMERY_CUDA_CHECK(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), "upload " + what);
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

bool is_dense(FormatId f) {
  return f == FormatId::BF16 || f == FormatId::F16 || f == FormatId::F32;
}

DType dense_dtype(FormatId f) {
  return f == FormatId::BF16 ? DType::BF16 : (f == FormatId::F16 ? DType::F16 : DType::F32);
}

bool is_e8m0_bytes(DType t) {
  return t == DType::U8 || t == DType::F8_E8M0;
}

}  // namespace

const DeviceWeight& device_weight(const Weight& w, std::string_view op) {
  const auto* cw = static_cast<const CudaWeight*>(w.impl().get());
  if (!cw || w.streamed())
    raise("E_BACKEND_UNSUPPORTED", Where{"", w.name(), std::string(op)},
          "a weight loaded by the cuda backend",
          w.streamed() ? "a streamed table" : "a weight without device data");
  return cw->dw;
}

Weight CudaBackend::wrap(std::string name, std::vector<int64_t> shape, std::shared_ptr<CudaWeight> cw) {
  return wrap_cuda_weight(*this, std::move(name), std::move(shape), std::move(cw));
}

Weight wrap_cuda_weight(CudaBackend& be, std::string name, std::vector<int64_t> shape,
                        std::shared_ptr<CudaWeight> cw) {
  Tensor dense;
  const DeviceWeight& dw = cw->dw;
  const int64_t numel = static_cast<int64_t>(dw.rows * dw.cols);
  if (dw.format == FormatId::F32) {
    // The stored bytes are the f32 tensor itself.
    auto st = std::make_shared<Storage>();
    st->data = const_cast<void*>(dw.data);
    st->bytes = static_cast<size_t>(numel) * 4;
    st->owner = cw;
    dense = Tensor(std::move(st), ElemType::F32, shape);
  } else if (is_dense(dw.format) && numel <= kDenseCopyMax) {
    dense = be.alloc(shape);
    dequantize(dw, dense.f32(), be.stream());  // exact widening of BF16 / F16
  }
  return WeightMaker::make_weight(std::move(name), std::move(shape), std::move(dense), false, std::move(cw));
}

Weight CudaBackend::upload_weight(std::string name, std::span<const float> data, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  BLOOMERY_NEED(static_cast<size_t>(n) == data.size(), "upload_weight", shape_string(shape),
                std::to_string(data.size()));
  auto cw = std::make_shared<CudaWeight>();
  cw->buffers.push_back(device_bytes(data.data(), data.size_bytes(), name));
  cw->dw.format = FormatId::F32;
  cw->dw.rows = shape.empty() ? 1 : static_cast<uint64_t>(shape[0]);
  cw->dw.cols = cw->dw.rows ? static_cast<uint64_t>(n) / cw->dw.rows : 0;
  cw->dw.data = cw->buffers.back().get();
  return wrap(std::move(name), std::move(shape), std::move(cw));
}

Weight CudaBackend::load_weight(const TensorSource& source, const WeightRecord& record,
                                std::vector<int64_t> shape, Warnings& warnings) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (static_cast<uint64_t>(n) != record.rows() * record.cols())
    raise("E_DENSE_SHAPE", Where{"", record.name, "shape"}, shape_string(shape),
          shape_string(std::vector<int64_t>(record.shape.begin(), record.shape.end())));
  const FormatId f = record.format;
  // Parameters of a non-float stored dtype (and any dense weight whose dtype is not the format's own) are
  // decoded by the format layer and kept as f32, as the CPU backend does.
  if (is_dense(f) && (record.main.size() != 1 || record.main[0]->dtype != dense_dtype(f))) {
    std::vector<float> data = decode_weight(source, record, warnings);
    return upload_weight(record.name, data, std::move(shape));
  }
  // Validated by the format layer; CSF scales arrive as E4M3 bytes (a lossless decode of the stored code).
  LoadedWeight lw = load_weight_rows(source, record, 0, record.rows(), warnings);
  return upload_stored(record.name, std::move(shape), lw.bytes);
}

void widen_scales(DType t, const uint8_t* bytes, uint64_t count, float* out) {
  for (uint64_t i = 0; i < count; ++i) out[i] = scale_value(t, bytes, i);
}

void set_device_view(DeviceWeight& dw, const WeightBytes& wb, const void* main, const void* scales) {
  const FormatId f = wb.format;
  dw.format = f;
  dw.rows = wb.rows;
  dw.cols = wb.cols;
  dw.data = main;
  switch (f) {
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
      dw.block_scales = static_cast<const uint8_t*>(scales);
      dw.global = nvfp4_global_multiplier(wb);
      break;
    case FormatId::MXFP4:
    case FormatId::MXFP8:
      dw.block_scales = static_cast<const uint8_t*>(scales);
      break;
    case FormatId::FP8_TENSOR:
      dw.global = scale_value(wb.global_dtype, wb.global_scale.data(), 0);
      break;
    case FormatId::FP8_CHANNEL:
      dw.scale_f32 = static_cast<const float*>(scales);
      break;
    case FormatId::FP8_BLOCK:
      dw.block_n = wb.block_n;
      dw.block_k = wb.block_k;
      dw.scale_f32 = static_cast<const float*>(scales);
      break;
    default:
      break;  // dense: the elements are all
  }
}

Weight CudaBackend::upload_stored(const std::string& name, std::vector<int64_t> shape,
                                  const WeightBytes& wb) {
  const FormatId f = wb.format;
  auto cw = std::make_shared<CudaWeight>();
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  BLOOMERY_NEED(static_cast<uint64_t>(n) == wb.rows * wb.cols, "upload_stored",
                shape_string(shape) + " elements", std::to_string(wb.rows) + " x " + std::to_string(wb.cols));
  cw->buffers.push_back(device_bytes(wb.main.data(), wb.main.size(), name));
  const void* main = cw->buffers.back().get();
  const void* scales = nullptr;
  switch (f) {
    case FormatId::NVFP4:
    case FormatId::W4A16_NVFP4:
    case FormatId::NVFP4_CT:
      cw->buffers.push_back(device_bytes(wb.block_scale.data(), wb.block_scale.size(), name + " scales"));
      scales = cw->buffers.back().get();
      break;
    case FormatId::MXFP4:
    case FormatId::MXFP8:
      if (!is_e8m0_bytes(wb.scale_dtype))
        raise("E_BACKEND_UNSUPPORTED", Where{"", name, "weight_scale"}, "E8M0 / U8 MX block scales",
              std::string(dtype_name(wb.scale_dtype)) + " scales (not yet read by the CUDA kernels)");
      cw->buffers.push_back(device_bytes(wb.block_scale.data(), wb.block_scale.size(), name + " scales"));
      scales = cw->buffers.back().get();
      break;
    case FormatId::FP8_CHANNEL:
    case FormatId::FP8_BLOCK: {
      const uint64_t count = f == FormatId::FP8_CHANNEL ? wb.rows
                                                        : ((wb.rows + wb.block_n - 1) / wb.block_n) *
                                                              ((wb.cols + wb.block_k - 1) / wb.block_k);
      std::vector<float> v(count);
      widen_scales(wb.scale_dtype, wb.block_scale.data(), count, v.data());
      cw->buffers.push_back(device_bytes(v.data(), v.size() * 4, name + " scales"));
      scales = cw->buffers.back().get();
      break;
    }
    default:
      break;
  }
  set_device_view(cw->dw, wb, main, scales);
  return wrap(name, std::move(shape), std::move(cw));
}

void CudaBackend::gather_rows(Tensor& out, const Weight& table, std::span<const int64_t> ids) {
  OpScope op_scope(op_times_, stream_, "gather rows");
  check_gather_rows_args(out, table, ids);
  const int64_t D = table.cols();
  if (!table.streamed()) {
    const DeviceWeight& dw = device_weight(table, "gather_rows");
    BLOOMERY_NEED(static_cast<int64_t>(dw.cols) == D, "gather_rows", "a table whose rows are its stored rows",
                  table.name());
    const auto* d_ids = static_cast<const int64_t*>(stage(0, ids.data(), ids.size_bytes()));
    cuda::gather_rows(dw, d_ids, static_cast<int64_t>(ids.size()), out.out_f32(), stream_);
    return;
  }
  gather_streamed(out, table, ids);
}

}  // namespace bloomery::cuda

namespace bloomery::cuda {

std::vector<int32_t> CudaBackend::sample(const Tensor& logits, const SampleParams& p) {
  const int64_t R = logits.rows(), V = logits.cols();
  BLOOMERY_NEED(V > 0 && logits.type() == ElemType::F32, "sample", "f32 logits [R, V]", logits.shape_str());
  graphs_.not_capturable("sample");
  float* scratch = static_cast<float*>(scratch_[2].get(static_cast<size_t>(R * V + R) * 4 + 64));
  auto* d_ids = reinterpret_cast<int32_t*>(scratch + R * V);
  cuda::sample(d_ids, logits.f32(), R, V, p, scratch, stream_);
  std::vector<int32_t> out(static_cast<size_t>(R));
  BLOOMERY_CUDA_CHECK(cudaMemcpy(out.data(), d_ids, out.size() * 4, cudaMemcpyDeviceToHost),
                      "sample ids [" + std::to_string(R) + "]");
  return out;
}

std::vector<int32_t> CudaBackend::argmax_last_rows(std::span<const Tensor> logits) {
  if (logits.empty()) return {};
  const SampleParams greedy;  // temperature 0: argmax, lowest index on ties
  auto last = [](const Tensor& t) { return t.view({t.rows(), t.cols()}).slice(t.rows() - 1, 1); };
  if (logits.size() == 1) return sample(last(logits[0]), greedy);
  Tensor all = alloc({static_cast<int64_t>(logits.size()), logits[0].cols()});
  for (size_t i = 0; i < logits.size(); ++i) {
    BLOOMERY_NEED(logits[i].cols() == logits[0].cols(), "argmax_last_rows", "rows of one vocabulary",
                  logits[i].shape_str() + " after " + logits[0].shape_str());
    Tensor row = all.slice(static_cast<int64_t>(i), 1);
    copy(row, last(logits[i]));
  }
  return sample(all, greedy);
}

// One launch of the card's sampler per row (each sequence has its own cuts, seed and step), into one id
// buffer, then one copy back: V floats of scratch per row.
std::vector<int32_t> CudaBackend::draw_last_rows(std::span<const Tensor> logits,
                                                 std::span<const RowDraw> draws) {
  BLOOMERY_NEED(logits.size() == draws.size(), "draw_last_rows", "one draw per tensor of logits",
                std::to_string(draws.size()) + " for " + std::to_string(logits.size()));
  if (logits.empty()) return {};
  const int64_t R = static_cast<int64_t>(logits.size()), V = logits[0].cols();
  graphs_.not_capturable("sample");
  float* scratch = static_cast<float*>(scratch_[2].get(static_cast<size_t>(R * V + R) * 4 + 64));
  auto* d_ids = reinterpret_cast<int32_t*>(scratch + R * V);
  for (int64_t i = 0; i < R; ++i) {
    const Tensor& t = logits[static_cast<size_t>(i)];
    BLOOMERY_NEED(t.cols() == V && t.type() == ElemType::F32, "draw_last_rows", "f32 rows of one vocabulary",
                  t.shape_str() + " after " + logits[0].shape_str());
    const RowDraw& d = draws[static_cast<size_t>(i)];
    BLOOMERY_NEED(d.temperature > 0.0f, "draw_last_rows", "a temperature above 0 (greedy: argmax_last_rows)",
                  std::to_string(d.temperature));
    const SampleParams p{d.temperature, d.top_k, d.top_p, d.min_p, d.seed, d.step};
    const Tensor row = t.view({t.rows(), V}).slice(t.rows() - 1, 1);
    cuda::sample(d_ids + i, row.f32(), 1, V, p, scratch + i * V, stream_);
  }
  std::vector<int32_t> out(static_cast<size_t>(R));
  BLOOMERY_CUDA_CHECK(cudaMemcpy(out.data(), d_ids, out.size() * 4, cudaMemcpyDeviceToHost),
                      "draw ids [" + std::to_string(R) + "]");
  return out;
}

}  // namespace bloomery::cuda
