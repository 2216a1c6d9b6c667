// The HTTP side of bloomery-serve: routes (OpenAI and llama.cpp), API keys, error bodies, the body limit, the
// loading and draining states behind /health. Connections are served by connection_layer.h.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "server/engine_host.h"
#include "server/flags.h"
#include "server/metrics.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace bloomery::server {

class GuardedServer;

class HttpServer {
 public:
  HttpServer(const ServerOptions& options, int n_slots, int64_t n_ctx_slot);
  ~HttpServer();

  // Binds host:port exclusively, then serves on a background thread. Throws E_LISTEN (address, port and
  // the system's reason) when the port is taken or cannot be bound.
  void start();
  void stop();

  // Shutdown, first step: new requests are answered 503 (and /health says "Shutting down"); requests in
  // progress, streams included, go on. Safe from any thread.
  void begin_drain() { draining_.store(true); }
  // Requests in the engine (generating or waiting for a slot): 0 when the engine is not ready.
  int requests_in_flight();

  // Loading → ready: the engine becomes visible to the routes. Failure: /health says "Engine failed".
  void set_loading_progress(const std::string& message);
  void set_ready(EngineHost* host);
  void set_failed(const std::string& reason);
  ServerCounters& counters() { return counters_; }
  int bound_port() const { return bound_port_; }

 private:
  void routes();
  EngineHost& engine();  // throws 503 while loading
  void handle_completion(const httplib::Request& req, httplib::Response& res, int api);

  ServerOptions opts_;
  int n_slots_;
  int64_t n_ctx_slot_;
  std::unique_ptr<GuardedServer> http_;
  std::atomic<bool> draining_{false};
  std::thread thread_;
  std::atomic<EngineHost*> host_{nullptr};
  std::mutex state_mu_;
  std::string loading_message_ = "Loading model";
  std::string failure_;
  ServerCounters counters_;
  int bound_port_ = 0;
  int64_t created_ = 0;
};

}  // namespace bloomery::server
