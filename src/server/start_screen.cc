#include "server/start_screen.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/select/backend_choice.h"

namespace bloomery::server {

std::string human_bytes(uint64_t b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(b);
  int u = 0;
  while (x >= 1024.0 && u < 4) {
    x /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.2f} {}", x, unit[u]);
}

ServePlan plan_serving(const ServerOptions& o, const CheckpointSummary& s, int hardware_threads) {
  ServePlan p;
  if (o.n_parallel > 0) {
    p.n_slots = o.n_parallel;
  } else {
    p.n_slots = 4;
    p.choices.push_back("slots: 4 (auto: llama-server's auto picks at most 4; change with -np/--parallel)");
  }
  if (o.ctx_size > 0) {
    p.n_ctx_total = o.ctx_size;
  } else {
    p.n_ctx_total = s.max_positions > 0 ? s.max_positions : 4096;
    p.choices.push_back(fmt::format(
        "context: {} tokens in all ({}; change with -c/--ctx-size)", p.n_ctx_total,
        s.max_positions > 0 ? "the model's max_position_embeddings" : "the model does not say; 4096"));
  }
  p.n_ctx_slot = p.n_ctx_total / p.n_slots;
  if (s.max_positions > 0 && p.n_ctx_slot > s.max_positions) p.n_ctx_slot = s.max_positions;
  p.threads = o.threads > 0 ? o.threads : std::max(1, hardware_threads);
  if (o.threads <= 0)
    p.choices.push_back(fmt::format("engine threads: {} (every core; change with -t/--threads)", p.threads));
  // Connections are served one thread each (connection_layer.h), so --threads-http sizes nothing.
  p.http_threads = 0;
  p.choices.push_back(fmt::format(
      "HTTP: one thread per connection, at most {} connections (--http-max-connections), bodies up to {} MiB "
      "(--http-max-body), headers within {} s (--http-header-timeout)",
      o.http_max_connections, o.http_max_body_mib, o.http_header_timeout));
  if (o.threads_http > 0)
    p.choices.push_back("--threads-http is accepted and ignored: each connection has its own thread");
  if (!o.user_set("n-predict"))
    p.choices.push_back("generation limit: until EOS or the slot's context end (change with -n/--n-predict)");
  if (!o.user_set("temp"))
    p.choices.push_back(
        fmt::format("sampling defaults: temp {} top-k {} top-p {} min-p {} (change with --temp, "
                    "--top-k, --top-p, --min-p)",
                    o.temperature, o.top_k, o.top_p, o.min_p));
  if (o.api_keys.empty())
    p.choices.push_back("no API key: every client is accepted (set one with --api-key)");
  else  // how many, never which
    p.choices.push_back(fmt::format("API keys: {} loaded; every route but /health and /v1/models needs one",
                                    o.api_keys.size()));
  if (!o.metrics) p.choices.push_back("/metrics off (turn on with --metrics)");
  return p;
}

std::string start_screen(const ServerOptions& o, const EngineHost& host, const ServePlan& plan,
                         const MemoryPlan& memory) {
  const CheckpointSummary& s = host.summary();
  std::string out;
  out += "bloomery-serve 0.1.0\n";
  out += fmt::format("model       {} ({}, {} tensors, {} parameters)\n", o.model, s.family, s.n_tensors,
                     s.n_params);
  out += fmt::format("folder      {}\n", s.folder_kind);
  // A --nodes rank r runs on GPU r (mod the GPUs it sees, as make_backend picks it).
  const int device = o.nodes.empty() ? 0 : o.node_rank % std::max(1, cuda_device_count());
  out += fmt::format("engine      {} ({})\n",
                     host.backend_name() == "cuda" ? fmt::format("CUDA, device {}", device) : "CPU",
                     host.backend_why());
  if (const std::string d = host.decode_steps(); !d.empty()) out += "decode      " + d + "\n";
  if (host.tp_size() > 1)
    out +=
        o.nodes.empty()
            ? fmt::format("parallel    tensor parallel over {} {} ranks in this process (--tp)\n",
                          host.tp_size(), host.backend_name() == "cuda" ? "CUDA" : "CPU")
            : fmt::format("parallel    tensor parallel, rank {} of {} over --nodes {}{}\n", o.node_rank,
                          host.tp_size(), o.nodes, o.node_rank == 0 ? " (serves HTTP)" : " (follows rank 0)");
  out += "formats     role                 stored bytes   formats\n";
  for (const auto& [role, bytes] : s.bytes_by_role) {
    auto it = s.formats_by_role.find(role);
    out += fmt::format("            {:<20} {:>12}   {}\n", role, human_bytes(bytes),
                       it == s.formats_by_role.end() ? "" : it->second);
  }
  out += fmt::format("            {:<20} {:>12}\n", "total", human_bytes(s.stored_bytes));
  // The loader's memory plan (models/memory_plan.h): weights as the engine keeps them, KV/state from the
  // model for every slot, scratch, against the engine's free memory.
  for (const auto& line : memory.lines()) out += "            " + line + "\n";
  out += fmt::format("            state per slot {} (x {} slots; K/V cache in {}, -ctk/-ctv)\n",
                     human_bytes(host.state_bytes_estimate(plan.n_ctx_slot)), plan.n_slots,
                     elem_name(host.kv_type()));
  out += fmt::format("slots       {} x {} tokens of context (-c {} over -np {})\n", plan.n_slots,
                     plan.n_ctx_slot, plan.n_ctx_total, plan.n_slots);
  out += fmt::format("batching    -b {} prompt tokens per step, -ub {} per sequence\n", o.batch_size,
                     o.ubatch_size);
  out += fmt::format("listening   http://{}:{}\n", o.host, o.port);
  if (o.device == "auto")
    out += fmt::format("choice      engine: {} ({}; change with -dev/--device none|cuda0)\n",
                       host.backend_name(), host.backend_why());
  for (const auto& c : plan.choices) out += "choice      " + c + "\n";
  for (const auto& [flag, src] : o.source)
    if (src != "command line") out += fmt::format("env         --{} from {}\n", flag, src);
  for (const auto& w : o.warnings) out += "warning     " + w + "\n";
  for (const auto& w : s.warnings) out += "warning     " + w + "\n";
  return out;
}

}  // namespace bloomery::server
