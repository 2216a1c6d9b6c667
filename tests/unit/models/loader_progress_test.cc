// The load progress bar (core/progress.h) the loader drives: line formatting, plain-mode output, quiet mode.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/progress.h"

namespace bloomery {
namespace {

TEST(LoaderProgress, FormatsBytes) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(3 * 1024), "3.0 KiB");
  EXPECT_EQ(format_bytes(12 * 1024 * 1024 + 512 * 1024), "12.5 MiB");
  EXPECT_EQ(format_bytes(uint64_t(3) << 29), "1.50 GiB");
}

TEST(LoaderProgress, LineShowsBarPercentRateAndEta) {
  // 1 GiB of 4 GiB in 2 s: 536.9 MB/s, 3 GiB left → 6.0 s.
  const uint64_t G = uint64_t(1) << 30;
  EXPECT_EQ(format_progress_line("loading m", G, 4 * G, 2.0, 20),
            "loading m [#####...............]  25%  1.00 GiB / 4.00 GiB  536.9 MB/s  ETA 6.0s");
  EXPECT_EQ(format_progress_line("x", 0, 100, 0.0, 4), "x [....]   0%  0 B / 100 B  -- MB/s  ETA --");
  EXPECT_EQ(format_progress_line("x", 100, 100, 1.0, 0), "x 100%  100 B / 100 B  0.0 MB/s  ETA 0.0s");
  // Past a minute the ETA shows minutes.
  EXPECT_NE(format_progress_line("x", 1, 1000, 1.0).find("ETA 16m39s"), std::string::npos);
}

std::string slurp(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

TEST(LoaderProgress, PlainModePrintsLinesAndAFinalSummary) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("loading t", 3 << 20, ProgressMode::Plain, f, /*plain_interval_s=*/0.0);
    p.add(1 << 20);
    p.note("note: something once");
    p.add(2 << 20);
    EXPECT_EQ(p.done(), uint64_t(3) << 20);
    p.finish();
    p.finish();  // once
  }
  const std::string s = slurp(f);
  std::fclose(f);
  EXPECT_NE(s.find("loading t ["), std::string::npos) << s;
  EXPECT_NE(s.find(" 33%  1.0 MiB / 3.0 MiB"), std::string::npos) << s;
  EXPECT_NE(s.find("note: something once\n"), std::string::npos) << s;
  EXPECT_NE(s.find("loading t: 3.0 MiB in "), std::string::npos) << s;
  EXPECT_EQ(s.find("loading t: 3.0 MiB in "), s.rfind("loading t: 3.0 MiB in ")) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;  // no redraws off a terminal
}

TEST(LoaderProgress, TtyModeRedrawsInPlace) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("l", 100, ProgressMode::Tty, f);
    p.add(50);
    p.finish();
  }
  const std::string s = slurp(f);
  std::fclose(f);
  EXPECT_EQ(s.rfind("\r", 0), 0u) << s;  // starts with a carriage return
  EXPECT_NE(s.find(" 50%"), std::string::npos) << s;
  EXPECT_NE(s.find("l: 50 B in "), std::string::npos) << s;
}

TEST(LoaderProgress, ListenerSeesEveryAdd) {
  Progress p("q", 30, ProgressMode::Quiet);
  std::vector<std::pair<uint64_t, uint64_t>> seen;
  p.set_listener([&](uint64_t d, uint64_t t) { seen.emplace_back(d, t); });
  p.add(10);
  p.add(20);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::make_pair(uint64_t(10), uint64_t(30)));
  EXPECT_EQ(seen[1], std::make_pair(uint64_t(30), uint64_t(30)));
}

TEST(LoaderProgress, QuietPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("q", 10, ProgressMode::Quiet, f);
    p.add(10);
    p.note("hidden");
    p.finish();
    EXPECT_EQ(p.done(), 10u);
  }
  EXPECT_EQ(slurp(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace bloomery
