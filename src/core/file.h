// Read-only file access by byte range (pread), so checkpoints are never copied whole into memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace bloomery {

class File {
 public:
  File() = default;
  // Opens for reading; throws Error E_IO_OPEN naming the path and the OS reason.
  explicit File(const std::filesystem::path& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;

  uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Reads exactly len bytes at offset; throws E_IO_READ (short read, OS error) naming the file and range.
  void read(uint64_t offset, uint64_t len, void* dst) const;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::filesystem::path path_;
};

// Whole small file (config.json and the like) as a string; throws E_IO_OPEN / E_IO_READ.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace bloomery
