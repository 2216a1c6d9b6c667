// A load progress bar on stderr: bytes done / total, MB/s and ETA. On a terminal one line is redrawn in place
// (at most every 100 ms); otherwise a plain line is printed every few seconds, so logs stay short. Quiet mode
// prints nothing. Thread-safe: reader threads call add() as their bytes arrive. Header-only (the core room
// lists its sources by name).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace bloomery {

// "1.50 GiB", "12.0 MiB", "3.0 KiB", "17 B".
std::string format_bytes(uint64_t bytes);

// One progress line (no newline): "label [#####.....]  42%  1.23 GiB / 2.91 GiB  850.0 MB/s  ETA 2.0s".
// elapsed_s ≤ 0 or done = 0: rate and ETA are shown as "--". bar_width 0 leaves the bar out.
std::string format_progress_line(std::string_view label, uint64_t done, uint64_t total, double elapsed_s,
                                 int bar_width = 30);

enum class ProgressMode {
  Auto,   // redraw on a TTY, periodic plain lines otherwise
  Tty,    // always redraw in place
  Plain,  // always periodic plain lines
  Quiet,  // nothing
};

class Progress {
 public:
  // `total` bytes are expected; `out` is where the bar goes (stderr unless a test captures it).
  Progress(std::string label, uint64_t total, ProgressMode mode = ProgressMode::Auto, std::FILE* out = stderr,
           double plain_interval_s = 5.0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t bytes);
  // Also tell `fn(done, total)` on every add() (e.g. a server's /health "loading 42%"). Called from the
  // reader threads: fn must be thread-safe. Set before the first add().
  void set_listener(std::function<void(uint64_t, uint64_t)> fn) { listener_ = std::move(fn); }
  // Prints the final line ("label: 2.91 GiB in 1.9 s, 1.53 GB/s") once; later calls do nothing.
  void finish();
  // Prints a one-time note on its own line (e.g. "O_DIRECT refused ..."), keeping the bar intact.
  void note(const std::string& text);

  uint64_t done() const { return done_.load(); }
  uint64_t total() const { return total_; }
  double elapsed_s() const;
  bool quiet() const { return mode_ == ProgressMode::Quiet; }

 private:
  void draw(bool force);

  std::string label_;
  uint64_t total_;
  ProgressMode mode_;
  std::FILE* out_;
  double plain_interval_s_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::function<void(uint64_t, uint64_t)> listener_;
  std::mutex mu_;
  double last_draw_s_ = -1.0;
  bool drawn_ = false, finished_ = false;
};

// ---- definitions ----

inline std::string format_bytes(uint64_t b) {
  const double x = static_cast<double>(b);
  if (b >= (uint64_t(1) << 30)) return fmt::format("{:.2f} GiB", x / double(uint64_t(1) << 30));
  if (b >= (uint64_t(1) << 20)) return fmt::format("{:.1f} MiB", x / double(1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", x / 1024.0);
  return fmt::format("{} B", b);
}

namespace progress_detail {

inline std::string format_seconds(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  const auto m = static_cast<int64_t>(s / 60);
  return fmt::format("{}m{:02d}s", m, static_cast<int>(s - 60.0 * double(m)));
}

}  // namespace progress_detail

inline std::string format_progress_line(std::string_view label, uint64_t done, uint64_t total,
                                        double elapsed_s, int bar_width) {
  const double frac = total ? std::min(1.0, double(done) / double(total)) : 1.0;
  std::string s(label);
  if (bar_width > 0) {
    const int fill = static_cast<int>(std::floor(frac * bar_width));
    s += " [" + std::string(fill, '#') + std::string(bar_width - fill, '.') + "]";
  }
  s += fmt::format(" {:3d}%  {} / {}", static_cast<int>(std::floor(frac * 100.0)), format_bytes(done),
                   format_bytes(total));
  if (elapsed_s > 0 && done > 0) {
    const double rate = double(done) / elapsed_s;  // bytes per second
    s += fmt::format("  {:.1f} MB/s", rate / 1e6);
    s += "  ETA " + progress_detail::format_seconds(done >= total ? 0.0 : double(total - done) / rate);
  } else {
    s += "  -- MB/s  ETA --";
  }
  return s;
}

inline Progress::Progress(std::string label, uint64_t total, ProgressMode mode, std::FILE* out,
                          double plain_interval_s)
    : label_(std::move(label)),
      total_(total),
      mode_(mode),
      out_(out),
      plain_interval_s_(plain_interval_s),
      start_(std::chrono::steady_clock::now()) {
  if (mode_ == ProgressMode::Auto)
    mode_ = out_ && isatty(fileno(out_)) ? ProgressMode::Tty : ProgressMode::Plain;
  if (!out_) mode_ = ProgressMode::Quiet;
}

inline Progress::~Progress() {
  // A load that threw leaves the bar's line open: end it so the error starts on its own line.
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_ && !finished_ && mode_ == ProgressMode::Tty) std::fputc('\n', out_);
}

inline double Progress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

inline void Progress::add(uint64_t bytes) {
  const uint64_t now = done_.fetch_add(bytes) + bytes;
  if (listener_) listener_(now, total_);
  if (mode_ != ProgressMode::Quiet) draw(false);
}

inline void Progress::draw(bool force) {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  const double t = elapsed_s();
  const double every = mode_ == ProgressMode::Tty ? 0.1 : plain_interval_s_;
  if (!force && last_draw_s_ >= 0 && t - last_draw_s_ < every) return;
  if (!force && last_draw_s_ < 0 && mode_ == ProgressMode::Plain && t < every) return;  // short loads: quiet
  last_draw_s_ = t;
  const std::string line = format_progress_line(label_, done_.load(), total_, t);
  if (mode_ == ProgressMode::Tty)
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
  else
    std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  drawn_ = true;
}

inline void Progress::note(const std::string& text) {
  if (mode_ == ProgressMode::Quiet) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_ && mode_ == ProgressMode::Tty) std::fputs("\r\x1b[K", out_);
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
  last_draw_s_ = -1.0;  // the bar comes back on the next add()
}

inline void Progress::finish() {
  if (mode_ == ProgressMode::Quiet) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  const double t = elapsed_s();
  const uint64_t d = done_.load();
  if (mode_ == ProgressMode::Tty && drawn_) std::fputs("\r\x1b[K", out_);
  std::fprintf(out_, "%s: %s in %.2f s, %.2f GB/s\n", label_.c_str(), format_bytes(d).c_str(), t,
               t > 0 ? double(d) / t / 1e9 : 0.0);
  std::fflush(out_);
}

}  // namespace bloomery
