#include "backend/cuda/profile/op_times.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace bloomery::cuda {

OpTimes::~OpTimes() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t OpTimes::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e;
    BLOOMERY_CUDA_CHECK(cudaEventCreate(&e), "op times: event");
    events_.push_back(e);
  }
  return events_[i];
}

int OpTimes::begin(cudaStream_t s) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  BLOOMERY_CUDA_CHECK(cudaStreamIsCapturing(s, &capturing), "op times: capture status");
  if (capturing != cudaStreamCaptureStatusNone) return -1;  // graph steps: no timing events inside
  const int pair = static_cast<int>(pending_.size());
  BLOOMERY_CUDA_CHECK(cudaEventRecord(event(2 * pair), s), "op times: record");
  pending_.push_back({pair, "", 0});
  return pair;
}

void OpTimes::end(int pair, cudaStream_t s, std::string key, double bytes) {
  BLOOMERY_CUDA_CHECK(cudaEventRecord(event(2 * pair + 1), s), "op times: record");
  pending_[pair].key = std::move(key);
  pending_[pair].bytes = bytes;
}

void OpTimes::resolve() {
  for (const Pending& p : pending_) {
    float ms = 0;
    BLOOMERY_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * p.pair], events_[2 * p.pair + 1]),
                        "op times: elapsed (" + p.key + ")");
    Entry& e = totals_[p.key];
    e.key = p.key;
    e.calls += 1;
    e.ms += ms;
    e.bytes += p.bytes;
  }
  pending_.clear();
}

std::vector<OpTimes::Entry> OpTimes::entries() const {
  std::vector<Entry> v;
  for (const auto& [k, e] : totals_) v.push_back(e);
  std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
  return v;
}

void OpTimes::reset() {
  pending_.clear();
  totals_.clear();
}

}  // namespace bloomery::cuda
