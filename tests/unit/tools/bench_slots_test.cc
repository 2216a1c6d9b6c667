// bloomery bench --spec-type (the slot rows, bench_slots.h) on a CPU fixture with a draft layer: each (d, C,
// n) gives a plain row and a drafting row through the scheduler, both with every round's tokens (C · n) and a
// positive rate; the plain row drafts nothing, the drafting row drafts (MTP, and n-gram lookup named +ngram)
// and carries its counts and its rate over the plain row's; the slots' sequences continue across the rounds
// (the depth grows by the tokens of every round); MTP on a model without a draft layer is refused by name.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "../../common/fixture_folders.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "models/model_loader.h"
#include "no_draft_model.h"
#include "tools/bench_slots.h"

namespace bloomery::tools {
namespace {

BenchParams slot_params() {
  BenchParams p;
  p.ps = {0};
  p.ns = {20};  // past SpecConfig::probe_every (16): a slot that stopped drafting still probes in a round
  p.ds = {12};
  p.cs = {1, 3};
  p.repeats = 2;
  return p;
}

TEST(BenchSlots, PlainAndDraftingRowsRunThroughTheSchedulersSlots) {
  auto be = make_cpu_backend(2);
  auto lm = load_model(testing_fixtures::models_root() / "qwen4_exp-bf16", *be);
  for (const std::string type : {"draft-mtp", "ngram-simple"}) {
    SlotBenchParams s;
    s.spec.type = type;
    s.spec.n_max = 2;
    const BenchParams p = slot_params();
    std::vector<std::string> seen;
    const std::vector<BenchRow> rows =
        run_slot_rows(*be, *lm->model, p, s, [&](const BenchRow& r) { seen.push_back(r.test); });
    ASSERT_EQ(rows.size(), 4u) << type;
    EXPECT_EQ(seen.size(), rows.size());
    const std::string suffix = type == "draft-mtp" ? "+mtp2" : "+ngram2";
    for (size_t i = 0; i < rows.size(); i += 2) {
      const BenchRow &off = rows[i], &on = rows[i + 1];
      EXPECT_EQ(off.test, "tg20@slots");
      EXPECT_EQ(on.test, "tg20" + suffix);
      EXPECT_EQ(on.ref, off.test);
      EXPECT_EQ(off.conc, on.conc);
      for (const BenchRow* r : {&off, &on}) {
        EXPECT_TRUE(r->slots);
        ASSERT_EQ(r->tps.size(), 2u);
        for (double t : r->tps) EXPECT_GT(t, 0.0);
        for (double ms : r->ms) EXPECT_GT(ms, 0.0);
        // Primed with d + 1 tokens and a warm-up round of each kind, then both kinds' rounds continue the
        // same sequences.
        EXPECT_EQ(r->depth_end - r->depth, 2 * 2 * 20) << r->test;
      }
      EXPECT_EQ(off.drafts.drafted_total(), 0u) << "the plain row drafted";
      if (type == "draft-mtp") EXPECT_GT(on.drafts.drafted_total(), 0u) << "the drafting row drafted nothing";
      EXPECT_GT(on.ratio, 0.0);
    }
  }
}

TEST(BenchSlots, MtpWithoutADraftLayerIsRefusedByName) {
  auto be = make_cpu_backend(1);
  auto lm = load_model(testing_fixtures::models_root() / "qwen4_exp-bf16", *be);
  NoDraft m(*lm->model);
  SlotBenchParams s;
  s.spec.type = "draft-mtp";
  try {
    run_slot_rows(*be, m, slot_params(), s);
    FAIL() << "no refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_SPEC_NO_DRAFT");
  }
}

}  // namespace
}  // namespace bloomery::tools
