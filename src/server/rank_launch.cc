#include "server/rank_launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace bloomery::server {

bool tp_processes(const ServerOptions& o, const std::string& backend, int cuda_devices) {
  if (o.tp <= 1 || !o.nodes.empty()) return false;
  if (o.tp_launch == "processes") return true;
  if (o.tp_launch == "threads") return false;
  return backend == "cuda" && cuda_devices >= o.tp;
}

std::string local_node_list(int n) {
  // All n sockets stay bound until every port is read, so the n ports differ.
  std::vector<int> fds;
  std::string list;
  for (int r = 0; r < n; ++r) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) close(fd);
      for (int f : fds) close(f);
      raise("E_TP_LAUNCH", Where{"", "", "--tp-launch"}, "a free port on 127.0.0.1 for every rank",
            "none for rank " + std::to_string(r) + ": " + why);
    }
    fds.push_back(fd);
    list += (r ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(ntohs(a.sin_port));
  }
  for (int f : fds) close(f);
  return list;
}

std::vector<pid_t> start_local_ranks(const std::vector<std::string>& args, const std::string& nodes, int n) {
  // The children's argv, built before forking (nothing but exec and _exit after fork in a threaded process).
  std::vector<std::string> base;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--tp-launch") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--tp-launch=", 0) == 0) continue;
    base.push_back(args[i]);
  }
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  for (int r = 1; r < n; ++r) {
    std::vector<std::string> argv_s = {"bloomery-serve"};
    argv_s.insert(argv_s.end(), base.begin(), base.end());
    argv_s.insert(argv_s.end(),
                  {"--nodes", nodes, "--node-rank", std::to_string(r), "--tp-launch", "threads"});
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      const std::string why = std::strerror(errno);
      for (pid_t p : pids) kill(p, SIGTERM);
      raise("E_TP_LAUNCH", Where{"", "", "--tp-launch"}, "a process for every rank",
            "fork failed for rank " + std::to_string(r) + ": " + why);
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);  // rank 0 died before the signal was armed
      execv("/proc/self/exe", argv.data());
      _exit(127);  // exec failed: rank 0 names this rank when it does not connect
    }
    pids.push_back(pid);
  }
  return pids;
}

int reap_local_ranks(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  std::vector<pid_t> left = pids;
  const auto end = std::chrono::steady_clock::now() + grace;
  while (!left.empty()) {
    std::erase_if(left, [](pid_t p) { return waitpid(p, nullptr, WNOHANG) != 0; });
    if (left.empty() || std::chrono::steady_clock::now() >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t p : left) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  return static_cast<int>(left.size());
}

}  // namespace bloomery::server
