#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace bloomery {

File::File(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) raise("E_IO_OPEN", {path.string(), {}, {}}, "a readable file", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    raise("E_IO_OPEN", {path.string(), {}, {}}, "a file whose size can be read", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    raise("E_IO_OPEN", {path.string(), {}, {}}, "a regular file", "another kind of file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

void File::read(uint64_t offset, uint64_t len, void* dst) const {
  if (offset > size_ || len > size_ - offset)
    raise("E_IO_READ", {path_.string(), {}, {}},
          "a range inside the file's " + std::to_string(size_) + " bytes",
          "bytes [" + std::to_string(offset) + ", " + std::to_string(offset + len) + ")");
  auto* p = static_cast<char*>(dst);
  while (len > 0) {
    ssize_t n = ::pread(fd_, p, len, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      raise("E_IO_READ", {path_.string(), {}, {}}, "a successful read at offset " + std::to_string(offset),
            std::strerror(errno));
    }
    if (n == 0)
      raise("E_IO_READ", {path_.string(), {}, {}},
            std::to_string(len) + " more bytes at offset " + std::to_string(offset), "end of file");
    p += n;
    offset += static_cast<uint64_t>(n);
    len -= static_cast<uint64_t>(n);
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  File f(path);
  std::string s(f.size(), '\0');
  if (!s.empty()) f.read(0, s.size(), s.data());
  return s;
}

}  // namespace bloomery
