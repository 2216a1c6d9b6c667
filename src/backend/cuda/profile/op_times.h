// Per-op device time of eager decode steps (bench: BLOOMERY_CUDA_OP_TIMES=1 with --cuda-graphs off): every
// instrumented op records an event pair on the stream under a key ("gemv BF16 [10240, 2560] T1", "attention",
// …); pairs are resolved when the host synchronises, and the bench prints calls, time, bytes and GB/s per
// key. Events serialise nothing the stream did not already order, but each pair costs a little host time,
// so step times measured with it are not the headline numbers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bloomery::cuda {

class OpTimes {
 public:
  struct Entry {
    std::string key;
    int64_t calls = 0;
    double ms = 0;
    double bytes = 0;  // device bytes the op must read (weights as stored); 0 when not counted
  };

  OpTimes() = default;  // off until set_enabled (the bench turns it on for its tg repeats)
  ~OpTimes();
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }
  // Brackets one op on `s`. begin returns the pair's index for end, or -1 inside a graph capture (untimed).
  int begin(cudaStream_t s);
  void end(int pair, cudaStream_t s, std::string key, double bytes);
  // Adds the elapsed times of every finished pair (call after the stream is synchronised).
  void resolve();
  // Totals per key, largest time first, and a reset for the next measurement.
  std::vector<Entry> entries() const;
  void reset();

 private:
  struct Pending {
    int pair;
    std::string key;
    double bytes;
  };
  cudaEvent_t event(size_t i);
  bool enabled_ = false;
  std::vector<cudaEvent_t> events_;  // 2 per pair, reused after resolve
  std::vector<Pending> pending_;
  std::map<std::string, Entry> totals_;
};

// RAII bracket: nothing when the timer is off.
class OpScope {
 public:
  OpScope(OpTimes& t, cudaStream_t s, const char* key, double bytes = 0)
      : t_(t), s_(s), key_(key), bytes_(bytes), pair_(t.enabled() ? t.begin(s) : -1) {}
  OpScope(OpTimes& t, cudaStream_t s, std::string key, double bytes)
      : t_(t), s_(s), key_(std::move(key)), bytes_(bytes), pair_(t.enabled() ? t.begin(s) : -1) {}
  ~OpScope() {
    if (pair_ >= 0) t_.end(pair_, s_, key_, bytes_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpTimes& t_;
  cudaStream_t s_;
  std::string key_;
  double bytes_;
  int pair_;
};

}  // namespace bloomery::cuda
