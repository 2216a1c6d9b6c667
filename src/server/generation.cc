#include "server/generation.h"

#include <cmath>

namespace bloomery::server {

std::string valid_utf8(const std::string& s) {
  nlohmann::json j = s;
  std::string d = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return nlohmann::json::parse(d).get<std::string>();
}

Generation::Generation(const Tokenizer& tok, const GenSpec& spec)
    : tok_(tok),
      decoder_(tok, false),
      stop_(spec.stop),
      reasoning_(spec.split_reasoning, spec.start_in_reasoning),
      logprobs_(spec.logprobs) {
  if (spec.masker) {
    masker_ = spec.masker;
    gstate_ = masker_->grammar().initial();
  }
  if (spec.parse_tools) tools_.emplace(spec.tool_syntax, spec.tools);
}

void Generation::constrain(std::vector<float>& logits) {
  apply_mask(masker_->mask(gstate_), masker_->grammar().accepting(gstate_), eos_ids_, logits);
}

void Generation::split_tools(GenDelta& d, bool last) {
  if (!tools_) return;
  auto o = tools_->push(d.content);
  if (last) {
    auto f = tools_->flush();
    o.content += f.content;
  }
  d.content = std::move(o.content);
  n_tool_calls_ += o.calls.size();
  d.tool_calls = std::move(o.calls);
}

std::shared_ptr<Generation> Generation::start(Scheduler& scheduler, const Tokenizer& tokenizer, GenSpec spec,
                                              const std::vector<int32_t>& eos_ids) {
  std::vector<GenSpec> one;
  one.push_back(std::move(spec));
  return start_all(scheduler, tokenizer, std::move(one), eos_ids).front();
}

std::vector<std::shared_ptr<Generation>> Generation::start_all(Scheduler& scheduler,
                                                               const Tokenizer& tokenizer,
                                                               std::vector<GenSpec> specs,
                                                               const std::vector<int32_t>& eos_ids) {
  std::vector<std::shared_ptr<Generation>> gens;
  std::vector<GenRequest> reqs;
  for (GenSpec& spec : specs) {
    auto g = std::shared_ptr<Generation>(new Generation(tokenizer, spec));
    g->eos_ids_ = eos_ids;
    GenRequest r;
    if (g->masker_) {
      r.constrain = [g](std::vector<float>& logits) { g->constrain(logits); };
      r.prepare_constraint = [g] { g->masker_->mask(g->gstate_); };  // cached for constrain's call
    }
    r.prompt = std::move(spec.prompt);
    r.n_predict = spec.n_predict;
    r.sampling = spec.sampling;
    r.sampling.logprob = spec.logprobs;  // a reported log-probability needs the row of logits
    r.eos_ids = eos_ids;
    r.ignore_eos = spec.ignore_eos;
    r.id_slot = spec.id_slot;
    r.cache_prompt = spec.cache_prompt;
    r.spec_n_max = spec.spec_n_max;
    r.spec_n_min = spec.spec_n_min;
    r.share = spec.share;
    // The callbacks hold the generation alive until the scheduler is done with it, whatever the HTTP side
    // does.
    r.on_token = [g](const SampledToken& t) { return g->on_token(t); };
    r.on_finish = [g](const FinishInfo& f) { g->on_finish(f); };
    reqs.push_back(std::move(r));
    gens.push_back(std::move(g));
  }
  auto tickets = scheduler.submit_all(std::move(reqs));
  for (size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard lk(gens[i]->mu_);
    gens[i]->ticket_ = tickets[i];
  }
  return gens;
}

bool Generation::on_token(const SampledToken& t) {
  GenDelta d;
  d.tokens.push_back(t.id);
  if (logprobs_) {
    TokenLogprob lp{t.id, tok_.decode({&t.id, 1}), t.logprob, {}};
    for (const auto& c : t.top) lp.top.push_back({c.id, tok_.decode({&c.id, 1}), c.logprob, {}});
    d.logprobs.push_back(std::move(lp));
  }
  // Special tokens are not text, except the think tags the reasoning split needs.
  std::string text;
  if (!tok_.is_special(t.id)) {
    text = decoder_.push(t.id);
  } else {
    std::string s = tok_.token_string(t.id);
    if (s == "<think>" || s == "</think>") text = decoder_.finish() + s;
  }
  bool go_on = true;
  if (masker_) {
    // The grammar follows the token's bytes; once it is complete nothing else may come.
    std::string bytes = tok_.is_special(t.id) ? std::string() : tok_.decode({&t.id, 1});
    masker_->grammar().advance(gstate_, bytes);
    if (masker_->grammar().finished(gstate_)) go_on = false;
  }
  std::string safe = stop_.push(text);
  auto r = reasoning_.push(safe);
  d.content = std::move(r.content);
  d.reasoning = std::move(r.reasoning);
  split_tools(d, false);
  go_on = go_on && !stop_.matched();
  {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(d));
  }
  cv_.notify_all();
  return go_on;
}

void Generation::on_finish(const FinishInfo& f) {
  GenDelta d;
  if (!stop_.matched()) {
    std::string rest = stop_.push(decoder_.finish());
    rest += stop_.flush();
    auto a = reasoning_.push(rest);
    d.content = a.content;
    d.reasoning = a.reasoning;
  }
  auto b = reasoning_.flush();
  d.content += b.content;
  d.reasoning += b.reasoning;
  split_tools(d, true);
  {
    std::lock_guard lk(mu_);
    if (!d.empty()) queue_.push_back(std::move(d));
    finish_ = f;
    if (stop_.matched()) stop_word_ = stop_.word();
    finished_ = true;
  }
  cv_.notify_all();
}

Generation::Poll Generation::next(GenDelta& out, std::chrono::milliseconds wait) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, wait, [&] { return !queue_.empty() || finished_; });
  if (!queue_.empty()) {
    out = std::move(queue_.front());
    queue_.pop_front();
    return Poll::Output;
  }
  return finished_ ? Poll::Finished : Poll::Timeout;
}

void Generation::cancel() {
  std::lock_guard lk(mu_);
  if (ticket_) ticket_->cancel();
}

std::string Generation::finish_reason() const {
  switch (finish_.reason) {
    case StopReason::Eos:
    case StopReason::Word:
      return n_tool_calls_ > 0 ? "tool_calls" : "stop";
    case StopReason::Limit:
    case StopReason::ContextFull:
      return "length";
    default:
      return "";
  }
}

std::string Generation::stop_type() const {
  switch (finish_.reason) {
    case StopReason::Eos:
      return "eos";
    case StopReason::Word:
      return "word";
    case StopReason::Limit:
    case StopReason::ContextFull:
      return "limit";
    default:
      return "none";
  }
}

}  // namespace bloomery::server
