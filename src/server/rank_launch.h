// --tp N on one host as one process per rank (--tp-launch; serving.md §1.3): rank 0 is this bloomery-serve,
// ranks 1 … N−1 copies of it started with --nodes over 127.0.0.1 and --node-rank r, which is the multi-node
// path on one machine (a CUDA rank r takes GPU r, and NCCL wants one process per GPU).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/flags.h"

namespace bloomery::server {

// True when the --tp ranks of this host run as processes: --tp-launch processes, or auto with CUDA ranks
// (`backend` "cuda") on at least as many GPUs as ranks. Never with --nodes (each node is a process already)
// or one rank.
bool tp_processes(const ServerOptions& o, const std::string& backend, int cuda_devices);

// `n` addresses 127.0.0.1:port for --nodes, each port free when picked (bound to port 0 and released).
// Throws E_TP_LAUNCH when the host has no free port.
std::string local_node_list(int n);

// Starts ranks 1 … n−1 as this executable with `args` (argv without the program, --tp-launch dropped) and
// --nodes `nodes` --node-rank r. Each child gets SIGTERM when this process dies (PR_SET_PDEATHSIG), so no
// rank outlives rank 0. Throws E_TP_LAUNCH naming the rank when a fork fails.
std::vector<pid_t> start_local_ranks(const std::vector<std::string>& args, const std::string& nodes, int n);

// Waits up to `grace` for the children (they stop when rank 0's group ends), then ends the rest with SIGKILL.
// Returns how many had to be killed.
int reap_local_ranks(const std::vector<pid_t>& pids, std::chrono::milliseconds grace);

}  // namespace bloomery::server
