// One request's generation as the HTTP side sees it: submits to the scheduler, turns token ids into text on
// the scheduler thread (whole UTF-8 only, stop strings held back, reasoning split off) and hands the pieces
// to the HTTP thread through a small queue. cancel() (client gone) frees the slot at the next step.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/scheduler.h"
#include "server/grammar.h"
#include "server/text_filter.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace bloomery::server {

struct TokenLogprob {
  int32_t id = 0;
  std::string text;  // the token's bytes (may be part of a character)
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// A parsed request, ready for the scheduler.
struct GenSpec {
  std::vector<int32_t> prompt;
  int64_t n_predict = -1;
  SamplingParams sampling;
  bool ignore_eos = false;
  int id_slot = -1;
  bool cache_prompt = true;              // may resume from a slot's kept state (the prompt cache)
  int spec_n_max = -1, spec_n_min = -1;  // `speculative.n_max` / `.n_min` (GenRequest); -1: the server's
  std::vector<std::string> stop;
  bool logprobs = false;  // report each token's log-probability (and sampling.n_probs alternatives)
  bool split_reasoning = false;
  bool start_in_reasoning = false;
  // Constrained decoding: the grammar every token must keep the output inside (null: none) and the
  // tokenizer's vocabulary trie it masks over.
  // The masker is shared by every request with the same grammar (its mask cache with it); only the
  // scheduler thread calls it.
  // n > 1 choices of one prompt share one prefill (the scheduler forks the state).
  std::shared_ptr<PrefillShare> share;
  std::shared_ptr<TokenMasker> masker;
  // Tool calls parsed out of the content in this syntax (parse_tools false: content stays as generated).
  bool parse_tools = false;
  ToolSyntax tool_syntax = ToolSyntax::QwenJson;
  nlohmann::ordered_json tools;
};

struct GenDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  bool empty() const { return content.empty() && reasoning.empty() && tokens.empty() && tool_calls.empty(); }
};

class Generation {
 public:
  // Submits at once. eos_ids: the ids that end generation.
  static std::shared_ptr<Generation> start(Scheduler& scheduler, const Tokenizer& tokenizer, GenSpec spec,
                                           const std::vector<int32_t>& eos_ids);
  // Several at once, queued together (Scheduler::submit_all): the choices of one prompt are admitted in the
  // same pass where slots allow, so they share its prefill.
  static std::vector<std::shared_ptr<Generation>> start_all(Scheduler& scheduler, const Tokenizer& tokenizer,
                                                            std::vector<GenSpec> specs,
                                                            const std::vector<int32_t>& eos_ids);
  enum class Poll { Output, Timeout, Finished };
  // Output: `out` holds the next delta. Finished: nothing more will come (finish() is valid).
  Poll next(GenDelta& out, std::chrono::milliseconds wait);
  void cancel();

  const FinishInfo& finish() const { return finish_; }
  const std::string& stop_word() const { return stop_word_; }
  // "stop" | "length" | "tool_calls" (OpenAI finish_reason); "" for cancelled / error.
  std::string finish_reason() const;
  // llama.cpp's stop_type: none | eos | limit | word.
  std::string stop_type() const;

 private:
  Generation(const Tokenizer& tok, const GenSpec& spec);
  bool on_token(const SampledToken& t);
  void on_finish(const FinishInfo& f);
  void constrain(std::vector<float>& logits);
  void split_tools(GenDelta& d, bool last);

  const Tokenizer& tok_;
  StreamDecoder decoder_;
  StopMatcher stop_;
  ReasoningSplitter reasoning_;
  std::shared_ptr<Ticket> ticket_;
  bool logprobs_;
  std::shared_ptr<TokenMasker> masker_;
  Grammar::State gstate_;
  std::vector<int32_t> eos_ids_;
  std::optional<ToolCallParser> tools_;
  size_t n_tool_calls_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<GenDelta> queue_;
  bool finished_ = false;
  FinishInfo finish_;
  std::string stop_word_;
};

// Text as JSON can carry it: invalid UTF-8 replaced by U+FFFD.
std::string valid_utf8(const std::string& s);

}  // namespace bloomery::server
