// DraftCost (runtime/draft_cost.h): the prior until a few plain and drafting steps of a batch size were
// timed, then slots × (time a drafted row adds) / (plain step time); plain steps wanted until measured and
// again every kRefresh steps of that size; sizes measured apart.
#include "runtime/draft_cost.h"

#include <gtest/gtest.h>

using namespace bloomery;

TEST(DraftCost, PriorUntilMeasuredThenRowTimeOverPlainTime) {
  DraftCost c(0.25);
  EXPECT_TRUE(c.wants_plain(1));
  EXPECT_DOUBLE_EQ(c.row_cost(1), 0.25);
  c.record(1, 2, 0.030);  // a drafting step before any plain one: nothing to measure it against
  for (int i = 0; i < DraftCost::kPlainSamples; ++i) {
    EXPECT_TRUE(c.wants_plain(1)) << i;
    c.record(1, 0, 0.010);
  }
  EXPECT_FALSE(c.wants_plain(1));
  EXPECT_DOUBLE_EQ(c.row_cost(1), 0.25) << "no drafting step timed yet";
  for (int i = 0; i < DraftCost::kRowSamples; ++i) c.record(1, 4, 0.018);  // 2 ms a drafted row
  EXPECT_NEAR(c.row_cost(1), 0.2, 1e-12);
  // Four slots: a plain step of 12 ms, 3 ms a drafted row, so 4 × 3 / 12.
  EXPECT_TRUE(c.wants_plain(4));
  EXPECT_DOUBLE_EQ(c.row_cost(4), 0.25);
  for (int i = 0; i < DraftCost::kPlainSamples; ++i) c.record(4, 0, 0.012);
  for (int i = 0; i < DraftCost::kRowSamples; ++i) c.record(4, 8, 0.036);
  EXPECT_NEAR(c.row_cost(4), 1.0, 1e-12);
  EXPECT_NEAR(c.row_cost(1), 0.2, 1e-12) << "sizes are measured apart";
  // A step faster than the plain average adds nothing, never a negative cost.
  DraftCost f(0.25);
  for (int i = 0; i < DraftCost::kPlainSamples; ++i) f.record(2, 0, 0.010);
  for (int i = 0; i < DraftCost::kRowSamples; ++i) f.record(2, 3, 0.008);
  EXPECT_DOUBLE_EQ(f.row_cost(2), 0.0);
}

TEST(DraftCost, PlainStepWantedAgainAfterTheRefreshInterval) {
  DraftCost c(0.25);
  for (int i = 0; i < DraftCost::kPlainSamples; ++i) c.record(1, 0, 0.010);
  for (int64_t i = 0; i < DraftCost::kRefresh - 1; ++i) c.record(1, 1, 0.012);
  EXPECT_FALSE(c.wants_plain(1));
  c.record(1, 1, 0.012);
  EXPECT_TRUE(c.wants_plain(1));
  c.record(1, 0, 0.010);
  EXPECT_FALSE(c.wants_plain(1));
  // The moving averages follow a change: the plain step slows to 20 ms, the rows stay 2 ms.
  for (int i = 0; i < 40; ++i) c.record(1, 0, 0.020);
  for (int i = 0; i < 40; ++i) c.record(1, 1, 0.022);
  EXPECT_NEAR(c.row_cost(1), 0.1, 1e-3);
}
