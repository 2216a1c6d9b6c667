// bloomery-serve: flags and environment first (help and every flag error before any file is read), then the
// checkpoint checked and described, HTTP started (503 "Loading model"), weights loaded, /health 200.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "backend/select/backend_choice.h"
#include "core/error.h"
#include "server/engine_host.h"
#include "server/flags.h"
#include "server/http_server.h"
#include "server/rank_launch.h"
#include "server/start_screen.h"

extern char** environ;

namespace {
volatile std::sig_atomic_t g_stop = 0;
// The first SIGTERM/SIGINT starts the drain; a second one ends the process at once (exit status 130/143, as a
// shell reports a signal).
void on_signal(int sig) {
  if (g_stop) _exit(128 + sig);
  g_stop = 1;
}

// Each open connection is a file descriptor: lift the soft limit to the hard one, so the connection cap, not
// the default 1024, is what bounds them.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}
// A --nodes rank > 0: no HTTP. It loads its slices and runs rank 0's step plans until rank 0 stops, or
// until the group fails (exit 1, the reason on stderr). SIGTERM/SIGINT end it as any process.
int follow_rank0(const bloomery::server::ServerOptions& opts, bloomery::server::EngineHost& host,
                 const bloomery::server::ServePlan& plan) {
  using namespace bloomery;
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  try {
    SchedulerConfig sc{plan.n_slots, plan.n_ctx_slot, opts.batch_size, opts.ubatch_size};
    host.load(sc, plan.threads, {});
    fmt::print("rank {}      loaded; following rank 0 at {}\n", opts.node_rank, opts.nodes);
    std::fflush(stdout);
    host.follow();
  } catch (const std::exception& e) {
    fmt::print(stderr, "bloomery-serve: error: rank {}: {}\n", opts.node_rank, e.what());
    return 1;
  }
  fmt::print("bloomery-serve: rank {} stopped (rank 0 is done)\n", opts.node_rank);
  return 0;
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
  raise_fd_limit();
  // Each connection has its own thread, and glibc gives threads up to 8 malloc arenas per core, which grow
  // and seldom shrink: the soak saw +11 % RSS over 2,000 requests with them, -10 % with two (the same
  // requests). MALLOC_ARENA_MAX in the environment still wins.
  if (!std::getenv("MALLOC_ARENA_MAX")) mallopt(M_ARENA_MAX, 2);

  std::unique_ptr<EngineHost> host;
  ServePlan plan;
  MemoryPlan memory;
  bool rank_processes = false;  // --tp-launch: ranks 1 … N−1 start as processes once the checks pass
  try {
    host = EngineHost::prepare(opts);
    plan = plan_serving(opts, host->summary(), static_cast<int>(std::thread::hardware_concurrency()));
    // A slot must hold a short chat (template, prompt and a reply): below that every request would fail.
    constexpr int64_t kMinSlotContext = 64;
    if (plan.n_ctx_slot < kMinSlotContext)
      raise("E_FLAG_VALUE", Where{"", "", "-c/--ctx-size"},
            fmt::format("at least {} tokens ({} per slot x {} slots)", kMinSlotContext * plan.n_slots,
                        kMinSlotContext, plan.n_slots),
            fmt::format("{} ({} per slot)", opts.ctx_size, plan.n_ctx_slot),
            "raise -c or lower -np/--parallel");
    // The memory plan for the slots chosen, refused (E_MEMORY_PLAN) before anything is allocated.
    memory = host->memory_plan(plan.n_ctx_slot, plan.n_slots, opts.ubatch_size, opts.spec_type == "draft-mtp",
                               opts.cache_prompt);
    rank_processes =
        tp_processes(opts, host->backend_name(), host->backend_name() == "cuda" ? cuda_device_count() : 0);
    if (rank_processes) {  // this process becomes rank 0 of --nodes on 127.0.0.1
      opts.nodes = local_node_list(opts.tp);
      opts.node_rank = 0;
      host->use_nodes(opts.nodes, 0);
    }
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
  if (host->tp_size() > 1 && opts.node_rank > 0) return follow_rank0(opts, *host, plan);
  std::vector<pid_t> ranks;  // --tp-launch processes: ranks 1 … N−1, ended with this one
  if (rank_processes) {
    try {
      ranks = start_local_ranks(args, opts.nodes, opts.tp);
    } catch (const Error& e) {
      fmt::print(stderr, "bloomery-serve: error: {}\n", e.what());
      return 1;
    }
    fmt::print("parallel    ranks 1-{} started as processes (--tp-launch {})\n", opts.tp - 1, opts.tp_launch);
    std::fflush(stdout);
  }
  // The rank processes end when this one's group does; any still running after a grace period are killed.
  const auto stop_ranks = [&ranks] {
    if (!ranks.empty() && reap_local_ranks(ranks, std::chrono::seconds(10)) > 0)
      fmt::print(stderr, "bloomery-serve: rank processes still running after 10 s were killed\n");
  };
  HttpServer http(opts, plan.n_slots, plan.n_ctx_slot);
  try {
    http.start();
  } catch (const Error& e) {
    fmt::print(stderr, "bloomery-serve: error: {}\n", e.what());
    return 1;
  }
  fmt::print("http        serving (health 503 until the weights are loaded)\n");
  std::fflush(stdout);

  if (opts.load_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opts.load_delay_ms));
  auto t0 = std::chrono::steady_clock::now();
  try {
    SchedulerConfig sc{plan.n_slots, plan.n_ctx_slot, opts.batch_size, opts.ubatch_size};
    sc.cache_prompt = opts.cache_prompt;
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
    host.reset();  // a group torn down by the failure tells the rank processes why
    stop_ranks();
    return 1;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  http.counters().load_seconds = secs;
  http.counters().load_bytes = host->summary().stored_bytes;
  http.set_ready(host.get());
  fmt::print("ready       loaded {} in {:.2f} s; listening on http://{}:{}\n",
             human_bytes(host->summary().stored_bytes), secs, opts.host, opts.port);
  std::fflush(stdout);

  // A failed tensor-parallel group is told once here; /health already answers 503 with it, and the exit
  // status after the signal tells the supervisor.
  bool engine_failed = false;
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!engine_failed && !host->failure().empty()) {
      engine_failed = true;
      fmt::print(stderr, "bloomery-serve: error: engine failed: {}; /health answers 503 until stopped\n",
                 host->failure());
    }
  }
  // Drain: new requests get 503, requests in progress (streams included) may finish for --shutdown-timeout.
  http.begin_drain();
  int busy = http.requests_in_flight();
  fmt::print(
      "bloomery-serve: stopping: {} request{} in progress, waiting up to {} s (a second signal exits "
      "at once)\n",
      busy, busy == 1 ? "" : "s", opts.shutdown_timeout);
  std::fflush(stdout);
  const auto drain_end = std::chrono::steady_clock::now() + std::chrono::seconds(opts.shutdown_timeout);
  while ((busy = http.requests_in_flight()) > 0 && std::chrono::steady_clock::now() < drain_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (busy > 0) {
    fmt::print("bloomery-serve: {} request{} still running after --shutdown-timeout {}; exiting\n", busy,
               busy == 1 ? "" : "s", opts.shutdown_timeout);
    std::fflush(stdout);
    _exit(1);  // the engine thread is mid-request: no orderly teardown to wait for
  }
  fmt::print("bloomery-serve: stopped\n");
  std::fflush(stdout);
  http.stop();
  const int status = host->failure().empty() ? 0 : 1;
  host.reset();  // the group's end stops the rank processes
  stop_ranks();
  return status;
}
