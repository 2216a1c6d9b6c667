// The three completion routes: OpenAI chat (/v1/chat/completions), OpenAI text (/v1/completions) and
// llama.cpp's /completion, streaming (SSE) and not. They differ only in how the body is read and how the
// output objects are shaped; generation itself is one Generation.
#include <chrono>
#include <map>
#include <mutex>
#include <random>

#include <httplib.h>

#include "server/api_error.h"
#include "server/grammar.h"
#include "server/http_server.h"
#include "server/json_schema.h"
#include "server/request_parse.h"
#include "server/sse.h"
#include "server/tool_calls.h"

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
  // llama-server's split: prompt_n evaluated here, cache_n taken from elsewhere (a slot's kept state, or
  // another choice's prefill).
  const int64_t evaluated = f.n_prompt - f.n_cached;
  return {{"cache_n", f.n_cached},
          {"prompt_n", evaluated},
          {"prompt_ms", f.prompt_ms},
          {"prompt_per_token_ms", per(f.prompt_ms, evaluated)},
          {"prompt_per_second", rate(f.prompt_ms, evaluated)},
          {"predicted_n", f.n_predicted},
          {"predicted_ms", f.predicted_ms},
          {"predicted_per_token_ms", per(f.predicted_ms, f.n_predicted)},
          {"predicted_per_second", rate(f.predicted_ms, f.n_predicted)},
          {"draft_n", f.draft_n},
          {"draft_n_accepted", f.draft_n_accepted}};
}

ojson usage(const FinishInfo& f) {
  return {{"prompt_tokens", f.n_prompt},
          {"completion_tokens", f.n_predicted},
          {"total_tokens", f.n_prompt + f.n_predicted},
          {"prompt_tokens_details", {{"cached_tokens", f.n_cached}}}};
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
ojson delta_chunk(const Shape& sh, const GenDelta& d, size_t text_offset, int index = 0) {
  if (sh.api == kLlama) {
    ojson j = {{"index", index},
               {"content", valid_utf8(d.content)},
               {"tokens", d.tokens},
               {"stop", false},
               {"id_slot", sh.id_slot}};
    if (sh.logprobs) j["completion_probabilities"] = llama_probs(d.logprobs);
    return j;
  }
  ojson choice = {{"index", index}};
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
  std::vector<ToolCall> tool_calls;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  void add(const GenDelta& d) {
    content += d.content;
    tool_calls.insert(tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    reasoning += d.reasoning;
    tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
    logprobs.insert(logprobs.end(), d.logprobs.begin(), d.logprobs.end());
  }
};

ojson llama_final(const Shape& sh, const Generation& g, const Collected& c, bool stream, int index = 0) {
  const FinishInfo& f = g.finish();
  ojson j = {{"index", index},
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

ojson tool_calls_json(const std::vector<ToolCall>& calls) {
  ojson a = ojson::array();
  for (const auto& c : calls)
    a.push_back(
        {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return a;
}

// One choice of a finished, non-streamed request.
ojson final_choice(const Shape& sh, const Generation& g, const Collected& c, int index) {
  ojson choice = {{"index", index}};
  if (sh.api == kChat) {
    ojson msg = {{"role", "assistant"}};
    msg["content"] =
        c.content.empty() && !c.tool_calls.empty() ? ojson(nullptr) : ojson(valid_utf8(c.content));
    if (!c.reasoning.empty()) msg["reasoning_content"] = valid_utf8(c.reasoning);
    if (!c.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(c.tool_calls);
    choice["message"] = msg;
    choice["logprobs"] = sh.logprobs ? chat_logprobs(c.logprobs) : ojson(nullptr);
  } else {
    choice["text"] = valid_utf8(c.content);
    choice["logprobs"] = sh.logprobs ? completion_logprobs(c.logprobs, 0) : ojson(nullptr);
  }
  choice["finish_reason"] = g.finish_reason();
  return choice;
}

// Usage and timings over every choice: each prompt counted once per prompt (choices of one prompt share it).
FinishInfo total_of(const std::vector<std::shared_ptr<Generation>>& gens, int n_per_prompt) {
  FinishInfo t = gens.front()->finish();
  t.n_prompt = 0;
  t.n_predicted = 0;
  t.prompt_ms = 0;
  t.predicted_ms = 0;
  t.n_cached = 0;  // each prompt counted once: what its first choice took from the prompt cache
  for (size_t i = 0; i < gens.size(); ++i) {
    const FinishInfo& f = gens[i]->finish();
    if (i % static_cast<size_t>(n_per_prompt) == 0) t.n_prompt += f.n_prompt, t.n_cached += f.n_cached;
    t.n_predicted += f.n_predicted;
    t.prompt_ms = std::max(t.prompt_ms, f.prompt_ms);
    t.predicted_ms = std::max(t.predicted_ms, f.predicted_ms);
  }
  return t;
}

ApiError generation_error(const Generation& g) {
  const std::string& e = g.finish().error;
  // A tensor-parallel rank lost mid-request is the engine's end, not this request's fault (serving.md R-5).
  if (e.find("E_TP_") != std::string::npos) return loading("Engine failed: " + e);
  return server_error("generation failed: " + e);
}

// The tokenizer's vocabulary as a byte trie, built on first use (once per tokenizer).
std::shared_ptr<const VocabTrie> vocab_trie(const Tokenizer& tok) {
  static std::mutex mu;
  static std::map<const Tokenizer*, std::shared_ptr<const VocabTrie>> tries;
  std::lock_guard lk(mu);
  auto& t = tries[&tok];
  if (!t) {
    std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
    std::vector<bool> text(bytes.size());
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      text[static_cast<size_t>(id)] = !tok.is_special(id);
      if (text[static_cast<size_t>(id)]) bytes[static_cast<size_t>(id)] = tok.decode({&id, 1});
    }
    t = std::make_shared<VocabTrie>(bytes, text);
  }
  return t;
}

// One masker per grammar text, shared by the requests that use it (their mask cache with it). Compile
// errors are the request's 400.
std::shared_ptr<TokenMasker> masker_for(const std::string& gbnf, const Tokenizer& tok) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<TokenMasker>> maskers;
  auto trie = vocab_trie(tok);
  std::lock_guard lk(mu);
  auto it = maskers.find(gbnf);
  if (it != maskers.end()) return it->second;
  std::shared_ptr<const Grammar> g;
  try {
    g = Grammar::parse(gbnf);
  } catch (const GrammarError& e) {
    bad_request(std::string("Failed to parse grammar: ") + e.what());
  }
  if (maskers.size() >= 32) maskers.erase(maskers.begin());
  auto m = std::make_shared<TokenMasker>(g, trie);
  maskers[gbnf] = m;
  return m;
}

std::string schema_grammar(const ojson& schema, const char* field) {
  if (!schema.is_object() && !schema.is_boolean()) bad_field(field, "a JSON schema object", schema);
  try {
    return schema_to_gbnf(schema);
  } catch (const GrammarError& e) {
    bad_request(std::string("'") + field + "': " + e.what());
  }
}

// The request's output constraint as GBNF ("" = none): a forced tool call, response_format, llama-server's
// json_schema / grammar fields, then the server's -j / --grammar defaults.
std::string constraint_of(const ojson& body, const ServerOptions& o, const std::string& forced_tools) {
  if (!forced_tools.empty()) return forced_tools;
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const ojson& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      bad_field("response_format", "an object with a string 'type'", rf);
    std::string t = rf["type"];
    if (t == "json_object") {
      if (rf.contains("schema")) return schema_grammar(rf["schema"], "response_format.schema");
      return json_object_gbnf();
    }
    if (t == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object() ||
          !rf["json_schema"].contains("schema"))
        bad_field("response_format.json_schema", "an object with a 'schema'",
                  rf.value("json_schema", ojson()));
      return schema_grammar(rf["json_schema"]["schema"], "response_format.json_schema.schema");
    }
    if (t != "text") bad_field("response_format.type", "text, json_object or json_schema", rf["type"]);
  }
  if (body.contains("json_schema") && !body["json_schema"].is_null())
    return schema_grammar(body["json_schema"], "json_schema");
  if (body.contains("grammar") && !body["grammar"].is_null()) {
    if (!body["grammar"].is_string()) bad_field("grammar", "a GBNF grammar string", body["grammar"]);
    if (!body["grammar"].get<std::string>().empty()) return body["grammar"];
  }
  if (!o.json_schema.empty()) return schema_grammar(ojson::parse(o.json_schema), "-j/--json-schema");
  return o.grammar;
}

// Several prompts in one request: an array whose elements are strings or token arrays (a flat array of ids
// is one prompt).
std::vector<ojson> prompts_of(const ojson& prompt) {
  if (prompt.is_array() && prompt.size() > 1 && !prompt[0].is_number()) {
    std::vector<ojson> out;
    for (const auto& p : prompt) out.push_back(ojson::array({p}));
    return out;
  }
  return {prompt};
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

  // Choices per prompt: OpenAI's n, llama.cpp's n_cmpl.
  const char* n_field = api == kLlama ? "n_cmpl" : "n";
  int n = 1;
  if (body.contains(n_field) && !body[n_field].is_null()) {
    if (!body[n_field].is_number_integer() || body[n_field].get<int64_t>() < 1 ||
        body[n_field].get<int64_t>() > 16)
      bad_field(n_field, "an integer in [1, 16]", body[n_field]);
    n = body[n_field].get<int>();
  }

  std::string forced_tools;
  std::vector<ojson> prompts;
  if (api == kChat) {
    // tool_choice: auto (parse calls), none (no tools, no parsing), required / a named function (forced
    // by the grammar).
    bool has_tools = body.contains("tools") && body["tools"].is_array() && !body["tools"].empty();
    std::string choice = has_tools ? "auto" : "none", named;
    if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
      const ojson& tc = body["tool_choice"];
      if (tc.is_string()) {
        choice = tc;
        if (choice != "auto" && choice != "none" && choice != "required")
          bad_field("tool_choice",
                    "auto, none, required or {\"type\": \"function\", \"function\": {\"name\"}}", tc);
      } else if (tc.is_object() && tc.contains("function") && tc["function"].is_object() &&
                 tc["function"].contains("name") && tc["function"]["name"].is_string()) {
        choice = "named";
        named = tc["function"]["name"];
      } else {
        bad_field("tool_choice", "auto, none, required or {\"type\": \"function\", \"function\": {\"name\"}}",
                  tc);
      }
      if ((choice == "required" || choice == "named") && !has_tools)
        bad_field("tool_choice", "to come with a non-empty 'tools' array", tc);
    }
    if (choice == "none") body.erase("tools");
    if (!opts_.chat_template_kwargs.empty()) {
      // The server's kwargs first; the request's own win.
      ojson kw = ojson::parse(opts_.chat_template_kwargs);
      if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object())
        for (auto it = body["chat_template_kwargs"].begin(); it != body["chat_template_kwargs"].end(); ++it)
          kw[it.key()] = it.value();
      body["chat_template_kwargs"] = kw;
    }
    std::string text = render_chat(body, h.chat_template(), h.tokenizer());
    spec.prompt = h.tokenizer().encode(text, true, false);
    std::string fmt = field_string(body, "reasoning_format", opts_.reasoning_format);
    if (fmt != "none" && fmt != "auto" && fmt != "deepseek" && fmt != "deepseek-legacy")
      bad_field("reasoning_format", "none, auto, deepseek or deepseek-legacy", body["reasoning_format"]);
    spec.split_reasoning = h.think_tags() && fmt != "none" && !opts_.skip_chat_parsing;
    spec.start_in_reasoning = spec.split_reasoning && prompt_opens_think(text);
    sh.prompt_text = text;
    ToolSyntax syntax = tool_syntax_of(h.chat_template().source());
    if (has_tools && choice != "none" && !opts_.skip_chat_parsing) {
      spec.parse_tools = true;
      spec.tool_syntax = syntax;
      spec.tools = body["tools"];
    }
    if (choice == "required" || choice == "named") {
      try {
        forced_tools = tool_call_grammar(syntax, body["tools"], named);
      } catch (const GrammarError& e) {
        bad_request(std::string("'tools': ") + e.what());
      } catch (const std::invalid_argument& e) {
        bad_request(e.what());
      }
    }
    prompts.push_back(ojson());
  } else {
    if (!body.contains("prompt")) bad_request("'prompt': required");
    prompts = prompts_of(body["prompt"]);
    if (body["prompt"].is_string()) sh.prompt_text = body["prompt"];
  }
  std::string gbnf = constraint_of(body, opts_, forced_tools);
  if (!gbnf.empty()) {
    spec.masker = masker_for(gbnf, h.tokenizer());
    // The grammar's text is the answer from its first byte: nothing of it is thinking.
    spec.split_reasoning = false;
    spec.start_in_reasoning = false;
  }
  if (spec.id_slot >= n_slots_)
    bad_field("id_slot", "-1 or a slot id below " + std::to_string(n_slots_), spec.id_slot);

  // One spec per (prompt, choice): the prompt's choices differ by seed.
  std::vector<GenSpec> specs;
  for (size_t p = 0; p < prompts.size(); ++p) {
    GenSpec one = spec;
    if (api != kChat) one.prompt = parse_prompt(prompts[p], h.tokenizer(), "prompt");
    if (one.prompt.empty()) bad_request("the prompt is empty after tokenisation");
    if (static_cast<int64_t>(one.prompt.size()) + 1 > n_ctx_slot_)
      throw exceed_context(static_cast<int64_t>(one.prompt.size()), n_ctx_slot_);
    // The prompt's choices read it once: the first admitted prefills, the others fork its state.
    auto share = n > 1 ? std::make_shared<PrefillShare>() : nullptr;
    for (int c = 0; c < n; ++c) {
      GenSpec choice = one;
      choice.share = share;
      choice.sampling.seed = spec.sampling.seed + static_cast<uint64_t>(c);
      specs.push_back(std::move(choice));
    }
  }

  bool stream = false;
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) bad_field("stream", "true or false", body["stream"]);
    stream = body["stream"];
  }
  if (stream && api == kLlama && specs.size() > 1)
    bad_request("'stream': several prompts or n_cmpl > 1 are answered without streaming on /completion");
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
                 {"ignore_eos", spec.ignore_eos},
                 {"grammar", gbnf}};

  std::vector<std::shared_ptr<Generation>> gens =
      Generation::start_all(h.scheduler(), h.tokenizer(), std::move(specs), h.eos_ids());
  auto cancel_all = [gens] {
    for (auto& g : gens) g->cancel();
  };

  if (!stream) {
    std::vector<Collected> cs(gens.size());
    for (size_t i = 0; i < gens.size(); ++i) {
      GenDelta d;
      while (true) {
        auto p = gens[i]->next(d, std::chrono::milliseconds(500));
        if (p == Generation::Poll::Output) cs[i].add(d);
        if (p == Generation::Poll::Finished) break;
      }
    }
    for (auto& g : gens)
      if (g->finish().reason == StopReason::Error || g->finish().reason == StopReason::Cancelled) {
        cancel_all();
        throw generation_error(*g);
      }
    res.status = 200;
    if (api == kLlama) {
      if (gens.size() == 1) {
        res.set_content(dump_json(llama_final(sh, *gens[0], cs[0], false)),
                        "application/json; charset=utf-8");
      } else {
        ojson arr = ojson::array();
        for (size_t i = 0; i < gens.size(); ++i)
          arr.push_back(llama_final(sh, *gens[i], cs[i], false, static_cast<int>(i)));
        res.set_content(dump_json(arr), "application/json; charset=utf-8");
      }
      return;
    }
    ojson choices = ojson::array();
    for (size_t i = 0; i < gens.size(); ++i)
      choices.push_back(final_choice(sh, *gens[i], cs[i], static_cast<int>(i)));
    FinishInfo total = total_of(gens, n);
    ojson out = {{"id", sh.id},
                 {"object", sh.api == kChat ? "chat.completion" : "text_completion"},
                 {"created", sh.created},
                 {"model", sh.model},
                 {"choices", choices},
                 {"usage", usage(total)},
                 {"timings", timings(total)}};
    res.set_content(dump_json(out), "application/json; charset=utf-8");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [gens, sh, n, cancel_all](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        auto gone = [&] {
          cancel_all();
          return false;  // closes the connection
        };
        auto chunk = [&](ojson choice) {
          return ojson{{"id", sh.id},
                       {"object", sh.api == kChat ? "chat.completion.chunk" : "text_completion"},
                       {"created", sh.created},
                       {"model", sh.model},
                       {"choices", ojson::array({std::move(choice)})}};
        };
        if (sh.api == kChat)
          for (size_t i = 0; i < gens.size(); ++i)
            if (!write(sse_data(chunk({{"index", i},
                                       {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}))))
              return gone();
        std::vector<Collected> cs(gens.size());
        std::vector<size_t> offset(gens.size(), 0), n_calls(gens.size(), 0);
        std::vector<bool> done(gens.size(), false);
        size_t left = gens.size();
        const auto wait = std::chrono::milliseconds(gens.size() > 1 ? 20 : 250);
        while (left > 0) {
          bool idle = true;
          for (size_t i = 0; i < gens.size(); ++i) {
            if (done[i]) continue;
            GenDelta d;
            auto p = gens[i]->next(d, wait);
            if (p == Generation::Poll::Timeout) continue;
            idle = false;
            if (p == Generation::Poll::Finished) {
              done[i] = true;
              left--;
              continue;
            }
            cs[i].add(d);
            // Tool calls stream as vLLM and llama-server send them: the call's id, type and name with empty
            // arguments, then the arguments.
            for (const auto& tc : d.tool_calls) {
              ojson head = {{"index", n_calls[i]},
                            {"id", tc.id},
                            {"type", "function"},
                            {"function", {{"name", tc.name}, {"arguments", ""}}}};
              ojson args = {{"index", n_calls[i]}, {"function", {{"arguments", tc.arguments}}}};
              for (ojson* part : {&head, &args}) {
                ojson c = {{"index", i},
                           {"delta", {{"tool_calls", ojson::array({*part})}}},
                           {"logprobs", nullptr},
                           {"finish_reason", nullptr}};
                if (!write(sse_data(chunk(c)))) return gone();
              }
              n_calls[i]++;
            }
            GenDelta text = d;
            text.tool_calls.clear();
            if (text.empty()) continue;
            if (!write(sse_data(delta_chunk(sh, text, offset[i], static_cast<int>(i))))) return gone();
            offset[i] += text.content.size();
          }
          if (idle && !sink.is_writable()) return gone();
        }
        for (auto& g : gens) {
          const FinishInfo& f = g->finish();
          if (f.reason == StopReason::Error || f.reason == StopReason::Cancelled) {
            ojson err = error_body(generation_error(*g));
            write(sse_data(err));
            if (sh.api == kLlama) write(sse_error_line(err));
            sink.done();
            return true;
          }
        }
        if (sh.api == kLlama) {
          write(sse_data(llama_final(sh, *gens[0], cs[0], true)));
          sink.done();
          return true;
        }
        FinishInfo total = total_of(gens, n);
        for (size_t i = 0; i < gens.size(); ++i) {
          ojson choice = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", gens[i]->finish_reason()}};
          if (sh.api == kChat)
            choice["delta"] = ojson::object();
          else
            choice["text"] = "";
          ojson last = chunk(choice);
          if (!sh.include_usage && i + 1 == gens.size()) last["timings"] = timings(total);
          if (!write(sse_data(last))) return gone();
        }
        if (sh.include_usage) {
          ojson u = {{"id", sh.id},
                     {"object", sh.api == kChat ? "chat.completion.chunk" : "text_completion"},
                     {"created", sh.created},
                     {"model", sh.model},
                     {"choices", ojson::array()},
                     {"usage", usage(total)},
                     {"timings", timings(total)}};
          if (!write(sse_data(u))) return gone();
        }
        write(sse_done());
        sink.done();
        return true;
      },
      [cancel_all](bool success) {
        if (!success) cancel_all();
      });
}

}  // namespace bloomery::server
