#include "server/request_parse.h"

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/generation.h"

namespace bloomery::server {

using ojson = nlohmann::ordered_json;

ojson parse_body(const std::string& body) {
  ojson j = parse_json_body(body, kMaxBodyDepth);
  if (!j.is_object()) bad_request("The request body must be a JSON object");
  return j;
}

bool field_bool(const ojson& b, const char* k, bool dflt) {
  auto it = b.find(k);
  if (it == b.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) bad_field(k, "true or false", *it);
  return it->get<bool>();
}

std::string field_string(const ojson& b, const char* k, const std::string& dflt) {
  auto it = b.find(k);
  if (it == b.end() || it->is_null()) return dflt;
  if (!it->is_string()) bad_field(k, "a string", *it);
  return it->get<std::string>();
}

namespace {

const ojson* get(const ojson& b, const char* k) {
  auto it = b.find(k);
  if (it == b.end() || it->is_null()) return nullptr;
  return &*it;
}

bool boolean(const ojson& b, const char* k, bool dflt) {
  return field_bool(b, k, dflt);
}

double num(const ojson& b, const char* k, double dflt, double lo, double hi) {
  const ojson* v = get(b, k);
  if (!v) return dflt;
  if (!v->is_number()) bad_field(k, "a number", *v);
  double x = v->get<double>();
  if (x < lo || x > hi) bad_field(k, fmt::format("a number in [{}, {}]", lo, hi), *v);
  return x;
}

int64_t integer(const ojson& b, const char* k, int64_t dflt, int64_t lo, int64_t hi) {
  const ojson* v = get(b, k);
  if (!v) return dflt;
  if (!v->is_number_integer()) bad_field(k, "an integer", *v);
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad_field(k, fmt::format("an integer in [{}, {}]", lo, hi), *v);
  int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad_field(k, fmt::format("an integer in [{}, {}]", lo, hi), *v);
  return x;
}

// A sampler bloomery has not built: accepted only at its neutral value.
void neutral(const ojson& b, const char* k, double neutral_value) {
  const ojson* v = get(b, k);
  if (!v) return;
  if (!v->is_number()) bad_field(k, "a number", *v);
  if (v->get<double>() != neutral_value) bad_request(fmt::format("sampler '{}' is not supported", k));
}

}  // namespace

void parse_generation_fields(const ojson& b, const ServerOptions& o, Api api, GenSpec& spec) {
  SamplingParams& p = spec.sampling;
  // Length: OpenAI names first, then llama.cpp's.
  int64_t n = o.n_predict;
  const char* len_field = api == Api::LlamaCompletion ? "n_predict" : "max_tokens";
  if (api == Api::Chat && get(b, "max_completion_tokens"))
    n = integer(b, "max_completion_tokens", n, 0, int64_t{1} << 30);
  else if (get(b, len_field))
    n = integer(b, len_field, n, api == Api::LlamaCompletion ? -1 : 0, int64_t{1} << 30);
  else if (get(b, "n_predict"))
    n = integer(b, "n_predict", n, -1, int64_t{1} << 30);
  spec.n_predict = n;

  p.temperature = num(b, "temperature", o.temperature, -1e9, 1e9);
  p.top_p = num(b, "top_p", o.top_p, 0.0, 1.0);
  p.top_k = static_cast<int>(integer(b, "top_k", o.top_k, 0, 1 << 30));
  p.min_p = num(b, "min_p", o.min_p, 0.0, 1.0);
  p.presence_penalty = num(b, "presence_penalty", o.presence_penalty, -2.0, 2.0);
  p.frequency_penalty = num(b, "frequency_penalty", o.frequency_penalty, -2.0, 2.0);
  p.repeat_penalty = num(b, "repeat_penalty", o.repeat_penalty, 0.0, 1e9);
  p.repeat_last_n = static_cast<int>(integer(b, "repeat_last_n", o.repeat_last_n, -1, 1 << 30));
  int64_t seed = integer(b, "seed", o.seed, INT64_MIN, INT64_MAX);
  p.seed = seed == -1 ? std::random_device{}() : static_cast<uint64_t>(seed);
  spec.id_slot = static_cast<int>(integer(b, "id_slot", -1, -1, 1 << 20));
  spec.cache_prompt = boolean(b, "cache_prompt", true);
  // llama-server's per-request drafting limits (flat keys with a dot): below the server's own, never above.
  spec.spec_n_max = static_cast<int>(integer(b, "speculative.n_max", -1, -1, 1 << 20));
  spec.spec_n_min = static_cast<int>(integer(b, "speculative.n_min", -1, -1, 1 << 20));
  for (const char* k : {"typical_p"}) neutral(b, k, 1.0);
  for (const char* k : {"mirostat", "dry_multiplier", "xtc_probability", "dynatemp_range"})
    neutral(b, k, 0.0);
  if (const ojson* v = get(b, "top_n_sigma"); v && (!v->is_number() || v->get<double>() > 0))
    bad_request("sampler 'top_n_sigma' is not supported");
  // grammar, json_schema, response_format, n and n_cmpl are read by the routes (constrained decoding, several
  // choices).
  spec.ignore_eos = boolean(b, "ignore_eos", o.ignore_eos);

  // Stop strings: a string or an array of strings.
  if (const ojson* s = get(b, "stop")) {
    if (s->is_string()) {
      spec.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      for (const auto& x : *s) {
        if (!x.is_string()) bad_field("stop", "a string or an array of strings", *s);
        spec.stop.push_back(x.get<std::string>());
      }
    } else {
      bad_field("stop", "a string or an array of strings", *s);
    }
  }

  // logit_bias: {"<token id>": bias} (OpenAI) or [[id, bias], ...] (llama.cpp); -l/--logit-bias first.
  p.logit_bias = o.logit_bias;
  if (const ojson* lb = get(b, "logit_bias")) {
    if (lb->is_object()) {
      for (auto it = lb->begin(); it != lb->end(); ++it) {
        int32_t id = 0;
        try {
          size_t used = 0;
          id = std::stoi(it.key(), &used);
          if (used != it.key().size()) throw std::invalid_argument("");
        } catch (const std::exception&) {
          bad_field("logit_bias", "token ids as keys", *lb);
        }
        if (!it.value().is_number()) bad_field("logit_bias", "numbers as values", *lb);
        p.logit_bias.push_back({id, it.value().get<float>()});
      }
    } else if (lb->is_array()) {
      for (const auto& e : *lb) {
        if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number())
          bad_field("logit_bias", "[[token id, bias], ...]", *lb);
        p.logit_bias.push_back({e[0].get<int32_t>(), e[1].get<float>()});
      }
    } else {
      bad_field("logit_bias", "an object {token id: bias}", *lb);
    }
  }

  // Log-probabilities: chat = logprobs bool + top_logprobs; completions = logprobs int; llama = n_probs.
  if (api == Api::Chat) {
    spec.logprobs = boolean(b, "logprobs", false);
    int64_t top = integer(b, "top_logprobs", 0, 0, 20);
    if (top > 0 && !spec.logprobs)
      bad_field("top_logprobs", "to come with \"logprobs\": true", b["top_logprobs"]);
    p.n_probs = static_cast<int>(top);
  } else if (api == Api::Completions) {
    int64_t lp = integer(b, "logprobs", 0, 0, 5);
    spec.logprobs = get(b, "logprobs") != nullptr;
    p.n_probs = static_cast<int>(lp);
    if (boolean(b, "echo", false)) bad_request("'echo': echoing the prompt is not supported");
  } else {
    p.n_probs = static_cast<int>(integer(b, "n_probs", 0, 0, 100));
    spec.logprobs = p.n_probs > 0;
  }
}

ojson chat_context(const ojson& body, const Tokenizer& tok) {
  const ojson* msgs = get(body, "messages");
  if (!msgs) bad_request("'messages': required");
  if (!msgs->is_array() || msgs->empty()) bad_field("messages", "a non-empty array", *msgs);
  ojson out = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_field(where, "an object", m);
    if (!m.contains("role") || !m["role"].is_string())
      bad_field(where + ".role", "a string", m.value("role", ojson()));
    std::string role = m["role"];
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_field(where + ".role", "system, developer, user, assistant or tool", m["role"]);
    ojson msg = m;
    msg["role"] = role;
    const ojson* c = get(m, "content");
    if (!c) {
      if (role != "assistant") bad_field(where + ".content", "a string or an array of text parts", ojson());
      msg["content"] = "";
    } else if (c->is_array()) {
      std::string text;
      for (size_t k = 0; k < c->size(); ++k) {
        const ojson& part = (*c)[k];
        std::string pw = fmt::format("{}.content[{}]", where, k);
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          bad_field(pw, "a content part {\"type\": \"text\", \"text\": ...}", part);
        if (part["type"] != "text")
          bad_request(fmt::format("'{}': content parts of type '{}' are not supported (text only)", pw,
                                  part["type"].get<std::string>()));
        if (!part.contains("text") || !part["text"].is_string()) bad_field(pw + ".text", "a string", part);
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else if (!c->is_string()) {
      bad_field(where + ".content", "a string or an array of text parts", *c);
    }
    out.push_back(std::move(msg));
  }
  ojson ctx = ojson::object();
  ctx["messages"] = std::move(out);
  ctx["add_generation_prompt"] = true;
  ctx["bos_token"] = tok.bos_token();
  ctx["eos_token"] = tok.eos_token();
  if (const ojson* tools = get(body, "tools")) {
    if (!tools->is_array()) bad_field("tools", "an array", *tools);
    if (!tools->empty()) ctx["tools"] = *tools;
  }
  if (const ojson* kw = get(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad_field("chat_template_kwargs", "an object", *kw);
    // A kwarg may not replace what the request itself fills in (the messages, the tools, the special
    // tokens): that is a conflict, not an override.
    for (auto it = kw->begin(); it != kw->end(); ++it)
      if (ctx.contains(it.key()))
        bad_field("chat_template_kwargs." + it.key(),
                  "a name the request does not set itself (use the request's own field)", it.value());
    // Keys are distinct (the body parser merged duplicates) and none is in ctx: appended in order, in linear
    // time (ordered_json's operator[] searches linearly).
    auto& items = static_cast<ojson::object_t::Container&>(ctx.get_ref<ojson::object_t&>());
    for (auto it = kw->begin(); it != kw->end(); ++it) items.emplace_back(it.key(), it.value());
  }
  return ctx;
}

std::string render_chat(const ojson& body, const ChatTemplate& tpl, const Tokenizer& tok) {
  ojson ctx = chat_context(body, tok);
  try {
    return tpl.render(ctx);
  } catch (const Error& e) {
    if (e.id() == "E_TPL_RAISE") bad_request("the chat template refused the messages: " + e.info().note);
    // The template parsed at start (engine_host); what fails now fails on this request's messages,
    // tools or kwargs (a value the template engine cannot hold, a type the template does not expect): the
    // client's to change, not a server fault.
    bad_request(std::string("the chat template cannot render this request: ") + e.what());
  }
}

std::vector<int32_t> parse_prompt(const ojson& prompt, const Tokenizer& tok, const char* field) {
  auto from_string = [&](const std::string& s) {
    std::vector<int32_t> ids;
    if (tok.add_bos() && tok.bos_id()) ids.push_back(*tok.bos_id());
    auto e = tok.encode(s, true, false);
    ids.insert(ids.end(), e.begin(), e.end());
    return ids;
  };
  auto from_tokens = [&](const ojson& a) {
    std::vector<int32_t> ids;
    for (const auto& x : a) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= tok.vocab_size())
        bad_field(field, fmt::format("token ids in [0, {})", tok.vocab_size()), x);
      ids.push_back(x.get<int32_t>());
    }
    return ids;
  };
  if (prompt.is_string()) return from_string(prompt.get<std::string>());
  if (prompt.is_array()) {
    if (prompt.empty()) bad_field(field, "a non-empty string or token array", prompt);
    if (prompt[0].is_number()) return from_tokens(prompt);
    if (prompt.size() == 1) {
      if (prompt[0].is_string()) return from_string(prompt[0].get<std::string>());
      if (prompt[0].is_array()) return from_tokens(prompt[0]);
    }
    if (prompt.size() > 1)
      bad_request(fmt::format("'{}': one prompt per request (an array of {} given)", field, prompt.size()));
  }
  bad_field(field, "a string or an array of token ids", prompt);
}

bool prompt_opens_think(const std::string& prompt) {
  size_t open = prompt.rfind("<think>");
  if (open == std::string::npos) return false;
  size_t close = prompt.find("</think>", open);
  return close == std::string::npos;
}

}  // namespace bloomery::server
