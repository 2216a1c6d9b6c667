// SocketComm over loopback TCP, ranks as threads: the same sums (rank order) as ThreadGroup, gathers and
// broadcasts from any root; a rank that gives up is named to the others at once; bad --nodes are refused.
#include "parallel/socket_comm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "parallel/thread_group.h"

namespace bloomery {
namespace {

using namespace std::chrono_literals;

int test_port(int k) {
  return 30000 + (int(getpid()) * 7 + k * 13) % 20000;
}

// Runs fn(comm) on `size` threads connected through 127.0.0.1; returns each rank's error id ("" if none).
std::vector<std::string> run_ranks(int size, int port, std::chrono::milliseconds timeout,
                                   const std::function<void(Communicator&)>& fn) {
  std::vector<std::string> errors(size);
  std::vector<std::thread> ts;
  for (int r = 0; r < size; ++r)
    ts.emplace_back([&, r] {
      try {
        auto c = SocketComm::connect(r, size, NodeAddress{"127.0.0.1", port}, timeout, 10000ms);
        try {
          fn(*c);
        } catch (const std::exception& e) {
          c->abort(e.what());
          throw;
        }
      } catch (const Error& e) {
        errors[r] = e.id() + " | " + e.what();
      }
    });
  for (auto& t : ts) t.join();
  return errors;
}

TEST(SocketComm, CollectivesMatchTheInProcessGroupBitForBit) {
  const int size = 3;
  auto values = [](int rank, std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = (i == 0 ? (rank == 1 ? 1e8f : rank == 2 ? -1e8f : 1.0f) : 0.1f * float(rank + i));
  };
  std::vector<std::vector<float>> want(size), got(size), gathered(size);
  std::vector<int> bcast(size);
  ThreadGroup g(size, 2000ms);
  g.run([&](Communicator& c) {
    std::vector<float> v(100);
    values(c.rank(), v);
    c.all_reduce_sum(v.data(), v.size(), "sum");
    want[c.rank()] = v;
  });
  const auto errors = run_ranks(size, test_port(1), 5000ms, [&](Communicator& c) {
    std::vector<float> v(100);
    values(c.rank(), v);
    c.all_reduce_sum(v.data(), v.size(), "sum");
    got[c.rank()] = v;
    const float mine[2] = {float(c.rank()), float(10 * c.rank())};
    gathered[c.rank()].resize(2 * size);
    c.all_gather(mine, 2, gathered[c.rank()].data(), "gather");
    int b = c.rank() == 2 ? 42 : -1;
    c.broadcast(&b, sizeof(b), 2, "broadcast from rank 2");
    bcast[c.rank()] = b;
    c.barrier("barrier");
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(got[r].size(), want[r].size());
    EXPECT_EQ(0, std::memcmp(got[r].data(), want[0].data(), want[0].size() * 4)) << "rank " << r;
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 0, 1, 10, 2, 20}));
    EXPECT_EQ(bcast[r], 42);
  }
}

TEST(SocketComm, ARankThatGivesUpIsNamedToTheOthers) {
  const auto errors = run_ranks(3, test_port(2), 20000ms, [&](Communicator& c) {
    float x = 1;
    c.all_reduce_sum(&x, 1, "step 0");
    if (c.rank() == 2) raise("E_TEST_RANK_DIED", Where{}, "alive", "gone");
    c.all_reduce_sum(&x, 1, "step 1");
  });
  EXPECT_NE(errors[2].find("E_TEST_RANK_DIED"), std::string::npos) << errors[2];
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r].rfind("E_TP_RANK_ABORTED", 0), 0u) << errors[r];
    EXPECT_NE(errors[r].find("rank 2: E_TEST_RANK_DIED"), std::string::npos) << errors[r];
  }
}

TEST(SocketComm, LateRankIsNamedWithinTheDeadline) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = run_ranks(2, test_port(3), 400ms, [&](Communicator& c) {
    float x = 1;
    if (c.rank() == 1) std::this_thread::sleep_for(1500ms);
    c.all_reduce_sum(&x, 1, "layer 1 MLP all-reduce");
  });
  EXPECT_EQ(errors[0].rfind("E_TP_TIMEOUT", 0), 0u) << errors[0];
  EXPECT_NE(errors[0].find("rank 1 did not arrive"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1], "");  // the late rank learns it was too late
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A rank stopped (SIGSTOP) between a message's header and its bytes is late, not gone: rank 0 says
// E_TP_TIMEOUT, and E_TP_RANK_FAILED only once the connection really closes. The fake rank 1 speaks the wire
// format by hand: Hello {rank, size}, then a Header {op 1 = all-reduce, pad, bytes} without its bytes.
TEST(SocketComm, RankStalledMidMessageIsLateNotGone) {
  const int port = test_port(4);
  std::string error;
  std::thread leader([&] {
    try {
      auto c = SocketComm::connect(0, 2, NodeAddress{"127.0.0.1", port}, 400ms, 10000ms);
      float x = 1;
      c->all_reduce_sum(&x, 1, "layer 0 MLP all-reduce");
    } catch (const Error& e) {
      error = e.id() + " | " + e.what();
    }
  });
  int fd = -1;
  for (int tries = 0; tries < 200 && fd < 0; ++tries) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      fd = -1;
      std::this_thread::sleep_for(50ms);
    }
  }
  ASSERT_GE(fd, 0);
  const int32_t hello[2] = {1, 2};
  const uint32_t header[4] = {1, 0, 4, 0};  // op, pad, bytes (u64, little-endian) = 4
  ASSERT_EQ(write(fd, hello, sizeof(hello)), ssize_t(sizeof(hello)));
  ASSERT_EQ(write(fd, header, sizeof(header)), ssize_t(sizeof(header)));
  leader.join();  // the fake rank stays silent and connected
  close(fd);
  EXPECT_EQ(error.rfind("E_TP_TIMEOUT", 0), 0u) << error;
  EXPECT_NE(error.find("rank 1 stalled mid-message"), std::string::npos) << error;
}

TEST(SocketComm, BadNodeListsAreRefusedByName) {
  EXPECT_EQ(parse_nodes("a:1,127.0.0.1:29500").size(), 2u);
  for (const char* bad : {"", "host", "host:", ":80", "h:0", "h:70000", "h:12x", "a:1,,b:2"}) {
    try {
      parse_nodes(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.id(), "E_TP_NODES");
    }
  }
}

}  // namespace
}  // namespace bloomery
