// The three completion routes: OpenAI chat (/v1/chat/completions), OpenAI text (/v1/completions) and
// llama.cpp's /completion, streaming (SSE) and not. They differ only in how the body is read and how the
// output objects are shaped; generation itself is one Generation.
#include <chrono>
#include <random>

#include <httplib.h>

#include "server/api_error.h"
#include "server/http_server.h"
#include "server/request_parse.h"
#include "server/sse.h"

namespace bloomery::server {

using ojson = nlohmann::ordered_json;

namespace {

enum ApiKind { kChat = 0, kCompletions = 1, kLlama = 2 };

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += hex[rng() % 16];
  return s;
}

ojson bytes_of(const std::string& s) {
  ojson a = ojson::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

// Chat logprobs entries: {token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}.
ojson chat_logprobs(const std::vector<TokenLogprob>& lps) {
  ojson content = ojson::array();
  for (const auto& lp : lps) {
    ojson top = ojson::array();
    for (const auto& t : lp.top)
      top.push_back({{"token", valid_utf8(t.text)}, {"logprob", t.logprob}, {"bytes", bytes_of(t.text)}});
    content.push_back({{"id", lp.id},
                       {"token", valid_utf8(lp.text)},
                       {"logprob", lp.logprob},
                       {"bytes", bytes_of(lp.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

// Legacy completions logprobs: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
ojson completion_logprobs(const std::vector<TokenLogprob>& lps, size_t offset0) {
  ojson tokens = ojson::array(), lp = ojson::array(), top = ojson::array(), off = ojson::array();
  size_t offset = offset0;
  for (const auto& t : lps) {
    tokens.push_back(valid_utf8(t.text));
    lp.push_back(t.logprob);
    ojson m = ojson::object();
    for (const auto& c : t.top) m[valid_utf8(c.text)] = c.logprob;
    top.push_back(m);
    off.push_back(offset);
    offset += t.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
}

// llama.cpp completion_probabilities.
ojson llama_probs(const std::vector<TokenLogprob>& lps) {
  ojson out = ojson::array();
  for (const auto& lp : lps) {
    ojson top = ojson::array();
    for (const auto& t : lp.top)
      top.push_back(
          {{"id", t.id}, {"token", valid_utf8(t.text)}, {"bytes", bytes_of(t.text)}, {"logprob", t.logprob}});
    out.push_back({{"id", lp.id},
                   {"token", valid_utf8(lp.text)},
                   {"bytes", bytes_of(lp.text)},
                   {"logprob", lp.logprob},
                   {"top_logprobs", top}});
  }
  return out;
}

ojson timings(const FinishInfo& f) {
  auto per = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto rate = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * static_cast<double>(n) / ms : 0.0; };
  return {{"cache_n", 0},
          {"prompt_n", f.n_prompt},
          {"prompt_ms", f.prompt_ms},
          {"prompt_per_token_ms", per(f.prompt_ms, f.n_prompt)},
          {"prompt_per_second", rate(f.prompt_ms, f.n_prompt)},
          {"predicted_n", f.n_predicted},
          {"predicted_ms", f.predicted_ms},
          {"predicted_per_token_ms", per(f.predicted_ms, f.n_predicted)},
          {"predicted_per_second", rate(f.predicted_ms, f.n_predicted)}};
}

ojson usage(const FinishInfo& f) {
  return {{"prompt_tokens", f.n_prompt},
          {"completion_tokens", f.n_predicted},
          {"total_tokens", f.n_prompt + f.n_predicted},
          {"prompt_tokens_details", {{"cached_tokens", 0}}}};
}

// A request's fixed facts, shared by every object it sends.
struct Shape {
  ApiKind api;
  std::string id;
  int64_t created;
  std::string model;
  bool include_usage = false;
  bool logprobs = false;
  bool return_tokens = false;
  int id_slot = -1;
  std::string prompt_text;  // /completion echoes the prompt
  ojson settings;           // /completion generation_settings
};

// One streamed delta as the API's chunk ("" = nothing to send for this API).
ojson delta_chunk(const Shape& sh, const GenDelta& d, size_t text_offset) {
  if (sh.api == kLlama) {
    ojson j = {{"index", 0},
               {"content", valid_utf8(d.content)},
               {"tokens", d.tokens},
               {"stop", false},
               {"id_slot", sh.id_slot}};
    if (sh.logprobs) j["completion_probabilities"] = llama_probs(d.logprobs);
    return j;
  }
  ojson choice = {{"index", 0}};
  if (sh.api == kChat) {
    ojson delta = ojson::object();
    if (!d.reasoning.empty()) delta["reasoning_content"] = valid_utf8(d.reasoning);
    if (!d.content.empty()) delta["content"] = valid_utf8(d.content);
    choice["delta"] = delta;
    choice["logprobs"] = sh.logprobs ? chat_logprobs(d.logprobs) : ojson(nullptr);
  } else {
    choice["text"] = valid_utf8(d.content);
    choice["logprobs"] = sh.logprobs ? completion_logprobs(d.logprobs, text_offset) : ojson(nullptr);
  }
  choice["finish_reason"] = nullptr;
  return {{"id", sh.id},
          {"object", sh.api == kChat ? "chat.completion.chunk" : "text_completion"},
          {"created", sh.created},
          {"model", sh.model},
          {"choices", ojson::array({choice})}};
}

// Everything a non-streamed request produced.
struct Collected {
  std::string content, reasoning;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  void add(const GenDelta& d) {
    content += d.content;
    reasoning += d.reasoning;
    tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
    logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  }
};

ojson llama_final(const Shape& sh, const Generation& g, const Collected& c, bool stream) {
  const FinishInfo& f = g.finish();
  ojson j = {{"index", 0},
             {"content", stream ? std::string() : valid_utf8(c.content)},
             {"tokens", stream || !sh.return_tokens ? ojson::array() : ojson(c.tokens)},
             {"id_slot", f.slot},
             {"stop", true},
             {"model", sh.model},
             {"tokens_predicted", f.n_predicted},
             {"tokens_evaluated", f.n_prompt},
             {"generation_settings", sh.settings},
             {"prompt", valid_utf8(sh.prompt_text)},
             {"has_new_line", c.content.find('\n') != std::string::npos},
             {"truncated", f.reason == StopReason::ContextFull},
             {"stop_type", g.stop_type()},
             {"stopping_word", g.stop_word()},
             {"tokens_cached", f.n_prompt + f.n_predicted},
             {"timings", timings(f)}};
  if (sh.logprobs && !stream) j["completion_probabilities"] = llama_probs(c.logprobs);
  return j;
}

ojson final_response(const Shape& sh, const Generation& g, const Collected& c) {
  const FinishInfo& f = g.finish();
  if (sh.api == kLlama) return llama_final(sh, g, c, false);
  ojson choice = {{"index", 0}};
  if (sh.api == kChat) {
    ojson msg = {{"role", "assistant"}, {"content", valid_utf8(c.content)}};
    if (!c.reasoning.empty()) msg["reasoning_content"] = valid_utf8(c.reasoning);
    choice["message"] = msg;
    choice["logprobs"] = sh.logprobs ? chat_logprobs(c.logprobs) : ojson(nullptr);
  } else {
    choice["text"] = valid_utf8(c.content);
    choice["logprobs"] = sh.logprobs ? completion_logprobs(c.logprobs, 0) : ojson(nullptr);
  }
  choice["finish_reason"] = g.finish_reason();
  return {{"id", sh.id},
          {"object", sh.api == kChat ? "chat.completion" : "text_completion"},
          {"created", sh.created},
          {"model", sh.model},
          {"choices", ojson::array({choice})},
          {"usage", usage(f)},
          {"timings", timings(f)}};
}

ApiError generation_error(const Generation& g) {
  return server_error("generation failed: " + g.finish().error);
}

}  // namespace

void HttpServer::handle_completion(const httplib::Request& req, httplib::Response& res, int api_int) {
  ApiKind api = static_cast<ApiKind>(api_int);
  EngineHost& h = engine();
  ojson body = parse_body(req.body);
  GenSpec spec;
  parse_generation_fields(body, opts_,
                          api == kChat          ? Api::Chat
                          : api == kCompletions ? Api::Completions
                                                : Api::LlamaCompletion,
                          spec);
  Shape sh;
  sh.api = api;
  sh.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  sh.id = random_id(api == kChat ? "chatcmpl-" : "cmpl-");
  sh.model = opts_.alias.empty() ? opts_.model : opts_.alias;
  if (body.contains("model") && body["model"].is_string()) sh.model = body["model"];
  sh.logprobs = spec.logprobs;

  if (api == kChat) {
    std::string text = render_chat(body, h.chat_template(), h.tokenizer());
    spec.prompt = h.tokenizer().encode(text, true, false);
    std::string fmt = field_string(body, "reasoning_format", "auto");
    if (fmt != "none" && fmt != "auto" && fmt != "deepseek" && fmt != "deepseek-legacy")
      bad_field("reasoning_format", "none, auto, deepseek or deepseek-legacy", body["reasoning_format"]);
    spec.split_reasoning = h.think_tags() && fmt != "none";
    spec.start_in_reasoning = spec.split_reasoning && prompt_opens_think(text);
    sh.prompt_text = text;
  } else {
    if (!body.contains("prompt")) bad_request("'prompt': required");
    spec.prompt = parse_prompt(body["prompt"], h.tokenizer(), "prompt");
    if (body["prompt"].is_string()) sh.prompt_text = body["prompt"];
  }
  if (spec.prompt.empty()) bad_request("the prompt is empty after tokenisation");
  if (static_cast<int64_t>(spec.prompt.size()) + 1 > n_ctx_slot_)
    throw exceed_context(static_cast<int64_t>(spec.prompt.size()), n_ctx_slot_);
  if (spec.id_slot >= n_slots_)
    bad_field("id_slot", "-1 or a slot id below " + std::to_string(n_slots_), spec.id_slot);

  bool stream = false;
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) bad_field("stream", "true or false", body["stream"]);
    stream = body["stream"];
  }
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    const ojson& so = body["stream_options"];
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean())
        bad_field("stream_options.include_usage", "true or false", so["include_usage"]);
      sh.include_usage = so["include_usage"];
    }
  }
  sh.return_tokens = field_bool(body, "return_tokens", false);
  sh.id_slot = spec.id_slot;
  sh.settings = {{"n_predict", spec.n_predict},
                 {"temperature", spec.sampling.temperature},
                 {"top_k", spec.sampling.top_k},
                 {"top_p", spec.sampling.top_p},
                 {"min_p", spec.sampling.min_p},
                 {"seed", spec.sampling.seed},
                 {"stop", spec.stop},
                 {"n_probs", spec.sampling.n_probs},
                 {"ignore_eos", spec.ignore_eos}};

  auto gen = Generation::start(h.scheduler(), h.tokenizer(), std::move(spec), h.eos_ids());

  if (!stream) {
    Collected c;
    GenDelta d;
    while (true) {
      auto p = gen->next(d, std::chrono::milliseconds(500));
      if (p == Generation::Poll::Output) c.add(d);
      if (p == Generation::Poll::Finished) break;
    }
    if (gen->finish().reason == StopReason::Error || gen->finish().reason == StopReason::Cancelled)
      throw generation_error(*gen);
    res.status = 200;
    res.set_content(dump_json(final_response(sh, *gen, c)), "application/json; charset=utf-8");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [gen, sh](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto gone = [&] {
          gen->cancel();
          return false;  // closes the connection
        };
        if (sh.api == kChat) {
          ojson first = {{"id", sh.id},
                         {"object", "chat.completion.chunk"},
                         {"created", sh.created},
                         {"model", sh.model},
                         {"choices", ojson::array({{{"index", 0},
                                                    {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                                                    {"logprobs", nullptr},
                                                    {"finish_reason", nullptr}}})}};
          if (!write(sse_data(first))) return gone();
        }
        Collected c;
        size_t offset = 0;
        GenDelta d;
        while (true) {
          auto p = gen->next(d, std::chrono::milliseconds(250));
          if (p == Generation::Poll::Timeout) {
            if (!sink.is_writable()) return gone();
            continue;
          }
          if (p == Generation::Poll::Finished) break;
          c.add(d);
          if (d.empty()) continue;
          if (!write(sse_data(delta_chunk(sh, d, offset)))) return gone();
          offset += d.content.size();
        }
        const FinishInfo& f = gen->finish();
        if (f.reason == StopReason::Error || f.reason == StopReason::Cancelled) {
          ojson err = error_body(generation_error(*gen));
          write(sse_data(err));
          if (sh.api == kLlama) write(sse_error_line(err));
          sink.done();
          return true;
        }
        if (sh.api == kLlama) {
          write(sse_data(llama_final(sh, *gen, c, true)));
          sink.done();
          return true;
        }
        ojson choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", gen->finish_reason()}};
        if (sh.api == kChat)
          choice["delta"] = ojson::object();
        else
          choice["text"] = "";
        ojson last = {{"id", sh.id},
                      {"object", sh.api == kChat ? "chat.completion.chunk" : "text_completion"},
                      {"created", sh.created},
                      {"model", sh.model},
                      {"choices", ojson::array({choice})}};
        if (!sh.include_usage) last["timings"] = timings(f);
        if (!write(sse_data(last))) return gone();
        if (sh.include_usage) {
          ojson u = {{"id", sh.id},
                     {"object", sh.api == kChat ? "chat.completion.chunk" : "text_completion"},
                     {"created", sh.created},
                     {"model", sh.model},
                     {"choices", ojson::array()},
                     {"usage", usage(f)},
                     {"timings", timings(f)}};
          if (!write(sse_data(u))) return gone();
        }
        write(sse_done());
        sink.done();
        return true;
      },
      [gen](bool success) {
        if (!success) gen->cancel();
      });
}

}  // namespace bloomery::server
