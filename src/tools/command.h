// The `bloomery` CLI's subcommands register themselves here; main.cc dispatches on the first argument.
// Each subcommand lives in its own file in src/tools/ and owns its flags (CLI11).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace bloomery::tools {

struct Command {
  std::string name;
  std::string summary;
  // argv[0] is "bloomery <name>"; returns the process exit code.
  std::function<int(int argc, char** argv)> run;
};

std::vector<Command>& command_registry();

struct RegisterCommand {
  RegisterCommand(std::string name, std::string summary, std::function<int(int, char**)> run) {
    command_registry().push_back({std::move(name), std::move(summary), std::move(run)});
  }
};

}  // namespace bloomery::tools
