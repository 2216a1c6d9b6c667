// The connection side of bloomery-serve, under cpp-httplib's request parser and router.
//
// cpp-httplib's own loop serves each connection from a fixed worker pool for as long as the connection stays
// open, with a per-read timeout only: an idle keep-alive connection holds a worker for its keep-alive time,
// and a client that sends half a request, or one header line a second, holds it for the whole read timeout.
// A few such clients starved every route, /health included (issue 18). Here instead:
//  - every connection gets its own thread (an idle one sleeps in poll; no request waits for a worker), up to
//    --http-max-connections; past that a new connection is answered 503 at once and closed;
//  - a request's line and headers must arrive within --http-header-timeout in total, and its body within
//    --http-body-timeout after that (deadlines on the whole, not on each read), so a drip cannot hold on;
//  - once a route runs there is no read deadline: a stream in progress is never cut by these limits (writes
//    keep the -to timeout, for a client that stops reading).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

#include <httplib.h>

namespace bloomery::server {

struct ConnectionLimits {
  int max_connections = 4096;
  int header_timeout_s = 10;
  int body_timeout_s = 60;
  uint64_t max_body_bytes = 32u << 20;
  int write_timeout_s = 3600;
  int keep_alive_s = 5;
  size_t keep_alive_max_requests = 10000;
};

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(const ConnectionLimits& limits);
  ~GuardedServer() override;

  // Connections open now (including ones being refused).
  int open_connections() const { return open_.load(); }
  // Connections refused with 503 because the cap was reached, since start.
  uint64_t refused_connections() const { return refused_.load(); }

  // From the pre-routing handler, on the connection's thread: the request's head has arrived, so its body
  // (if any) now runs against the body deadline.
  static void head_received();
  // From a route or the pre-routing handler: close the connection after this response (a body left unread,
  // a refused request).
  static void close_after_response();

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool wait_next_request(int sock) const;

  ConnectionLimits limits_;
  std::atomic<int> open_{0};
  std::atomic<uint64_t> refused_{0};
};

// One thread per task (connection), joined at shutdown: cpp-httplib's TaskQueue interface.
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  std::mutex mu_;
  std::condition_variable done_;
  int running_ = 0;
};

}  // namespace bloomery::server
