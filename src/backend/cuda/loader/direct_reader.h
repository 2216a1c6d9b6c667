// Byte ranges of a TensorSource's files read with O_DIRECT: the range is widened to 4 KiB-aligned offsets and
// lengths, read into an aligned buffer, and the caller gets a pointer to its first byte inside it. A file the
// file system will not open or read with O_DIRECT (tmpfs, some overlays) is read buffered instead, and the
// caller is told once. Thread-safe; one instance per load. Header-only and free of CUDA (CPU tests use it).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "formats/tensor_source.h"

namespace bloomery::cuda {

constexpr uint64_t kDirectAlign = 4096;

class DirectReader {
 public:
  // note: called once, the first time a file falls back to buffered reads.
  DirectReader(const TensorSource& source, std::function<void(const std::string&)> note);
  ~DirectReader();
  DirectReader(const DirectReader&) = delete;
  DirectReader& operator=(const DirectReader&) = delete;

  // Bytes of region needed to read `len` bytes at any offset (alignment slack included).
  static uint64_t region_bytes(uint64_t len) {
    return (len + kDirectAlign - 1) / kDirectAlign * kDirectAlign + 2 * kDirectAlign;
  }
  // Reads [offset, offset + len) of file `file` (absolute offsets). `region` is kDirectAlign-aligned with at
  // least region_bytes(len) bytes. Returns where the bytes start inside region. Throws E_IO_READ.
  const uint8_t* read(uint32_t file, uint64_t offset, uint64_t len, uint8_t* region);

  uint64_t direct_bytes() const { return direct_bytes_.load(); }
  uint64_t buffered_bytes() const { return buffered_bytes_.load(); }

 private:
  int direct_fd(uint32_t file);  // -1: read this file buffered
  void fall_back(uint32_t file, const std::string& why);

  const TensorSource& source_;
  std::function<void(const std::string&)> note_;
  std::mutex mu_;
  std::vector<int> fds_;     // -2 = not opened yet, -1 = buffered
  std::vector<int> opened_;  // every O_DIRECT descriptor, closed by the destructor
  bool noted_ = false;
  std::atomic<uint64_t> direct_bytes_{0}, buffered_bytes_{0};
};

// ---- definitions ----

inline DirectReader::DirectReader(const TensorSource& source, std::function<void(const std::string&)> note)
    : source_(source), note_(std::move(note)), fds_(source.file_count(), -2) {}

inline DirectReader::~DirectReader() {
  for (int fd : opened_) ::close(fd);
}

inline void DirectReader::fall_back(uint32_t file, const std::string& why) {
  // Caller holds mu_. The descriptor stays open until the destructor: another thread may be reading with it.
  fds_[file] = -1;
  if (!noted_ && note_) {
    noted_ = true;
    note_(fmt::format("note: O_DIRECT refused for {} ({}); reading it (and any other such file) buffered",
                      source_.display_path(file), why));
  }
}

inline int DirectReader::direct_fd(uint32_t file) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fds_[file] == -2) {
    const int fd = ::open(source_.file(file).path().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0)
      fall_back(file, std::strerror(errno));
    else
      opened_.push_back(fds_[file] = fd);
  }
  return fds_[file];
}

inline const uint8_t* DirectReader::read(uint32_t file, uint64_t offset, uint64_t len, uint8_t* region) {
  if (len == 0) return region;
  const int fd = direct_fd(file);
  if (fd >= 0) {
    const uint64_t a0 = offset / kDirectAlign * kDirectAlign;
    const uint64_t a1 = (offset + len + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    const uint64_t want = offset + len - a0;  // bytes from a0 that must arrive (the tail past EOF may not)
    uint64_t got = 0;
    bool refused = false;
    while (got < want) {
      const ssize_t r = ::pread(fd, region + got, a1 - a0 - got, static_cast<off_t>(a0 + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && errno == EINVAL && got == 0) {  // the file system accepted the flag but not the read
        refused = true;
        break;
      }
      if (r <= 0)
        raise("E_IO_READ", Where{source_.display_path(file), "", ""},
              fmt::format("{} bytes at offset {}", len, offset),
              r < 0 ? std::string(std::strerror(errno)) : fmt::format("end of file after {} bytes", got));
      got += static_cast<uint64_t>(r);
      if (got % kDirectAlign != 0 && got < want)  // a short read mid-file: the rest is not aligned any more
        raise("E_IO_READ", Where{source_.display_path(file), "", ""},
              fmt::format("{} bytes at offset {}", len, offset),
              fmt::format("a short read of {} bytes", got));
    }
    if (!refused) {
      direct_bytes_ += len;
      return region + (offset - a0);
    }
    std::lock_guard<std::mutex> lock(mu_);
    fall_back(file, "EINVAL on read");
  }
  source_.file(file).read(offset, len, region);  // E_IO_READ on its own
  buffered_bytes_ += len;
  return region;
}

}  // namespace bloomery::cuda
