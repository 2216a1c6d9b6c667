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
#include "models/model_registry.h"

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

// Counts allocated bytes and records the row-table calls on streamed tables: (table name, ids) per call,
// since a prefetch helps only the gather with exactly its id list.
using Calls = std::vector<std::pair<std::string, std::vector<int64_t>>>;

class Watching : public test::ForwardingBackend {
 public:
  Watching() : ForwardingBackend(make_cpu_backend(2)) {}
  void on_alloc(const Tensor& t) override {
    alloc_bytes += static_cast<uint64_t>(t.numel()) * elem_size(t.type());
  }
  void on_gather(const Weight& table, std::span<const int64_t> ids) override {
    if (table.streamed()) gathered.emplace_back(table.name(), std::vector<int64_t>(ids.begin(), ids.end()));
  }
  void on_prefetch(const Weight& table, std::span<const int64_t> ids) override {
    prefetched.emplace_back(table.name(), std::vector<int64_t>(ids.begin(), ids.end()));
  }
  uint64_t alloc_bytes = 0;
  Calls gathered, prefetched;
};

class StateBytes : public ::testing::TestWithParam<std::string> {};

TEST_P(StateBytes, EqualsWhatNewStateAllocates) {
  if (GetParam() == "none") GTEST_SKIP() << "no fixture folders";
  Watching be;
  // The K/V caches in BF16 (-ctk bf16) are counted at two bytes a value, the rest of the state at four.
  for (ElemType kv : {ElemType::BF16, ElemType::F32}) {
    LoadOptions o;
    o.kv_type = kv;
    auto lm = load_model(kModels / GetParam(), be, o);
    for (int64_t cap : {1, 37, 512}) {
      be.alloc_bytes = 0;
      auto st = lm->model->new_state(be, cap);
      EXPECT_EQ(lm->model->state_bytes(cap), be.alloc_bytes) << "capacity " << cap << ", " << elem_name(kv);
      EXPECT_GT(be.alloc_bytes, 0u);
    }
  }
  auto lm = load_model(kModels / GetParam(), be);
  // Before bind (the memory plan's call) the optional draft layer counts: the same number when the checkpoint
  // ships it, more when it does not.
  auto unbound = create_model(lm->config);
  for (int64_t cap : {1, 512}) {
    if (lm->model->info().has_draft)
      EXPECT_EQ(unbound->state_bytes(cap), lm->model->state_bytes(cap));
    else
      EXPECT_GT(unbound->state_bytes(cap), lm->model->state_bytes(cap));
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StateBytes, ::testing::ValuesIn(folders()), test_name);

class PlePrefetch : public ::testing::TestWithParam<std::string> {};

TEST_P(PlePrefetch, NamesTheRowsTheNextForwardGathers) {
  if (GetParam() == "none") GTEST_SKIP() << "no qwen4_exp fixture folders";
  Watching be;
  auto lm = load_model(kModels / GetParam(), be);
  Model& m = *lm->model;
  const int64_t V = m.info().vocab_size;
  std::vector<int32_t> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 11) % V));
  if (!m.info().eos_ids.empty()) ids[6] = m.info().eos_ids[0];  // an EOS resets the n-gram context
  auto st = m.new_state(be, 64), other = m.new_state(be, 64);
  m.forward(be, *st, std::span(ids).first(3), false);
  m.forward(be, *other, std::span(ids).subspan(8, 4), false);
  // The scheduler's hint for the prompt chunk this state reads next; then a pass where that chunk shares the
  // batch with another sequence's decode token.
  const std::span<const int32_t> chunk = std::span(ids).subspan(3, 6);
  be.gathered.clear();
  m.prefetch(be, *st, chunk);
  EXPECT_EQ(st->pos, 3);
  EXPECT_TRUE(be.gathered.empty()) << "prefetch gathered rows itself";
  ASSERT_FALSE(be.prefetched.empty()) << "no PLE rows prefetched";
  const Model::BatchEntry entries[] = {{other.get(), std::span(ids).subspan(12, 1), false},
                                       {st.get(), chunk, false}};
  m.forward_batch(be, entries);
  // Every prefetched id list is one of the pass's gathers, whole and in order (the CUDA host table's match).
  for (const auto& call : be.prefetched) {
    EXPECT_EQ(call.second.size() % chunk.size(), 0u);
    EXPECT_NE(std::find(be.gathered.begin(), be.gathered.end(), call), be.gathered.end())
        << call.first << ": the prefetched rows are not a gather of the pass";
  }
  // One prefetch per PLE table, one gather per PLE table and entry.
  EXPECT_EQ(be.gathered.size(), 2 * be.prefetched.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PlePrefetch, ::testing::ValuesIn(folders("qwen4_exp")), test_name);

}  // namespace
}  // namespace bloomery
