// Model::state_bytes against what new_state really allocates (every allocation counted through a forwarding
// backend), and qwen4_exp's PLE readahead: the rows Model::prefetch names are exactly the rows the following
// forwards gather, and the hint leaves the state as it was.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_backend.h"
#include "forwarding_backend.h"
#include "models/model_loader.h"

namespace bloomery {
namespace {

namespace fs = std::filesystem;

const fs::path kModels = fs::path(BLOOMERY_SOURCE_DIR) / "tests/fixtures/models";

std::vector<std::string> folders(const std::string& prefix = "") {
  std::vector<std::string> r;
  if (fs::is_directory(kModels))
    for (const auto& e : fs::directory_iterator(kModels))
      if (e.is_directory() && e.path().filename().string().rfind(prefix, 0) == 0)
        r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  if (r.empty()) r.push_back("none");
  return r;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& i) {
  std::string n = i.param;
  std::replace_if(
      n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
  return n;
}

// Counts allocated bytes and records the row-table traffic of streamed tables (by weight name).
class Watching : public test::ForwardingBackend {
 public:
  Watching() : ForwardingBackend(make_cpu_backend(2)) {}
  void on_alloc(const Tensor& t) override {
    alloc_bytes += static_cast<uint64_t>(t.numel()) * elem_size(t.type());
  }
  void on_gather(const Weight& table, std::span<const int64_t> ids) override {
    if (table.streamed()) gathered[table.name()].insert(gathered[table.name()].end(), ids.begin(), ids.end());
  }
  void on_prefetch(const Weight& table, std::span<const int64_t> ids) override {
    prefetched[table.name()].insert(prefetched[table.name()].end(), ids.begin(), ids.end());
  }
  uint64_t alloc_bytes = 0;
  std::map<std::string, std::vector<int64_t>> gathered, prefetched;
};

class StateBytes : public ::testing::TestWithParam<std::string> {};

TEST_P(StateBytes, EqualsWhatNewStateAllocates) {
  if (GetParam() == "none") GTEST_SKIP() << "no fixture folders";
  Watching be;
  auto lm = load_model(kModels / GetParam(), be);
  for (int64_t cap : {1, 37, 512}) {
    be.alloc_bytes = 0;
    auto st = lm->model->new_state(be, cap);
    EXPECT_EQ(lm->model->state_bytes(cap), be.alloc_bytes) << "capacity " << cap;
    EXPECT_GT(be.alloc_bytes, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StateBytes, ::testing::ValuesIn(folders()), test_name);

class PlePrefetch : public ::testing::TestWithParam<std::string> {};

TEST_P(PlePrefetch, NamesTheRowsTheNextForwardsGather) {
  if (GetParam() == "none") GTEST_SKIP() << "no qwen4_exp fixture folders";
  Watching be;
  auto lm = load_model(kModels / GetParam(), be);
  Model& m = *lm->model;
  const int64_t V = m.info().vocab_size;
  std::vector<int32_t> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % V));
  ids[9] = m.info().eos_ids.empty() ? ids[9] : m.info().eos_ids[0];  // an EOS resets the n-gram context
  auto st = m.new_state(be, 64);
  m.forward(be, *st, std::span(ids).first(3), false);
  be.gathered.clear();
  // The scheduler's readahead: the chunk about to run and the one after it.
  const std::span<const int32_t> cur = std::span(ids).subspan(3, 5), next = std::span(ids).subspan(8);
  m.prefetch(be, *st, std::span(ids).subspan(3));
  EXPECT_EQ(st->pos, 3);
  ASSERT_FALSE(be.prefetched.empty()) << "no PLE rows prefetched";
  EXPECT_TRUE(be.gathered.empty()) << "prefetch gathered rows itself";
  m.forward(be, *st, cur, false);
  m.forward(be, *st, next, false);
  EXPECT_EQ(be.prefetched, be.gathered);
  for (const auto& [name, rows] : be.prefetched) EXPECT_FALSE(rows.empty()) << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PlePrefetch, ::testing::ValuesIn(folders("qwen4_exp")), test_name);

}  // namespace
}  // namespace bloomery
