// --spec-type and --spec-draft-n-max/-n-min/-p-min (with their 2025 aliases) for `bloomery run` and
// `bloomery bench`, with serve's meaning (serving.md §1.4), and the drafted / accepted report both print.
#pragma once

#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/scheduler.h"

namespace bloomery::tools {

struct SpecFlags {
  std::string type = "none";  // none, draft-mtp, ngram-simple
  int n_max = 3, n_min = 0;
  float p_min = 0.0f;
  bool on() const { return type != "none"; }
  bool ngram() const { return type == "ngram-simple"; }
  // The scheduler's drafting (its other settings the server's defaults).
  SpecConfig config() const {
    SpecConfig c;
    c.n_max = on() ? n_max : 0;
    c.n_min = n_min;
    c.p_min = p_min;
    c.ngram = ngram();
    return c;
  }
  DraftOptions draft_options() const {
    DraftOptions d;
    d.n_max = n_max;
    d.p_min = p_min;
    if (ngram()) d.source = DraftOptions::Source::Ngram;
    return d;
  }
};

inline void add_spec_options(CLI::App& app, SpecFlags& f) {
  app.add_option(
         "--spec-type", f.type,
         "none, draft-mtp (the checkpoint's own MTP/NextN layer drafts) or ngram-simple (lookup in the "
         "sequence's own tokens); the model verifies")
      ->check(CLI::IsMember({"none", "draft-mtp", "ngram-simple"}));
  app.add_option("--spec-draft-n-max,--draft-max,--draft,--draft-n", f.n_max, "most drafts per step")
      ->check(CLI::Range(1, 8));
  app.add_option("--spec-draft-n-min,--draft-min,--draft-n-min", f.n_min,
                 "fewer drafts than this are not verified")
      ->check(CLI::Range(0, 8));
  app.add_option("--spec-draft-p-min,--draft-p-min", f.p_min,
                 "stop drafting when the draft's top probability falls below P")
      ->check(CLI::Range(0.0f, 1.0f));
}

// "203 drafted, 111 accepted (54.7 %) in 87 verifies; mean accepted length 1.28".
inline std::string draft_counts_line(const DraftCounts& c) {
  char buf[256];
  std::snprintf(
      buf, sizeof buf, "%llu drafted, %llu accepted (%.1f %%) in %llu verifies; mean accepted length %.2f",
      static_cast<unsigned long long>(c.drafted_total()), static_cast<unsigned long long>(c.accepted_total()),
      c.drafted_total() ? 100.0 * c.accepted_total() / c.drafted_total() : 0.0,
      static_cast<unsigned long long>(c.rounds),
      c.rounds ? static_cast<double>(c.accepted_total()) / c.rounds : 0.0);
  return buf;
}

// " 1: 72.4 % (63/87) 2: 48.2 % (41/85) …" over the positions that drafted; empty when none did.
inline std::string acceptance_by_position(const DraftCounts& c) {
  std::string out;
  for (int i = 0; i < kMaxDrafts && c.drafted[i]; ++i) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %d: %.1f %% (%llu/%llu)", i + 1, 100.0 * c.accepted[i] / c.drafted[i],
                  static_cast<unsigned long long>(c.accepted[i]),
                  static_cast<unsigned long long>(c.drafted[i]));
    out += buf;
  }
  return out;
}

}  // namespace bloomery::tools
