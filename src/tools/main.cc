// bloomery: the command-line tool (inspect, tensor, tokenize, run, bench, ...).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.h"
#include "tools/command.h"

namespace bloomery::tools {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

namespace {

void print_usage(FILE* out) {
  auto commands = command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
  std::fprintf(out, "usage: bloomery <command> [options]\n\ncommands:\n");
  for (const auto& c : commands) std::fprintf(out, "  %-10s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(out, "\n'bloomery <command> --help' shows a command's options.\n");
}

}  // namespace
}  // namespace bloomery::tools

int main(int argc, char** argv) {
  using namespace bloomery::tools;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : command_registry()) {
    if (c.name != argv[1]) continue;
    std::string prog = std::string("bloomery ") + argv[1];
    argv[1] = prog.data();
    try {
      return c.run(argc - 1, argv + 1);
    } catch (const bloomery::Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "bloomery: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
