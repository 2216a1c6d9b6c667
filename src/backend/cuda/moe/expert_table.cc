// The cached device table of routed experts (see expert_table.h): descriptors gathered from the CudaWeights,
// uniformity and unit-read checks made once, one upload per span.
#include "backend/cuda/moe/expert_table.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

namespace bloomery::cuda {
namespace {

struct Entry {
  ExpertSet set;
  std::shared_ptr<void> device;  // the 3·E descriptors on the card
  // The first and last loaded experts' weights as seen at build: the table is stale when they are gone or
  // another weight sits at that place in the span.
  size_t first = 0, last = 0;
  const void *first_impl = nullptr, *last_impl = nullptr;
  std::weak_ptr<void> first_alive, last_alive;
};

using Key = std::tuple<const void*, const void*, size_t>;

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

// Never destroyed: the CUDA runtime may be gone when static destructors run.
std::map<Key, std::unique_ptr<Entry>>& cache() {
  static auto* c = new std::map<Key, std::unique_ptr<Entry>>();
  return *c;
}

bool loaded(const ExpertWeights& ew) {
  return ew.gate && ew.up && ew.down;
}

bool fresh(const Entry& en, std::span<const ExpertWeights> experts) {
  if (en.set.loaded == 0 || en.first_alive.expired() || en.last_alive.expired()) return false;
  const ExpertWeights &a = experts[en.first], &b = experts[en.last];
  return loaded(a) && loaded(b) && a.gate->impl().get() == en.first_impl &&
         b.down->impl().get() == en.last_impl;
}

void build(Entry& en, std::span<const ExpertWeights> experts) {
  const int64_t E = static_cast<int64_t>(experts.size());
  ExpertSet s;
  s.tab.E = E;
  std::vector<DeviceWeight> host(static_cast<size_t>(3 * E));
  for (auto& d : host) d.data = nullptr;
  bool uniform = true, units = true, have = false;
  for (int64_t e = 0; e < E; ++e) {
    const ExpertWeights& ew = experts[e];
    if (!loaded(ew)) continue;
    const DeviceWeight &g = device_weight(*ew.gate, "moe_experts"), &u = device_weight(*ew.up, "moe_experts"),
                       &d = device_weight(*ew.down, "moe_experts");
    host[e] = g, host[E + e] = u, host[2 * E + e] = d;
    if (!have) {
      have = true;
      s.I = ew.gate->rows(), s.D = ew.gate->cols();
      s.gate_fmt = g.format, s.up_fmt = u.format, s.down_fmt = d.format;
      en.first = static_cast<size_t>(e);
      en.first_impl = ew.gate->impl().get();
      en.first_alive = ew.gate->impl();
    }
    en.last = static_cast<size_t>(e);
    en.last_impl = ew.down->impl().get();
    en.last_alive = ew.down->impl();
    ++s.loaded;
    const uint64_t I = static_cast<uint64_t>(s.I), D = static_cast<uint64_t>(s.D);
    // Logical shapes equal to the stored ones (no packed or sliced expert) and equal across experts.
    uniform = uniform && ew.gate->rows() == s.I && ew.gate->cols() == s.D && ew.up->rows() == s.I &&
              ew.up->cols() == s.D && ew.down->rows() == s.D && ew.down->cols() == s.I && g.rows == I &&
              g.cols == D && u.rows == I && u.cols == D && d.rows == D && d.cols == I &&
              g.format == s.gate_fmt && u.format == s.up_fmt && d.format == s.down_fmt;
    units = units && moe_units_ok(g.format, g.cols, g.block_k, g.data) &&
            moe_units_ok(u.format, u.cols, u.block_k, u.data) &&
            moe_units_ok(d.format, d.cols, d.block_k, d.data);
  }
  s.uniform = have && uniform;
  s.units_ok = s.uniform && units && moe_same_width(s.gate_fmt, s.up_fmt);
  s.all_loaded = s.loaded == E;
  void* p = nullptr;
  const size_t bytes = host.size() * sizeof(DeviceWeight);
  const std::string what = "moe expert table of " + std::to_string(E) + " experts";
  BLOOMERY_CUDA_CHECK(cudaMalloc(&p, bytes + 16), what);
  en.device = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  BLOOMERY_CUDA_CHECK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice), what);
  const auto* d = static_cast<const DeviceWeight*>(p);
  s.tab.gate = d, s.tab.up = d + E, s.tab.down = d + 2 * E;
  en.set = s;
}

}  // namespace

const ExpertSet& expert_set(const void* owner, std::span<const ExpertWeights> experts) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto& c = cache();
  const Key key{owner, experts.data(), experts.size()};
  auto it = c.find(key);
  if (it != c.end() && fresh(*it->second, experts)) return it->second->set;
  // A miss: drop tables whose weights are gone (a freed model or backend), then build this one.
  for (auto j = c.begin(); j != c.end();) {
    if (j != it && j->second->first_alive.expired())
      j = c.erase(j);
    else
      ++j;
  }
  if (it == c.end()) it = c.emplace(key, std::make_unique<Entry>()).first;
  *it->second = Entry{};
  build(*it->second, experts);
  return it->second->set;
}

}  // namespace bloomery::cuda
