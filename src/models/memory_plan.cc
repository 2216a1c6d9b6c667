// Memory plan arithmetic and its refusal (see memory_plan.h).
#include "models/memory_plan.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/progress.h"

namespace bloomery {

std::string_view plan_group_name(PlanGroup g) {
  switch (g) {
    case PlanGroup::Experts:
      return "experts";
    case PlanGroup::Attention:
      return "attention";
    case PlanGroup::LinearAttention:
      return "linear attention";
    case PlanGroup::EmbeddingsHead:
      return "embeddings/lm_head";
    case PlanGroup::Draft:
      return "draft layer";
    case PlanGroup::NormsOther:
      return "norms/other";
  }
  return "?";
}

PlanGroup plan_group(Role r) {
  switch (r) {
    case Role::RoutedExpert:
    case Role::SharedExpert:
    case Role::Router:
      return PlanGroup::Experts;
    case Role::Attention:
    case Role::Indexer:
      return PlanGroup::Attention;
    case Role::LinearAttention:
      return PlanGroup::LinearAttention;
    case Role::Embedding:
    case Role::Head:
    case Role::PleTable:
      return PlanGroup::EmbeddingsHead;
    case Role::Draft:
      return PlanGroup::Draft;
    default:
      return PlanGroup::NormsOther;
  }
}

WeightKeeping keeping_for_backend(std::string_view name) {
  return name == "cpu" ? WeightKeeping::DecodedF32 : WeightKeeping::Stored;
}

void plan_add_weight(MemoryPlan& plan, PlanGroup group, uint64_t backend_bytes) {
  plan.weights[static_cast<int>(group)] += backend_bytes;
  plan.weights_total += backend_bytes;
}

uint64_t scratch_estimate(int64_t vocab, int64_t hidden, int64_t intermediate, int64_t ubatch) {
  // Logits (twice: f32 out + sampling scratch), ~16 hidden-wide activations (residual, norms, q/k/v, gates,
  // hyper-connection streams) and 3 MLP-wide ones (gate, up, product) per token, plus 64 MiB of fixed
  // workspace (staging, router ids). An estimate: the backends' scratch buffers grow to their largest call.
  const uint64_t per_token = 4 * (2 * uint64_t(vocab) + 16 * uint64_t(hidden) + 3 * uint64_t(intermediate));
  return (uint64_t(64) << 20) + per_token * uint64_t(ubatch);
}

void plan_finish(MemoryPlan& plan, uint64_t state_per_sequence, uint64_t scratch, uint64_t free_bytes,
                 uint64_t total_bytes, const MemoryPlanOptions& opts) {
  plan.context = opts.context;
  plan.sequences = opts.sequences;
  plan.state_known = state_per_sequence > 0;
  plan.state = state_per_sequence * static_cast<uint64_t>(opts.sequences);
  plan.spec = opts.spec_per_sequence * static_cast<uint64_t>(opts.sequences);
  plan.snapshots = opts.snapshot_per_sequence * static_cast<uint64_t>(opts.sequences);
  plan.scratch = scratch;
  plan.free_bytes = free_bytes;
  plan.total_bytes = total_bytes;
  if (opts.budget_bytes && (free_bytes == 0 || opts.budget_bytes <= free_bytes)) {
    plan.budget = opts.budget_bytes;
    plan.budget_source = "--mem-budget";
  } else if (free_bytes) {
    plan.budget = free_bytes;
    plan.budget_source = plan.backend == "cpu" ? "available memory" : "free device memory";
  } else {
    plan.budget = 0;
    plan.budget_source = "unknown free memory";
  }
}

std::vector<std::string> MemoryPlan::lines() const {
  std::vector<std::string> out;
  out.push_back(fmt::format("memory plan ({}, weights kept {}):", backend,
                            keeping == WeightKeeping::Stored ? "in stored formats" : "as f32"));
  out.push_back(fmt::format("  weights          {:>12}", format_bytes(weights_total)));
  for (int g = 0; g < kPlanGroups; ++g)
    if (weights[g])
      out.push_back(fmt::format("    {:<18} {:>10}", plan_group_name(static_cast<PlanGroup>(g)),
                                format_bytes(weights[g])));
  out.push_back(fmt::format("  KV/state         {:>12}  ({} tokens x {} sequences{})",
                            state_known ? format_bytes(state) : std::string("unknown"), context, sequences,
                            state_known ? "" : "; the family does not report it"));
  if (spec)
    out.push_back(
        fmt::format("  MTP verify state {:>12}  (recurrent copies until commit)", format_bytes(spec)));
  if (snapshots)
    out.push_back(fmt::format("  prompt snapshots {:>12}  (recurrent state at each slot's last prompt end)",
                              format_bytes(snapshots)));
  out.push_back(fmt::format("  scratch          {:>12}  (estimate)", format_bytes(scratch)));
  if (host_tables) out.push_back(fmt::format("  PLE tables (host) {:>11}", format_bytes(host_tables)));
  out.push_back(fmt::format("  total            {:>12}  of {} {}{}", format_bytes(needed()),
                            budget ? format_bytes(budget) : std::string("?"), budget_source,
                            total_bytes ? " (device total " + format_bytes(total_bytes) + ")" : ""));
  return out;
}

std::string MemoryPlan::extra_terms() const {
  std::string s;
  if (spec) s += " + MTP verify " + format_bytes(spec);
  if (snapshots) s += " + prompt snapshots " + format_bytes(snapshots);
  return s;
}

std::string MemoryPlan::summary() const {
  std::string s = fmt::format("weights {} + KV/state {}{} + scratch {} = {}", format_bytes(weights_total),
                              state_known ? format_bytes(state) : std::string("unknown"), extra_terms(),
                              format_bytes(scratch), format_bytes(needed()));
  s += budget ? fmt::format(" of {} {}", format_bytes(budget), budget_source) : " (free memory unknown)";
  if (host_tables) s += fmt::format("; PLE tables on the host {}", format_bytes(host_tables));
  return s;
}

void check_memory_plan(const MemoryPlan& plan, const std::string& folder) {
  if (plan.fits()) return;
  std::string by_role;
  for (int g = 0; g < kPlanGroups; ++g) {
    if (!by_role.empty()) by_role += ", ";
    by_role +=
        fmt::format("{} {}", plan_group_name(static_cast<PlanGroup>(g)), format_bytes(plan.weights[g]));
  }
  const std::string found =
      fmt::format("{} needed: weights {} ({}) + KV/state {} ({} tokens x {} sequences){} + scratch {}",
                  format_bytes(plan.needed()), format_bytes(plan.weights_total), by_role,
                  plan.state_known ? format_bytes(plan.state) : std::string("unknown"), plan.context,
                  plan.sequences, plan.extra_terms(), format_bytes(plan.scratch));
  std::string note =
      fmt::format("nothing was allocated; {} of the {} backend", plan.budget_source, plan.backend);
  if (plan.total_bytes) note += fmt::format(" (total {})", format_bytes(plan.total_bytes));
  if (plan.host_tables)
    note += fmt::format("; PLE tables on the host {} (not counted)", format_bytes(plan.host_tables));
  note += "; a shorter context, fewer sequences or a smaller checkpoint would fit";
  raise("E_MEMORY_PLAN", Where{folder, "", "memory"},
        fmt::format("at most {} ({})", format_bytes(plan.budget), plan.budget_source), found, note);
}

}  // namespace bloomery
