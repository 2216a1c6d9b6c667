// Tensor: a contiguous row-major view into backend-owned storage (host memory on CPU, device memory on CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace bloomery {

// F32 activations and state, I32 ids and indices, BF16 for KV caches (-ctk/-ctv: half the bytes of f32; ops
// that read a BF16 tensor widen it exactly, ops that write one round to nearest even).
enum class ElemType : uint8_t { F32, I32, BF16 };

inline size_t elem_size(ElemType t) {
  return t == ElemType::BF16 ? 2 : 4;
}

inline const char* elem_name(ElemType t) {
  return t == ElemType::F32 ? "f32" : t == ElemType::I32 ? "i32" : "bf16";
}

// A block of backend memory. `data` is a host pointer for the CPU backend and a device pointer for CUDA; the
// deleter (set by the backend that allocated it) frees it.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> owner;  // keeps the allocation alive
  // Backend::alloc promises zeros. A backend for which the fill is a real cost (a memset node per tensor on
  // the card) may defer it: it sets `pending_zero`, and the fill runs, once and in stream order, at the first
  // access that can see the contents (Tensor::f32/i32). An op that writes every element before reading any
  // asks for Tensor::out_f32 instead, and the fill never runs.
  std::function<void(Storage&)> pending_zero;
  void settle() {
    if (!pending_zero) return;
    auto fill = std::move(pending_zero);
    pending_zero = nullptr;
    fill(*this);
  }
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, ElemType type, std::vector<int64_t> shape, size_t offset = 0)
      : storage_(std::move(storage)), type_(type), shape_(std::move(shape)), offset_(offset) {}

  bool defined() const { return storage_ != nullptr; }
  ElemType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + ndim() : i]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }
  // Everything but the last dimension, and the last dimension.
  int64_t rows() const { return shape_.empty() ? 1 : numel() / shape_.back(); }
  int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }
  size_t offset() const { return offset_; }  // in elements
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // The same elements with another shape (numel must match).
  Tensor view(std::vector<int64_t> shape) const;
  // Elements [first, first + count) of dimension 0, all other dimensions kept.
  Tensor slice(int64_t first, int64_t count) const;

  // Raw element pointers, meaningful only on the backend that owns the storage (host pointers on CPU). A
  // BF16 tensor has no f32/i32 view: reading its bits as floats is a bug, refused here.
  float* f32() const {
    if (type_ == ElemType::BF16) throw std::logic_error("Tensor::f32 on a bf16 tensor " + shape_str());
    storage_->settle();
    return static_cast<float*>(storage_->data) + offset_;
  }
  uint16_t* bf16() const {
    if (type_ != ElemType::BF16) throw std::logic_error("Tensor::bf16 on a 4-byte tensor " + shape_str());
    storage_->settle();
    return static_cast<uint16_t*>(storage_->data) + offset_;
  }
  // The first byte of this view, any element type (copies and the card's type-dispatching ops).
  void* bytes_ptr() const {
    storage_->settle();
    return static_cast<char*>(storage_->data) + offset_ * elem_size(type_);
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * elem_size(type_); }
  int32_t* i32() const {
    storage_->settle();
    return static_cast<int32_t*>(storage_->data) + offset_;
  }
  // The pointer for an op that writes every element of this tensor before reading any of them. A deferred
  // zero fill is dropped when nothing could ever see it: the tensor covers its whole storage and none of the
  // op's inputs `reads` shares that storage (an in-place op reads the zeros). Otherwise the fill runs.
  float* out_f32(std::initializer_list<const Tensor*> reads = {}) const {
    if (type_ == ElemType::BF16) throw std::logic_error("Tensor::out_f32 on a bf16 tensor " + shape_str());
    return out_ptr<float>(reads);
  }
  uint16_t* out_bf16(std::initializer_list<const Tensor*> reads = {}) const {
    if (type_ != ElemType::BF16) throw std::logic_error("Tensor::out_bf16 on a 4-byte tensor " + shape_str());
    return out_ptr<uint16_t>(reads);
  }
  void* out_bytes(std::initializer_list<const Tensor*> reads = {}) const { return out_ptr<void>(reads); }
  int32_t* out_i32(std::initializer_list<const Tensor*> reads = {}) const { return out_ptr<int32_t>(reads); }

  std::string shape_str() const;

 private:
  template <typename T>
  T* out_ptr(std::initializer_list<const Tensor*> reads) const {
    if (storage_->pending_zero) {
      bool whole = offset_ == 0 && static_cast<size_t>(numel()) * elem_size(type_) == storage_->bytes;
      for (const Tensor* r : reads)
        if (r && r->storage_ == storage_) whole = false;
      if (whole)
        storage_->pending_zero = nullptr;
      else
        storage_->settle();
    }
    return static_cast<T*>(
        static_cast<void*>(static_cast<char*>(storage_->data) + offset_ * elem_size(type_)));
  }

  std::shared_ptr<Storage> storage_;
  ElemType type_ = ElemType::F32;
  std::vector<int64_t> shape_;
  size_t offset_ = 0;
};

inline std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

inline std::string Tensor::shape_str() const {
  return shape_string(shape_);
}

inline Tensor Tensor::view(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  if (t.numel() != numel()) throw std::logic_error("Tensor::view " + shape_str() + " -> " + t.shape_str());
  return t;
}

inline Tensor Tensor::slice(int64_t first, int64_t count) const {
  if (shape_.empty() || first < 0 || count < 0 || first + count > shape_[0])
    throw std::logic_error("Tensor::slice out of range on " + shape_str());
  Tensor t = *this;
  t.shape_[0] = count;
  t.offset_ = offset_ + static_cast<size_t>(first) * (shape_[0] ? numel() / shape_[0] : 0);
  return t;
}

}  // namespace bloomery
