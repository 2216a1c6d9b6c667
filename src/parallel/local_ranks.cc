// LocalTpRanks: rank 0 on the caller's thread, followers on their own, meeting in a ThreadGroup.
#include "parallel/local_ranks.h"

#include <exception>

#include "core/error.h"

namespace bloomery {
namespace {

// True for the errors a rank gets because another rank failed (not a cause of its own).
bool collective_failure(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    return err.id() == "E_TP_RANK_FAILED" || err.id() == "E_TP_RANK_ABORTED";
  } catch (...) {
  }
  return false;
}

}  // namespace

LocalTpRanks::LocalTpRanks(int size, std::chrono::milliseconds collective_timeout,
                           const std::filesystem::path& folder, LoadOptions options,
                           const MakeBackend& make_backend)
    : size_(size), group_(size, collective_timeout), follower_errors_(size) {
  // Followers load and then wait for plans. Their load errors surface at the first barrier below.
  for (int r = 1; r < size; ++r)
    followers_.emplace_back([this, r, folder, options, &make_backend] {
      Communicator& c = group_.rank(r);
      try {
        std::unique_ptr<Backend> be = make_backend(r);
        LoadOptions o = options;
        o.progress = ProgressMode::Quiet;
        o.on_plan = nullptr;
        o.on_progress = nullptr;
        o.tp_rank = r;
        o.tp_size = size_;
        o.comm = &c;
        std::unique_ptr<LoadedModel> lm = load_model(folder, *be, o);
        c.barrier("load");
        Engine engine(*be, *lm->model);
        for (;;) {
          int64_t head[4];
          c.broadcast(head, sizeof(head), 0, "step plan", true);
          const Plan p{Kind(head[0]), head[1], head[2], head[3]};
          if (p.kind == Kind::Stop) return;
          std::vector<SeqId> seqs(p.nseqs);
          std::vector<int32_t> ids(p.nids);
          if (p.nseqs) c.broadcast(seqs.data(), seqs.size() * sizeof(SeqId), 0, "step plan sequences");
          if (p.nids) c.broadcast(ids.data(), ids.size() * sizeof(int32_t), 0, "step plan ids");
          const uint64_t before = c.collectives();
          try {
            switch (p.kind) {
              case Kind::AddSequence:
                engine.add_sequence(p.arg);
                break;
              case Kind::RemoveSequence:
                engine.remove_sequence(p.arg);
                break;
              case Kind::Prefill:
                engine.prefill(seqs.at(0), ids, p.arg != 0);
                break;
              case Kind::Decode:
                engine.decode(seqs, ids);
                break;
              case Kind::Stop:
                return;
            }
          } catch (const Error& e) {
            // A step refused before its first collective (E_CONTEXT_FULL, E_TOKEN_RANGE) is refused on rank 0
            // the same way, and rank 0 carries on; so does this rank. A failure halfway ends it.
            if (c.collectives() != before) throw;
          }
        }
      } catch (const std::exception& e) {
        follower_errors_[r] = std::current_exception();
        c.abort(fmt::format("rank {}: {}", r, e.what()));
      }
    });
  try {
    Communicator& c = group_.rank(0);
    be0_ = make_backend(0);
    options.tp_rank = 0;
    options.tp_size = size;
    options.comm = &c;
    lm0_ = load_model(folder, *be0_, options);
    c.barrier("load");
    engine0_ = std::make_unique<Engine>(*be0_, *lm0_->model);
  } catch (...) {
    const std::exception_ptr own = std::current_exception();
    group_.rank(0).abort("rank 0 failed to load");
    stop();
    // When rank 0 only saw a follower fail, the follower's own error is the one to report.
    if (collective_failure(own))
      for (const std::exception_ptr& e : follower_errors_)
        if (e && !collective_failure(e)) std::rethrow_exception(e);
    std::rethrow_exception(own);
  }
}

LocalTpRanks::~LocalTpRanks() {
  stop();
}

void LocalTpRanks::stop() noexcept {
  if (stopped_) return;
  stopped_ = true;
  try {
    if (engine0_) send(Plan{Kind::Stop}, {}, {});
  } catch (...) {
    group_.rank(0).abort("rank 0 stopping");
  }
  for (std::thread& t : followers_) t.join();
}

void LocalTpRanks::send(const Plan& p, std::span<const SeqId> seqs, std::span<const int32_t> ids) {
  Communicator& c = group_.rank(0);
  int64_t head[4] = {int64_t(p.kind), p.arg, p.nseqs, p.nids};
  c.broadcast(head, sizeof(head), 0, "step plan");
  if (p.nseqs)
    c.broadcast(const_cast<SeqId*>(seqs.data()), seqs.size() * sizeof(SeqId), 0, "step plan sequences");
  if (p.nids) c.broadcast(const_cast<int32_t*>(ids.data()), ids.size() * sizeof(int32_t), 0, "step plan ids");
}

SeqId LocalTpRanks::add_sequence(int64_t capacity) {
  send(Plan{Kind::AddSequence, capacity}, {}, {});
  return engine0_->add_sequence(capacity);
}

void LocalTpRanks::remove_sequence(SeqId id) {
  send(Plan{Kind::RemoveSequence, id}, {}, {});
  engine0_->remove_sequence(id);
}

std::vector<float> LocalTpRanks::prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits) {
  const SeqId one[1] = {seq};
  send(Plan{Kind::Prefill, all_logits ? 1 : 0, 1, int64_t(ids.size())}, one, ids);
  return engine0_->prefill(seq, ids, all_logits);
}

std::vector<std::vector<float>> LocalTpRanks::decode(std::span<const SeqId> seqs,
                                                     std::span<const int32_t> ids) {
  send(Plan{Kind::Decode, 0, int64_t(seqs.size()), int64_t(ids.size())}, seqs, ids);
  return engine0_->decode(seqs, ids);
}

}  // namespace bloomery
