// LocalTpRanks: rank 0 drives, the followers replay its step plans. Greedy generation through it equals
// TP = 1; a world size that does not divide is refused by name; a follower that dies or stalls mid-decode is
// named on rank 0 within the collective deadline, and nothing hangs.
#include "parallel/local_ranks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "../runtime/forwarding_backend.h"
#include "backend/cpu/cpu_backend.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kModels = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";
const std::vector<int32_t> kPrompt = {3, 17, 42, 99, 7, 250, 12, 1};

LoadOptions quiet() {
  LoadOptions o;
  o.progress = ProgressMode::Quiet;
  return o;
}

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// A CPU backend that misbehaves on one rank after `layers` layers: throws (a dead rank) or sleeps (a hung
// one).
class FaultyBackend : public test::ForwardingBackend {
 public:
  FaultyBackend(int layers, bool hang)
      : ForwardingBackend(std::make_unique<cpu::CpuBackend>(1)), left_(layers), hang_(hang) {}
  void on_step_layer_done() override {
    if (--left_ != 0) return;
    if (hang_)
      std::this_thread::sleep_for(3000ms);
    else
      raise("E_TEST_RANK_DIED", Where{}, "a live rank", "rank 1 died");
  }

 private:
  int left_;
  bool hang_;
};

TEST(LocalTpRanks, GreedyTokensEqualTp1) {
  const fs::path folder = kModels / "glm5_next-bf16";
  if (!fs::exists(folder)) GTEST_SKIP();
  cpu::CpuBackend be(1);
  auto lm = load_model(folder, be, quiet());
  Engine ref(be, *lm->model);
  const SeqId s1 = ref.add_sequence(64);
  std::vector<float> row = ref.prefill(s1, kPrompt);
  std::vector<int32_t> want;
  std::vector<std::vector<float>> want_rows;
  for (int i = 0; i < 6; ++i) {
    want_rows.push_back(row);
    want.push_back(argmax(row));
    const int32_t t[1] = {want.back()};
    row = ref.decode(std::span(&s1, 1), t)[0];
  }

  LocalTpRanks ranks(2, 10000ms, folder, quiet(), [](int) { return std::make_unique<cpu::CpuBackend>(1); });
  const SeqId s2 = ranks.add_sequence(64);
  row = ranks.prefill(s2, kPrompt);
  std::vector<int32_t> got;
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(row.size(), want_rows[i].size());
    for (size_t j = 0; j < row.size(); ++j)
      ASSERT_LE(std::fabs(row[j] - want_rows[i][j]), 1e-5f * std::max(1.0f, std::fabs(want_rows[i][j])));
    got.push_back(argmax(row));
    const int32_t t[1] = {got.back()};
    row = ranks.decode(std::span(&s2, 1), t)[0];
  }
  EXPECT_EQ(got, want);
  // A refused step (past the capacity) leaves every rank serving.
  std::vector<int32_t> too_long(80, 5);
  const SeqId s3 = ranks.add_sequence(16);
  EXPECT_THROW(ranks.prefill(s3, too_long), Error);
  ranks.remove_sequence(s3);
  const int32_t t[1] = {got.back()};
  EXPECT_EQ(ranks.decode(std::span(&s2, 1), t).size(), 1u);
}

// Two sequences decoded in one step (one step plan naming both) give each sequence's TP 1 tokens.
TEST(LocalTpRanks, BatchedDecodeOfTwoSequencesEqualsTp1) {
  const fs::path folder = kModels / "qwen4_exp-bf16";
  if (!fs::exists(folder)) GTEST_SKIP();
  const std::vector<int32_t> other = {250, 9, 77, 31};
  auto greedy_alone = [&](const std::vector<int32_t>& prompt) {
    cpu::CpuBackend be(1);
    auto lm = load_model(folder, be, quiet());
    Engine e(be, *lm->model);
    const SeqId s = e.add_sequence(64);
    std::vector<int32_t> out = {argmax(e.prefill(s, prompt))};
    for (int i = 0; i < 5; ++i) {
      const int32_t t[1] = {out.back()};
      out.push_back(argmax(e.decode(std::span(&s, 1), t)[0]));
    }
    return out;
  };
  const std::vector<int32_t> want_a = greedy_alone(kPrompt), want_b = greedy_alone(other);
  LocalTpRanks ranks(2, 10000ms, folder, quiet(), [](int) { return std::make_unique<cpu::CpuBackend>(1); });
  const SeqId seqs[2] = {ranks.add_sequence(64), ranks.add_sequence(64)};
  std::vector<int32_t> a = {argmax(ranks.prefill(seqs[0], kPrompt))},
                       b = {argmax(ranks.prefill(seqs[1], other))};
  for (int i = 0; i < 5; ++i) {
    const int32_t t[2] = {a.back(), b.back()};
    const auto rows = ranks.decode(seqs, t);
    a.push_back(argmax(rows[0]));
    b.push_back(argmax(rows[1]));
  }
  EXPECT_EQ(a, want_a);
  EXPECT_EQ(b, want_b);
}

TEST(LocalTpRanks, WorldSizeThatDoesNotDivideIsRefusedByName) {
  const fs::path folder = kModels / "glm5_next-bf16";
  if (!fs::exists(folder)) GTEST_SKIP();
  try {
    LocalTpRanks ranks(3, 2000ms, folder, quiet(), [](int) { return std::make_unique<cpu::CpuBackend>(1); });
    FAIL() << "tp 3 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_TP_CUT");
    EXPECT_NE(std::string(e.what()).find("4 MLA heads cannot be split over 3 ranks"), std::string::npos)
        << e.what();
  }
}

void expect_fault_named(bool hang, const std::string& id, const std::string& phrase) {
  const fs::path folder = kModels / "qwen3_next-bf16";
  if (!fs::exists(folder)) GTEST_SKIP();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    LocalTpRanks ranks(2, 1000ms, folder, quiet(), [&](int r) -> std::unique_ptr<Backend> {
      if (r == 1) return std::make_unique<FaultyBackend>(4 + 3, hang);  // dies in the second decode step
      return std::make_unique<cpu::CpuBackend>(1);
    });
    const SeqId s = ranks.add_sequence(64);
    std::vector<float> row = ranks.prefill(s, kPrompt);
    for (int i = 0; i < 5; ++i) {
      const int32_t t[1] = {argmax(row)};
      row = ranks.decode(std::span(&s, 1), t)[0];
    }
    FAIL() << "the faulty rank went unnoticed";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), id) << e.what();
    EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);  // no hang
}

TEST(LocalTpRanks, DeadFollowerIsNamedOnRankZero) {
  expect_fault_named(false, "E_TP_RANK_FAILED", "rank 1: E_TEST_RANK_DIED");
}

TEST(LocalTpRanks, HungFollowerIsNamedWithinTheDeadline) {
  expect_fault_named(true, "E_TP_TIMEOUT", "rank 1 did not arrive");
}

}  // namespace
}  // namespace bloomery
