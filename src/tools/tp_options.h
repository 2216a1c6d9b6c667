// The tensor-parallel flags `bloomery run` and `bloomery bench` share (bloomery-serve's are in its flag
// table): --tp, --nodes, --node-rank, --collective-timeout-ms, and the backend the ranks run on.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "parallel/tp_group.h"

namespace bloomery::tools {

void add_tp_options(CLI::App& app, TpFlags& flags);

// Under TP, --backend auto stays on CPU ranks: CUDA ranks (NCCL, the one-GPU loopback) are taken only when
// asked for (--backend cuda) until a GPU run has verified them (issue 16).
void tp_backend(const TpLayout& layout, std::string& backend_name);

}  // namespace bloomery::tools
