// The tensor-parallel flags `bloomery run` and `bloomery bench` share (bloomery-serve's are in its flag
// table): --tp, --nodes, --node-rank, --collective-timeout-ms. The ranks run on the backend --backend picks.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "parallel/tp_group.h"

namespace bloomery::tools {

void add_tp_options(CLI::App& app, TpFlags& flags);

}  // namespace bloomery::tools
