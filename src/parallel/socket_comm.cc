// SocketComm: a star of TCP connections through rank 0. Every message is a header (kind, bytes) and its
// bytes; every read waits at most the collective deadline (idle follower waits excepted), and a closed
// connection or an abort message names the rank it came from.
#include "parallel/socket_comm.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace bloomery {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kAllReduce = 1, kAllGather = 2, kBroadcast = 3, kBarrier = 4, kAbort = 99;

struct Hello {
  int32_t rank = 0, size = 0;
};

[[noreturn]] void connect_error(const NodeAddress& a, std::string expected, std::string found) {
  raise("E_TP_CONNECT", Where{"", "", fmt::format("--nodes {}:{}", a.host, a.port)}, std::move(expected),
        std::move(found));
}

// Small messages go out at once; TCP keepalive (probes after 5 s idle, every 2 s, 3 lost = dead) lets an idle
// follower notice that rank 0's host went away, where no collective deadline runs.
void tune_socket(int fd) {
  int one = 1, idle = 5, intvl = 2, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

addrinfo* resolve(const NodeAddress& a, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (int e = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); e != 0 || !res)
    connect_error(a, "a resolvable host", gai_strerror(e));
  return res;
}

// Reads exactly n bytes; false on timeout (deadline) or a closed connection (`closed` set).
bool read_exact(int fd, void* dst, size_t n, Clock::time_point deadline, bool forever, bool* closed) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    int wait_ms = -1;
    if (!forever) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      wait_ms = int(std::min<int64_t>(left, 1 << 30));
    }
    pollfd pfd{fd, POLLIN, 0};
    const int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) return false;
    const ssize_t got = recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      *closed = true;
      return false;
    }
    p += got;
    n -= size_t(got);
  }
  return true;
}

bool write_all(int fd, const void* src, size_t n) {
  auto* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const ssize_t put = send(fd, p, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= size_t(put);
  }
  return true;
}

}  // namespace

std::vector<NodeAddress> parse_nodes(std::string_view list) {
  std::vector<NodeAddress> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t end = std::min(list.find(',', start), list.size());
    const std::string item(list.substr(start, end - start));
    const size_t colon = item.rfind(':');
    int port = 0;
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < item.size();
    if (ok) {
      try {
        size_t used = 0;
        port = std::stoi(item.substr(colon + 1), &used);
        ok = used == item.size() - colon - 1 && port > 0 && port < 65536;
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok)
      raise("E_TP_NODES", Where{"", "", "--nodes"}, "host:port entries separated by commas",
            "'" + item + "'");
    out.push_back({item.substr(0, colon), port});
    start = end + 1;
  }
  return out;
}

std::unique_ptr<SocketComm> SocketComm::connect(int rank, int size, const NodeAddress& coordinator,
                                                std::chrono::milliseconds collective_timeout,
                                                std::chrono::milliseconds connect_timeout) {
  if (size < 1 || rank < 0 || rank >= size)
    raise("E_TP_SIZE", Where{"", "", "--node-rank"}, fmt::format("a rank in [0, {})", size),
          std::to_string(rank));
  std::unique_ptr<SocketComm> c(new SocketComm(rank, size, collective_timeout));
  c->fds_.assign(size, -1);
  const auto deadline = Clock::now() + connect_timeout;
  if (rank == 0) {
    addrinfo* ai = resolve(coordinator, true);
    const int lfd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (lfd < 0 || bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, size) != 0) {
      const std::string why = std::strerror(errno);
      freeaddrinfo(ai);
      if (lfd >= 0) close(lfd);
      connect_error(coordinator, "an address rank 0 can listen on", why);
    }
    freeaddrinfo(ai);
    for (int joined = 1; joined < size;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd pfd{lfd, POLLIN, 0};
      if (left <= 0 || poll(&pfd, 1, int(left)) <= 0) {
        close(lfd);
        connect_error(coordinator, fmt::format("{} ranks within {} ms", size, connect_timeout.count()),
                      fmt::format("{} joined", joined));
      }
      const int fd = accept(lfd, nullptr, nullptr);
      if (fd < 0) continue;
      tune_socket(fd);
      Hello h;
      bool closed = false;
      if (!read_exact(fd, &h, sizeof(h), deadline, false, &closed) || h.size != size || h.rank <= 0 ||
          h.rank >= size || c->fds_[h.rank] >= 0) {
        close(fd);
        close(lfd);
        connect_error(coordinator, fmt::format("a rank in [1, {}) of a world of {}, once", size, size),
                      fmt::format("rank {} of {}", h.rank, h.size));
      }
      c->fds_[h.rank] = fd;
      ++joined;
    }
    close(lfd);
  } else {
    for (;;) {
      addrinfo* ai = resolve(coordinator, false);
      const int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      const bool ok = fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
      freeaddrinfo(ai);
      if (ok) {
        tune_socket(fd);
        const Hello h{rank, size};
        if (!write_all(fd, &h, sizeof(h))) {
          close(fd);
          connect_error(coordinator, "rank 0 accepting", "the connection closed");
        }
        c->fds_[0] = fd;
        break;
      }
      if (fd >= 0) close(fd);
      if (Clock::now() > deadline)
        connect_error(coordinator, fmt::format("rank 0 listening within {} ms", connect_timeout.count()),
                      std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return c;
}

SocketComm::~SocketComm() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

void SocketComm::fail(std::string id, std::string_view what, std::string expected, std::string found) {
  const ErrorInfo info{std::move(id), Where{"", "", std::string(what)}, std::move(expected), std::move(found),
                       fmt::format("seen by rank {}", rank_)};
  abort(format_error(info));
  throw Error(info);
}

void SocketComm::abort(std::string_view why) {
  if (failed_) return;
  failed_ = true;
  const std::string text = fmt::format("rank {}: {}", rank_, why);
  const Header h{kAbort, 0, text.size()};
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || (rank_ != 0 && r != 0)) continue;
    const int fd = fd_of(r);
    if (fd >= 0 && write_all(fd, &h, sizeof(h))) write_all(fd, text.data(), text.size());
  }
}

void SocketComm::send_msg(int fd, int peer, uint32_t op, const void* data, uint64_t bytes,
                          std::string_view what) {
  const Header h{op, 0, bytes};
  if (!write_all(fd, &h, sizeof(h)) || (bytes && !write_all(fd, data, bytes)))
    fail("E_TP_RANK_FAILED", what, fmt::format("rank {} connected", peer),
         "its connection closed (process gone)");
}

void SocketComm::recv_msg(int fd, int peer, uint32_t op, void* data, uint64_t bytes, std::string_view what,
                          bool idle, std::chrono::milliseconds wait) {
  // Rank 0 names a late rank itself; the others wait longer, so that rank 0's diagnosis reaches them first.
  if (wait.count() <= 0) wait = timeout_;
  const auto deadline = Clock::now() + (rank_ == 0 ? wait : 2 * wait);
  Header h;
  bool closed = false;
  if (!read_exact(fd, &h, sizeof(h), deadline, idle, &closed)) {
    if (closed)
      fail("E_TP_RANK_FAILED", what, fmt::format("rank {} connected", peer),
           "its connection closed (process gone)");
    fail("E_TP_TIMEOUT", what, fmt::format("all {} ranks within {} ms", size_, wait.count()),
         fmt::format("rank {} did not arrive", peer));
  }
  if (h.op == kAbort) {
    std::string text(std::min<uint64_t>(h.bytes, 1 << 16), '\0');
    read_exact(fd, text.data(), text.size(), deadline, false, &closed);
    failed_ = false;  // pass the news on (rank 0 relays it to everyone)
    fail("E_TP_RANK_ABORTED", what, "every rank running", text);
  }
  if (h.op != op || h.bytes != bytes)
    fail("E_TP_MISMATCH", what, fmt::format("collective {} of {} bytes", op, bytes),
         fmt::format("rank {} at collective {} of {} bytes", peer, h.op, h.bytes));
  // A rank stalled between its header and its payload (SIGSTOP, a swapped-out host) is late, not gone.
  if (bytes && !read_exact(fd, data, bytes, deadline, false, &closed)) {
    if (closed)
      fail("E_TP_RANK_FAILED", what, fmt::format("rank {}'s {} bytes", peer, bytes),
           "its connection closed mid-message (process gone)");
    fail("E_TP_TIMEOUT", what, fmt::format("all {} ranks within {} ms", size_, wait.count()),
         fmt::format("rank {} stalled mid-message ({} bytes announced)", peer, bytes));
  }
}

void SocketComm::all_reduce_sum(float* data, size_t n, std::string_view what) {
  ++calls_;
  if (size_ == 1) return;
  if (failed_) fail("E_TP_RANK_FAILED", what, "a live group", "it failed before");
  const uint64_t bytes = n * sizeof(float);
  if (rank_ != 0) {
    send_msg(fds_[0], 0, kAllReduce, data, bytes, what);
    recv_msg(fds_[0], 0, kAllReduce, data, bytes, what, false);
    return;
  }
  std::vector<float> sum(data, data + n), v(n);
  for (int r = 1; r < size_; ++r) {  // rank order: ((v0 + v1) + v2) + …
    recv_msg(fds_[r], r, kAllReduce, v.data(), bytes, what, false);
    for (size_t i = 0; i < n; ++i) sum[i] += v[i];
  }
  for (int r = 1; r < size_; ++r) send_msg(fds_[r], r, kAllReduce, sum.data(), bytes, what);
  std::memcpy(data, sum.data(), bytes);
}

void SocketComm::all_gather(const float* in, size_t n, float* out, std::string_view what) {
  ++calls_;
  if (failed_) fail("E_TP_RANK_FAILED", what, "a live group", "it failed before");
  const uint64_t bytes = n * sizeof(float);
  if (rank_ != 0) {
    send_msg(fds_[0], 0, kAllGather, in, bytes, what);
    recv_msg(fds_[0], 0, kAllGather, out, bytes * size_, what, false);
    return;
  }
  std::memcpy(out, in, bytes);
  for (int r = 1; r < size_; ++r) recv_msg(fds_[r], r, kAllGather, out + size_t(r) * n, bytes, what, false);
  for (int r = 1; r < size_; ++r) send_msg(fds_[r], r, kAllGather, out, bytes * size_, what);
}

void SocketComm::broadcast(void* data, size_t bytes, int root, std::string_view what, bool idle) {
  ++calls_;
  if (size_ == 1) return;
  if (failed_) fail("E_TP_RANK_FAILED", what, "a live group", "it failed before");
  if (rank_ == 0) {
    if (root != 0) recv_msg(fds_[root], root, kBroadcast, data, bytes, what, false);
    for (int r = 1; r < size_; ++r)
      if (r != root) send_msg(fds_[r], r, kBroadcast, data, bytes, what);
  } else if (rank_ == root) {
    send_msg(fds_[0], 0, kBroadcast, data, bytes, what);
  } else {
    recv_msg(fds_[0], 0, kBroadcast, data, bytes, what, idle);
  }
}

void SocketComm::barrier(std::string_view what, std::chrono::milliseconds deadline) {
  ++calls_;
  if (size_ == 1) return;
  if (failed_) fail("E_TP_RANK_FAILED", what, "a live group", "it failed before");
  if (rank_ != 0) {
    send_msg(fds_[0], 0, kBarrier, nullptr, 0, what);
    recv_msg(fds_[0], 0, kBarrier, nullptr, 0, what, false, deadline);
    return;
  }
  for (int r = 1; r < size_; ++r) recv_msg(fds_[r], r, kBarrier, nullptr, 0, what, false, deadline);
  for (int r = 1; r < size_; ++r) send_msg(fds_[r], r, kBarrier, nullptr, 0, what);
}

}  // namespace bloomery
