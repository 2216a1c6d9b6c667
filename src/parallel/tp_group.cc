// TpGroup: the rank setup `bloomery run`, `bloomery bench` and `bloomery-serve` share.
#include "parallel/tp_group.h"

#include <algorithm>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"

namespace bloomery {
namespace {

// Ranks load at their own pace: connecting and the end of loading wait longer than a step (serving.md:
// 120 s for load).
constexpr std::chrono::milliseconds kLoadDeadline{120000};

}  // namespace

TpLayout resolve_tp(const TpFlags& f) {
  TpLayout l;
  l.size = f.tp;
  l.rank = f.node_rank;
  l.timeout = std::chrono::milliseconds(f.collective_timeout_ms);
  if (f.tp < 1) raise("E_TP_NODES", Where{"", "", "--tp"}, "at least 1", std::to_string(f.tp));
  if (f.nodes.empty()) {
    if (f.node_rank != 0)
      raise("E_TP_NODES", Where{"", "", "--node-rank"}, "0 without --nodes", std::to_string(f.node_rank),
            "give every rank's address with --nodes host:port,…");
    return l;
  }
  l.nodes = parse_nodes(f.nodes);
  const int n = static_cast<int>(l.nodes.size());
  if (f.tp != 1 && f.tp != n)
    raise("E_TP_NODES", Where{"", "", "--tp"}, fmt::format("--tp equal to the {} --nodes", n),
          std::to_string(f.tp));
  if (f.node_rank < 0 || f.node_rank >= n)
    raise("E_TP_NODES", Where{"", "", "--node-rank"}, fmt::format("a rank in [0, {}) of --nodes", n),
          std::to_string(f.node_rank));
  l.size = n;
  return l;
}

int rank_threads(const TpLayout& layout, int threads) {
  if (!layout.nodes.empty() || layout.size <= 1) return threads;
  const int all = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, all / layout.size);
}

TpGroup::TpGroup(const TpLayout& layout, const std::filesystem::path& folder, LoadOptions load,
                 const MakeBackend& make_backend, int threads)
    : TpGroup(layout, load_folder(folder), std::move(load), make_backend, threads) {}

TpGroup::TpGroup(const TpLayout& layout, LoadRank load_rank, LoadOptions load,
                 const MakeBackend& make_backend, int threads)
    : layout_(layout) {
  try {
    if (!layout.nodes.empty()) {
      net_ = SocketComm::connect(layout.rank, layout.size, layout.nodes[0], layout.timeout, kLoadDeadline);
      load.tp_rank = layout.rank;
      load.tp_size = layout.size;
      load.comm = net_.get();
      backend_ = make_backend(threads, layout.rank);
      collectives_ = backend_->join_tp(*net_, layout.timeout);
      lm_ = load_rank(*backend_, load);
      net_->barrier("load", kLoadDeadline);
      engine_ = std::make_unique<Engine>(*backend_, *lm_->model);
      if (layout.rank == 0) leader_ = std::make_unique<TpLeader>(*net_, *engine_);
    } else if (layout.size > 1) {
      const int per_rank = rank_threads(layout, threads);
      ranks_ = std::make_unique<LocalTpRanks>(layout.size, layout.timeout, load_rank, load,
                                              [&](int rank) { return make_backend(per_rank, rank); });
    } else {
      backend_ = make_backend(threads, 0);
      lm_ = load_rank(*backend_, load);
      engine_ = std::make_unique<Engine>(*backend_, *lm_->model);
    }
  } catch (const std::exception& e) {
    // A rank that fails tells the others why, so they stop at once instead of at their deadline.
    if (net_) net_->abort(fmt::format("rank {} stopped: {}", layout.rank, e.what()));
    throw;
  }
}

TpGroup::~TpGroup() {
  if (net_ && std::uncaught_exceptions() > 0) {
    net_->abort("stopped by an error (see its log)");
    return;
  }
  try {
    stop();  // --nodes followers return from follow(); a failed group has nobody left to tell
  } catch (const std::exception&) {
  }
}

void TpGroup::follow(bool heartbeats) {
  try {
    tp_follow(*net_, *engine_, heartbeats);
  } catch (const std::exception& e) {
    net_->abort(fmt::format("rank {} stopped: {}", layout_.rank, e.what()));
    throw;
  }
}

Communicator* TpGroup::comm() {
  if (ranks_) return &ranks_->comm();
  return net_.get();
}

SeqId TpGroup::add_sequence(int64_t capacity) {
  return leader_  ? leader_->add_sequence(capacity)
         : ranks_ ? ranks_->add_sequence(capacity)
                  : engine_->add_sequence(capacity);
}

void TpGroup::remove_sequence(SeqId id) {
  if (leader_) return leader_->remove_sequence(id);
  if (ranks_) return ranks_->remove_sequence(id);
  engine_->remove_sequence(id);
}

std::vector<float> TpGroup::prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits) {
  return leader_  ? leader_->prefill(seq, ids, all_logits)
         : ranks_ ? ranks_->prefill(seq, ids, all_logits)
                  : engine_->prefill(seq, ids, all_logits);
}

std::vector<std::vector<float>> TpGroup::decode(std::span<const SeqId> seqs, std::span<const int32_t> ids) {
  return leader_  ? leader_->decode(seqs, ids)
         : ranks_ ? ranks_->decode(seqs, ids)
                  : engine_->decode(seqs, ids);
}

void TpGroup::stop() {
  if (stopped_ || !leader_) return;
  stopped_ = true;
  leader_->stop();
}

}  // namespace bloomery
