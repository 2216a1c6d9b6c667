// LocalTpRanks: rank 0 on the caller's thread, followers on their own, meeting in a ThreadGroup.
#include "parallel/local_ranks.h"

#include <exception>

#include "core/error.h"

namespace bloomery {
namespace {

// Ranks load at their own pace: the end of loading waits longer than a step (serving.md: 120 s).
constexpr std::chrono::milliseconds kLoadDeadline{120000};

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

LoadRank load_folder(const std::filesystem::path& folder) {
  return [folder](Backend& be, const LoadOptions& o) { return load_model(folder, be, o); };
}

LocalTpRanks::LocalTpRanks(int size, std::chrono::milliseconds collective_timeout,
                           const std::filesystem::path& folder, LoadOptions options,
                           const MakeBackend& make_backend)
    : LocalTpRanks(size, collective_timeout, load_folder(folder), std::move(options), make_backend) {}

LocalTpRanks::LocalTpRanks(int size, std::chrono::milliseconds collective_timeout, LoadRank load,
                           LoadOptions options, const MakeBackend& make_backend)
    : size_(size), group_(size, collective_timeout), follower_errors_(size) {
  // Followers load and then wait for plans. Their load errors surface at the first barrier below.
  for (int r = 1; r < size; ++r)
    followers_.emplace_back([this, r, load, options, collective_timeout, &make_backend]() mutable {
      Communicator& c = group_.rank(r);
      try {
        std::unique_ptr<Backend> be = make_backend(r);
        be->join_tp(c, collective_timeout);
        LoadOptions o = options;
        o.progress = ProgressMode::Quiet;
        o.on_plan = nullptr;
        o.on_progress = nullptr;
        o.tp_rank = r;
        o.tp_size = size_;
        o.comm = &c;
        std::unique_ptr<LoadedModel> lm = load(*be, o);
        load = nullptr;  // what it holds (a synthetic model's random pools) is not needed while following
        c.barrier("load", kLoadDeadline);
        Engine engine(*be, *lm->model);
        tp_follow(c, engine);
      } catch (const std::exception& e) {
        follower_errors_[r] = std::current_exception();
        c.abort(fmt::format("rank {}: {}", r, e.what()));
      }
    });
  try {
    Communicator& c = group_.rank(0);
    be0_ = make_backend(0);
    collectives_ = be0_->join_tp(c, collective_timeout);
    options.tp_rank = 0;
    options.tp_size = size;
    options.comm = &c;
    lm0_ = load(*be0_, options);
    c.barrier("load", kLoadDeadline);
    engine0_ = std::make_unique<Engine>(*be0_, *lm0_->model);
    leader_ = std::make_unique<TpLeader>(c, *engine0_);
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
    if (leader_) leader_->stop();
  } catch (...) {
    group_.rank(0).abort("rank 0 stopping");
  }
  for (std::thread& t : followers_) t.join();
}

SeqId LocalTpRanks::add_sequence(int64_t capacity) {
  return leader_->add_sequence(capacity);
}

void LocalTpRanks::remove_sequence(SeqId id) {
  leader_->remove_sequence(id);
}

std::vector<float> LocalTpRanks::prefill(SeqId seq, std::span<const int32_t> ids, bool all_logits) {
  return leader_->prefill(seq, ids, all_logits);
}

std::vector<std::vector<float>> LocalTpRanks::decode(std::span<const SeqId> seqs,
                                                     std::span<const int32_t> ids) {
  return leader_->decode(seqs, ids);
}

}  // namespace bloomery
