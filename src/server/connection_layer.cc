#include "server/connection_layer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

namespace bloomery::server {
namespace {

using Clock = std::chrono::steady_clock;

// The most a request line plus headers may take (cpp-httplib limits each line, not their number).
constexpr uint64_t kMaxHead = 256u << 10;

// Polls one socket for `events` up to `ms` milliseconds (retrying on EINTR): > 0 ready, 0 timed out, < 0
// error.
int poll_for(int sock, short events, int ms) {
  pollfd p{sock, events, 0};
  for (;;) {
    int r = ::poll(&p, 1, ms < 0 ? 0 : ms);
    if (r < 0 && errno == EINTR) continue;
    if (r > 0 && (p.revents & (POLLERR | POLLNVAL)) && !(p.revents & events)) return -1;
    return r;
  }
}

void addr_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  int r = peer ? ::getpeername(sock, reinterpret_cast<sockaddr*>(&a), &len)
               : ::getsockname(sock, reinterpret_cast<sockaddr*>(&a), &len);
  if (r != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf));
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf));
    port = ntohs(v6->sin6_port);
  }
  ip = buf;
}

// A socket stream whose reads run against one deadline for the request's head and one for its body, and
// whose reads are buffered (httplib's line reader asks for one byte at a time).
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(int sock, int write_timeout_s) : sock_(sock), write_timeout_ms_(write_timeout_s * 1000) {}

  void set_read_deadline(Clock::time_point t) { deadline_ = t; }
  void clear_read_deadline() { deadline_ = Clock::time_point::max(); }
  // Bytes the rest of this request may still read (a chunked body has no Content-Length to check first).
  void set_read_budget(uint64_t bytes) { budget_ = bytes; }
  bool has_buffered() const { return off_ < len_; }

  bool is_readable() const override { return has_buffered() || poll_for(sock_, POLLIN, ms_left()) > 0; }
  bool is_writable() const override { return poll_for(sock_, POLLOUT, write_timeout_ms_) > 0 && alive(); }

  ssize_t read(char* ptr, size_t size) override {
    if (!has_buffered()) {
      if (poll_for(sock_, POLLIN, ms_left()) <= 0) return -1;  // the deadline passed, or the socket failed
      if (size >= sizeof(buf_)) {
        ssize_t n = recv_some(ptr, budget_ >= size ? size : budget_ + 1);
        if (n > 0 && static_cast<uint64_t>(n) > budget_) return -1;
        if (n > 0) budget_ -= static_cast<uint64_t>(n);
        return n;
      }
      ssize_t n = recv_some(buf_, sizeof(buf_));
      if (n <= 0) return n;
      off_ = 0;
      len_ = static_cast<size_t>(n);
    }
    size_t n = std::min(size, len_ - off_);
    if (n > budget_) return -1;  // past the body limit: the request fails and the connection closes
    budget_ -= n;
    std::memcpy(ptr, buf_ + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (poll_for(sock_, POLLOUT, write_timeout_ms_) <= 0) return -1;
    for (;;) {
      ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { addr_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { addr_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  int ms_left() const {
    if (deadline_ == Clock::time_point::max()) return 60 * 60 * 1000;  // a route reading: no deadline
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    return ms <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms, 1 << 30));
  }
  // The peer has not closed: nothing to read, or data waiting (a pipelined request).
  bool alive() const {
    int r = poll_for(sock_, POLLIN, 0);
    if (r == 0) return true;
    if (r < 0) return false;
    char c;
    return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  ssize_t recv_some(char* p, size_t n) {
    for (;;) {
      ssize_t r = ::recv(sock_, p, n, 0);
      if (r < 0 && errno == EINTR) continue;
      return r;
    }
  }

  int sock_;
  int write_timeout_ms_;
  Clock::time_point deadline_ = Clock::time_point::max();
  uint64_t budget_ = UINT64_MAX;
  char buf_[4096];
  size_t off_ = 0, len_ = 0;
};

// The connection being served on this thread (null outside a connection's thread).
struct Connection {
  DeadlineStream* stream = nullptr;
  int body_timeout_s = 60;
  uint64_t max_body = UINT64_MAX;
  bool close_after = false;
};
thread_local Connection* t_connection = nullptr;

// After an answer sent without reading the request's body (413, 401, 503): stop writing, then read and drop
// what the client is still sending for a moment, so it reads the answer instead of a connection reset.
void linger_close(int sock, int ms, size_t max_bytes) {
  ::shutdown(sock, SHUT_WR);
  char sink[16384];
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  size_t drained = 0;
  while (drained < max_bytes) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0 || poll_for(sock, POLLIN, static_cast<int>(left)) <= 0) break;
    ssize_t n = ::recv(sock, sink, sizeof(sink), MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

// Past the cap: a complete 503 in the OpenAI error format, then close. What the client sent is read (a
// little, briefly) first, so closing does not reset the connection before the answer is read.
void refuse_busy(int sock) {
  static const std::string body =
      R"({"error":{"code":503,"message":"the server has too many open connections; retry shortly","type":"unavailable_error"}})";
  const std::string msg =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  if (poll_for(sock, POLLOUT, 1000) > 0) (void)::send(sock, msg.data(), msg.size(), MSG_NOSIGNAL);
  ::shutdown(sock, SHUT_WR);
  char sink[4096];
  auto end = Clock::now() + std::chrono::milliseconds(200);
  size_t drained = 0;
  while (Clock::now() < end && drained < (1 << 16) && poll_for(sock, POLLIN, 50) > 0) {
    ssize_t n = ::recv(sock, sink, sizeof(sink), MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

}  // namespace

GuardedServer::GuardedServer(const ConnectionLimits& limits) : limits_(limits) {
  // What cpp-httplib announces in its Keep-Alive header: this loop's numbers.
  keep_alive_max_count_ = limits.keep_alive_max_requests;
  keep_alive_timeout_sec_ = limits.keep_alive_s;
  new_task_queue = [] { return new ThreadPerConnection(); };
  // Exclusive listen: SO_REUSEADDR only (a restart may bind over TIME_WAIT), never SO_REUSEPORT, so a second
  // server on the same port fails to bind instead of sharing the traffic.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

GuardedServer::~GuardedServer() = default;

void GuardedServer::head_received() {
  if (!t_connection || !t_connection->stream) return;
  t_connection->stream->set_read_deadline(Clock::now() + std::chrono::seconds(t_connection->body_timeout_s));
  // Room for chunked framing above the body limit; a Content-Length above it is refused before this.
  t_connection->stream->set_read_budget(t_connection->max_body + (64u << 10));
}

void GuardedServer::close_after_response() {
  if (t_connection) t_connection->close_after = true;
}

bool GuardedServer::wait_next_request(int sock) const {
  // In slices, so a stopping server closes idle connections at once instead of after the keep-alive time.
  auto end = Clock::now() + std::chrono::seconds(limits_.keep_alive_s);
  while (Clock::now() < end) {
    if (svr_sock_ == INVALID_SOCKET) return false;
    int r = poll_for(sock, POLLIN, 200);
    if (r != 0) return r > 0;
  }
  return false;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  const int open = ++open_;
  bool ok = true;
  if (open > limits_.max_connections) {
    ++refused_;
    refuse_busy(sock);
    ok = false;
  } else {
    // cpp-httplib writes a response's head and body in separate sends: with Nagle on, the second waits for
    // the client's delayed ACK (~40 ms a request on Linux).
    int yes = 1;
    ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    DeadlineStream stream(sock, limits_.write_timeout_s);
    Connection conn{&stream, limits_.body_timeout_s, limits_.max_body_bytes, false};
    t_connection = &conn;
    for (size_t count = 0; count < limits_.keep_alive_max_requests; ++count) {
      if (svr_sock_ == INVALID_SOCKET) break;  // stopping
      // Between requests: wait up to the keep-alive time for the next one's first byte (the first request
      // has the header deadline for that too).
      if (count > 0 && !stream.has_buffered() && !wait_next_request(sock)) break;
      stream.set_read_deadline(Clock::now() + std::chrono::seconds(limits_.header_timeout_s));
      stream.set_read_budget(kMaxHead);
      const bool last = count + 1 == limits_.keep_alive_max_requests;
      bool closed = false;
      ok = process_request(stream, last, closed, nullptr);
      stream.clear_read_deadline();
      stream.set_read_budget(UINT64_MAX);
      if (!ok || closed || last || conn.close_after) break;
    }
    t_connection = nullptr;
    if (conn.close_after) linger_close(sock, 1000, size_t{256} << 20);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  --open_;
  return ok;
}

void ThreadPerConnection::enqueue(std::function<void()> fn) {
  {
    std::lock_guard lk(mu_);
    ++running_;
  }
  auto task = std::make_shared<std::function<void()>>(std::move(fn));
  auto finish = [this] {
    std::lock_guard lk(mu_);
    if (--running_ == 0) done_.notify_all();
  };
  try {
    std::thread([task, finish] {
      (*task)();
      finish();
    }).detach();
  } catch (const std::system_error&) {
    // No thread to be had (the process limit): serve this one on the accept thread rather than drop it; the
    // connection cap keeps this rare.
    (*task)();
    finish();
  }
}

void ThreadPerConnection::shutdown() {
  std::unique_lock lk(mu_);
  done_.wait(lk, [this] { return running_ == 0; });
}

}  // namespace bloomery::server
