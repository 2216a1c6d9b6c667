// bloomery-serve: flags and environment first (help and every flag error before any file is read), then the
// checkpoint checked and described, HTTP started (503 "Loading model"), weights loaded, /health 200.
#include <csignal>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "server/engine_host.h"
#include "server/flags.h"
#include "server/http_server.h"
#include "server/start_screen.h"

extern char** environ;

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace bloomery;
  using namespace bloomery::server;
  std::vector<std::string> args(argv + 1, argv + argc);
  ServerOptions opts;
  try {
    std::vector<std::string> env_names;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      env_names.push_back(kv.substr(0, kv.find('=')));
    }
    opts = parse_flags(args, process_env());
    check_env_names(env_names);
  } catch (const Error& e) {
    fmt::print(stderr, "bloomery-serve: error: {}\n", e.what());
    return 2;
  }
  if (opts.help) {
    fmt::print("{}", help_text());
    return 0;
  }
  if (opts.version) {
    fmt::print("bloomery-serve 0.1.0\n");
    return 0;
  }
  std::signal(SIGPIPE, SIG_IGN);  // a client that leaves mid-stream must not end the server
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);

  std::unique_ptr<EngineHost> host;
  ServePlan plan;
  MemoryPlan memory;
  try {
    host = EngineHost::prepare(opts);
    plan = plan_serving(opts, host->summary(), static_cast<int>(std::thread::hardware_concurrency()));
    // The memory plan for the slots chosen, refused (E_MEMORY_PLAN) before anything is allocated.
    memory =
        host->memory_plan(plan.n_ctx_slot, plan.n_slots, opts.ubatch_size, opts.spec_type == "draft-mtp");
    fmt::print("{}", start_screen(opts, *host, plan, memory));
    std::fflush(stdout);
    check_memory_plan(memory, opts.model);
  } catch (const Error& e) {
    fmt::print(stderr, "bloomery-serve: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bloomery-serve: error: {}\n", e.what());
    return 1;
  }
  HttpServer http(opts, plan.n_slots, plan.n_ctx_slot);
  std::string err;
  if (!http.start(&err)) {
    fmt::print(stderr, "bloomery-serve: error: {}\n", err);
    return 1;
  }
  fmt::print("http        serving (health 503 until the weights are loaded)\n");
  std::fflush(stdout);

  if (opts.load_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opts.load_delay_ms));
  auto t0 = std::chrono::steady_clock::now();
  try {
    SchedulerConfig sc{plan.n_slots, plan.n_ctx_slot, opts.batch_size, opts.ubatch_size};
    if (opts.spec_type != "none")
      sc.spec = {opts.spec_n_max, opts.spec_n_min, static_cast<float>(opts.spec_p_min),
                 opts.spec_type == "ngram-simple"};
    // The loader draws the byte progress bar (core/progress.h) on stderr.
    host->load(sc, plan.threads, [&](size_t done, size_t total) {
      http.set_loading_progress(fmt::format("Loading model ({}%)", done * 100 / std::max<size_t>(total, 1)));
    });
  } catch (const std::exception& e) {
    http.set_failed(e.what());
    fmt::print(stderr, "\nbloomery-serve: error: loading failed: {}\n", e.what());
    http.stop();
    return 1;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  http.counters().load_seconds = secs;
  http.counters().load_bytes = host->summary().stored_bytes;
  http.set_ready(host.get());
  fmt::print("ready       loaded {} in {:.2f} s; listening on http://{}:{}\n",
             human_bytes(host->summary().stored_bytes), secs, opts.host, opts.port);
  std::fflush(stdout);

  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  fmt::print("bloomery-serve: stopping\n");
  http.stop();
  return 0;
}
