#include "tools/tp_options.h"

#include "core/error.h"

namespace bloomery::tools {

void add_tp_options(CLI::App& app, TpFlags& f) {
  app.add_option("--tp", f.tp,
                 "tensor-parallel ranks in this process (CPU: a thread group each; CUDA: one GPU each, or "
                 "all on one GPU through the loopback)")
      ->check(CLI::Range(1, 64));
  app.add_option("--collective-timeout-ms", f.collective_timeout_ms,
                 "deadline of every inter-rank collective; a rank later than this is named and the run fails")
      ->check(CLI::Range(1, 3600000));
  app.add_option(
      "--nodes", f.nodes,
      "one rank per process: host:port,… (rank 0 listens on the first address, the others connect)");
  app.add_option("--node-rank", f.node_rank,
                 "this process's rank in --nodes (rank 0 drives, the others follow)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace bloomery::tools
