// The flag table and its parser. One row per flag: names (llama-server's aliases), llama-server's environment
// variable, the value form, the default shown by --help, and what it sets.
#include "server/flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_keys.h"
#include "server/suggest.h"

namespace bloomery::server {
namespace {

[[noreturn]] void bad_value(const std::string& flag, const std::string& expected, const std::string& found,
                            const std::string& note = {}) {
  raise("E_FLAG_VALUE", Where{"", "", flag}, expected, found.empty() ? "nothing" : "'" + found + "'", note);
}

int64_t to_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || v.empty())
    bad_value(flag, fmt::format("an integer in [{}, {}]", lo, hi), v);
  if (x < lo || x > hi) bad_value(flag, fmt::format("an integer in [{}, {}]", lo, hi), v);
  return x;
}

double to_num(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  double x = v.empty() ? 0.0 : std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !(x == x))
    bad_value(flag, fmt::format("a number in [{}, {}]", lo, hi), v);
  if (x < lo || x > hi) bad_value(flag, fmt::format("a number in [{}, {}]", lo, hi), v);
  return x;
}

// llama-server's boolean environment spellings.
std::optional<bool> to_bool(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "1" || v == "on" || v == "enabled") return true;
  if (v == "false" || v == "0" || v == "off" || v == "disabled") return false;
  return std::nullopt;
}

enum class Kind {
  Value,   // takes a value: -c 4096, --ctx-size=4096
  Switch,  // no value; `negative` names turn it off; the env value is a boolean
};

struct Flag {
  std::vector<std::string> names;     // first long name is the canonical one
  std::vector<std::string> negative;  // Switch only: names that set false
  std::string llama_env;              // llama-server's variable ("" = none)
  Kind kind = Kind::Value;
  std::string metavar;
  std::string dflt;
  std::string help;
  std::function<void(ServerOptions&, const std::string& flag, const std::string& value)> set;  // Value
  std::function<void(ServerOptions&, const std::string& flag, bool on)> set_switch;            // Switch
};

std::string canonical(const Flag& f) {
  for (const auto& n : f.names)
    if (n.rfind("--", 0) == 0) return n.substr(2);
  return f.names.front().substr(1);
}

// Flags accepted by llama-server that bloomery refuses, with the reason shown to the user.
struct Refused {
  std::vector<std::string> names;
  bool takes_value;
  std::string why;
};

const std::vector<Refused>& refused_flags() {
  static const std::vector<Refused> r = {
      {{"-hf", "-hfr", "--hf-repo"}, true, "downloading is not implemented; pass a local folder with -m"},
      {{"-mu", "--model-url"}, true, "downloading is not implemented; pass a local folder with -m"},
      {{"--lora", "--lora-scaled"}, true, "LoRA adapters are not supported"},
      {{"-mm", "--mmproj"}, true, "vision is out of scope"},
      {{"--rpc"}, true, "RPC offload is not supported"},
      {{"-md", "--model-draft"}, true, "external draft models are not supported"},
      {{"--embedding", "--embeddings"}, false, "embeddings are not supported"},
      {{"--context-shift"}, false, "recurrent state cannot be shifted"},
      {{"-nocb", "--no-cont-batching"}, false, "continuous batching is always on"},
      {{"--no-jinja"},
       false,
       "the checkpoint's own Jinja template is always used; pass --chat-template-file to use another"},
      {{"--ssl-key-file", "--ssl-cert-file"}, true, "TLS is not built yet; put a TLS proxy in front"},
  };
  return r;
}

// llama-server's -dev takes a device list; bloomery has one GPU engine (CUDA device 0) or the CPU engine.
void set_device(std::string& dst, const std::string& flag, const std::string& v) {
  if (v == "auto" || v == "none" || v == "cuda0" || v == "cuda" || v == "cpu") {
    dst = v == "cuda" ? "cuda0" : (v == "cpu" ? "none" : v);
    return;
  }
  bad_value(flag, "auto, none (the CPU engine) or cuda0", v);
}

void set_cache_type(std::string& dst, const std::string& flag, const std::string& v) {
  if (v == "f16" || v == "bf16") {
    dst = v;
    return;
  }
  static const std::vector<std::string> known = {"f32",    "q8_0", "q4_0", "q4_1",
                                                 "iq4_nl", "q5_0", "q5_1", "fp8"};
  if (std::find(known.begin(), known.end(), v) != known.end())
    raise("E_FLAG_REFUSED", Where{"", "", flag}, "f16 or bf16 (the BF16 KV cache)", "'" + v + "'",
          "quantized KV caches are not implemented yet");
  bad_value(flag, "f16 or bf16", v);
}

// Value rows leave set_switch empty and Switch rows leave set empty; the table reads better without the
// filler.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
const std::vector<Flag>& flag_table() {
  using O = ServerOptions;
  static const std::vector<Flag> t = {
      {{"-h", "--help"},
       {},
       "",
       Kind::Switch,
       "",
       "",
       "print this help and exit",
       {},
       [](O& o, auto&, bool on) { o.help = on; }},
      {{"--version"},
       {},
       "",
       Kind::Switch,
       "",
       "",
       "print the version and exit",
       {},
       [](O& o, auto&, bool on) { o.version = on; }},
      {{"-m", "--model"},
       {},
       "LLAMA_ARG_MODEL",
       Kind::Value,
       "FOLDER",
       "",
       "model folder (Hugging Face layout)",
       [](O& o, auto&, auto& v) { o.model = v; }},
      {{"-a", "--alias"},
       {},
       "LLAMA_ARG_ALIAS",
       Kind::Value,
       "NAME",
       "the model path",
       "model name reported by /v1/models",
       [](O& o, auto&, auto& v) { o.alias = v; }},
      {{"--host"},
       {},
       "LLAMA_ARG_HOST",
       Kind::Value,
       "HOST",
       "127.0.0.1",
       "address to listen on",
       [](O& o, auto&, auto& v) { o.host = v; }},
      {{"--port"},
       {},
       "LLAMA_ARG_PORT",
       Kind::Value,
       "PORT",
       "8080",
       "port to listen on",
       [](O& o, auto& f, auto& v) { o.port = static_cast<int>(to_int(f, v, 0, 65535)); }},
      {{"-c", "--ctx-size"},
       {},
       "LLAMA_ARG_CTX_SIZE",
       Kind::Value,
       "N",
       "0",
       "total context tokens over all slots (0 = the model's max_position_embeddings)",
       [](O& o, auto& f, auto& v) { o.ctx_size = to_int(f, v, 0, int64_t{1} << 30); }},
      {{"-np", "--parallel"},
       {},
       "LLAMA_ARG_N_PARALLEL",
       Kind::Value,
       "N",
       "-1",
       "number of slots (-1 = auto: 4)",
       [](O& o, auto& f, auto& v) {
         o.n_parallel = static_cast<int>(to_int(f, v, -1, 256));
         if (o.n_parallel == 0) bad_value(f, "-1 (auto) or a slot count >= 1", v);
       }},
      {{"-b", "--batch-size"},
       {},
       "LLAMA_ARG_BATCH",
       Kind::Value,
       "N",
       "2048",
       "most prompt tokens processed in one scheduler step (over all slots)",
       [](O& o, auto& f, auto& v) { o.batch_size = to_int(f, v, 1, int64_t{1} << 24); }},
      {{"-ub", "--ubatch-size"},
       {},
       "LLAMA_ARG_UBATCH",
       Kind::Value,
       "N",
       "512",
       "most prompt tokens of one sequence in one forward",
       [](O& o, auto& f, auto& v) { o.ubatch_size = to_int(f, v, 1, int64_t{1} << 24); }},
      {{"-n", "--n-predict", "--predict"},
       {},
       "LLAMA_ARG_N_PREDICT",
       Kind::Value,
       "N",
       "-1",
       "default tokens to generate per request (-1 = until EOS or context end)",
       [](O& o, auto& f, auto& v) { o.n_predict = to_int(f, v, -1, int64_t{1} << 30); }},
      {{"-t", "--threads"},
       {},
       "LLAMA_ARG_THREADS",
       Kind::Value,
       "N",
       "-1",
       "CPU engine threads (-1 = all cores)",
       [](O& o, auto& f, auto& v) { o.threads = static_cast<int>(to_int(f, v, -1, 1024)); }},
      {{"--threads-http"},
       {},
       "LLAMA_ARG_THREADS_HTTP",
       Kind::Value,
       "N",
       "-1",
       "HTTP worker threads (-1 = slots + 4)",
       [](O& o, auto& f, auto& v) { o.threads_http = static_cast<int>(to_int(f, v, -1, 1024)); }},
      {{"--temp", "--temperature"},
       {},
       "",
       Kind::Value,
       "T",
       "0.80",
       "default temperature (<= 0 = greedy)",
       [](O& o, auto& f, auto& v) { o.temperature = to_num(f, v, -1e9, 1e9); }},
      {{"--top-k"},
       {},
       "",
       Kind::Value,
       "N",
       "40",
       "default top-k (0 = off)",
       [](O& o, auto& f, auto& v) { o.top_k = static_cast<int>(to_int(f, v, 0, 1 << 30)); }},
      {{"--top-p"},
       {},
       "",
       Kind::Value,
       "P",
       "0.95",
       "default top-p (1.0 = off)",
       [](O& o, auto& f, auto& v) { o.top_p = to_num(f, v, 0.0, 1.0); }},
      {{"--min-p"},
       {},
       "",
       Kind::Value,
       "P",
       "0.05",
       "default min-p (0 = off)",
       [](O& o, auto& f, auto& v) { o.min_p = to_num(f, v, 0.0, 1.0); }},
      {{"--presence-penalty"},
       {},
       "",
       Kind::Value,
       "F",
       "0.0",
       "default presence penalty",
       [](O& o, auto& f, auto& v) { o.presence_penalty = to_num(f, v, -2.0, 2.0); }},
      {{"--frequency-penalty"},
       {},
       "",
       Kind::Value,
       "F",
       "0.0",
       "default frequency penalty",
       [](O& o, auto& f, auto& v) { o.frequency_penalty = to_num(f, v, -2.0, 2.0); }},
      {{"--repeat-penalty"},
       {},
       "",
       Kind::Value,
       "F",
       "1.0",
       "default repetition penalty (1.0 = off)",
       [](O& o, auto& f, auto& v) { o.repeat_penalty = to_num(f, v, 0.0, 1e9); }},
      {{"--repeat-last-n"},
       {},
       "",
       Kind::Value,
       "N",
       "64",
       "tokens the penalties look back over (-1 = context)",
       [](O& o, auto& f, auto& v) { o.repeat_last_n = static_cast<int>(to_int(f, v, -1, 1 << 30)); }},
      {{"-s", "--seed"},
       {},
       "",
       Kind::Value,
       "SEED",
       "-1",
       "default sampling seed (-1 = random)",
       [](O& o, auto& f, auto& v) { o.seed = to_int(f, v, -1, int64_t{0xFFFFFFFF}); }},
      {{"--api-key"},
       {},
       "LLAMA_API_KEY",
       Kind::Value,
       "KEY[,KEY...]",
       "none",
       "require 'Authorization: Bearer KEY' on every route but /health",
       [](O& o, auto& f, auto& v) {
         auto keys = split_api_keys(v);
         if (keys.empty()) bad_value(f, "one or more comma-separated keys", v);
         o.api_keys.insert(o.api_keys.end(), keys.begin(), keys.end());
       }},
      {{"--api-key-file"},
       {},
       "LLAMA_ARG_API_KEY_FILE",
       Kind::Value,
       "FILE",
       "none",
       "file with one API key per line ('#' comments)",
       [](O& o, auto& f, auto& v) {
         o.api_key_file = v;
         auto keys = read_api_key_file(f, v);
         o.api_keys.insert(o.api_keys.end(), keys.begin(), keys.end());
       }},
      {{"-to", "--timeout"},
       {},
       "LLAMA_ARG_TIMEOUT",
       Kind::Value,
       "SECONDS",
       "3600",
       "HTTP write timeout: a client that takes nothing for this long is dropped",
       [](O& o, auto& f, auto& v) { o.timeout = static_cast<int>(to_int(f, v, 1, 1 << 30)); }},
      // The HTTP layer's limits (docs/serving.md "Limits"); bloomery's own flags.
      {{"--http-max-body"},
       {},
       "",
       Kind::Value,
       "MiB",
       "32",
       "largest request body; a larger one is answered 413 before it is read",
       [](O& o, auto& f, auto& v) { o.http_max_body_mib = to_int(f, v, 1, 1 << 16); }},
      {{"--http-max-connections"},
       {},
       "",
       Kind::Value,
       "N",
       "4096",
       "open connections served at once; past it a new one is answered 503 and closed",
       [](O& o, auto& f, auto& v) { o.http_max_connections = static_cast<int>(to_int(f, v, 1, 1 << 20)); }},
      {{"--http-header-timeout"},
       {},
       "",
       Kind::Value,
       "SECONDS",
       "10",
       "a request's line and headers must arrive within this (the body gets --http-body-timeout)",
       [](O& o, auto& f, auto& v) { o.http_header_timeout = static_cast<int>(to_int(f, v, 1, 3600)); }},
      {{"--http-body-timeout"},
       {},
       "",
       Kind::Value,
       "SECONDS",
       "60",
       "a request's body must arrive within this after its headers",
       [](O& o, auto& f, auto& v) { o.http_body_timeout = static_cast<int>(to_int(f, v, 1, 3600)); }},
      {{"--shutdown-timeout"},
       {},
       "",
       Kind::Value,
       "SECONDS",
       "30",
       "on SIGTERM/SIGINT, how long streams in progress may finish (a second signal exits at once)",
       [](O& o, auto& f, auto& v) { o.shutdown_timeout = static_cast<int>(to_int(f, v, 0, 86400)); }},
      {{"--metrics"},
       {},
       "LLAMA_ARG_ENDPOINT_METRICS",
       Kind::Switch,
       "",
       "off",
       "serve Prometheus metrics at /metrics",
       {},
       [](O& o, auto&, bool on) { o.metrics = on; }},
      {{"--slots"},
       {"--no-slots"},
       "LLAMA_ARG_ENDPOINT_SLOTS",
       Kind::Switch,
       "",
       "on",
       "serve slot monitoring at /slots",
       {},
       [](O& o, auto&, bool on) { o.slots = on; }},
      {{"--webui"},
       {"--no-webui"},
       "LLAMA_ARG_WEBUI",
       Kind::Switch,
       "",
       "on",
       "accepted for compatibility; bloomery ships no web UI",
       {},
       [](O& o, auto&, bool on) { o.webui = on; }},
      {{"--jinja"},
       {},
       "LLAMA_ARG_JINJA",
       Kind::Switch,
       "",
       "on",
       "accepted; the checkpoint's Jinja chat template is always used",
       {},
       [](O&, auto&, bool) {}},
      {{"--chat-template-file"},
       {},
       "LLAMA_ARG_CHAT_TEMPLATE_FILE",
       Kind::Value,
       "FILE",
       "the model's",
       "Jinja chat template to use instead of the checkpoint's",
       [](O& o, auto&, auto& v) { o.chat_template_file = v; }},
      {{"-dev", "--device"},
       {},
       "LLAMA_ARG_DEVICE",
       Kind::Value,
       "DEV",
       "auto",
       "engine device: auto (CUDA device 0 when this build has CUDA, a GPU is present and the model's "
       "family runs on it; else the CPU engine), none (CPU engine) or cuda0",
       [](O& o, auto& f, auto& v) { set_device(o.device, f, v); }},
      {{"-ctk", "--cache-type-k"},
       {},
       "LLAMA_ARG_CACHE_TYPE_K",
       Kind::Value,
       "TYPE",
       "f16",
       "KV cache type for K (f16/bf16; quantized types are refused until they land)",
       [](O& o, auto& f, auto& v) { set_cache_type(o.cache_type_k, f, v); }},
      {{"-ctv", "--cache-type-v"},
       {},
       "LLAMA_ARG_CACHE_TYPE_V",
       Kind::Value,
       "TYPE",
       "f16",
       "KV cache type for V (f16/bf16; quantized types are refused until they land)",
       [](O& o, auto& f, auto& v) { set_cache_type(o.cache_type_v, f, v); }},
      {{"-fa", "--flash-attn"},
       {},
       "LLAMA_ARG_FLASH_ATTN",
       Kind::Value,
       "on|off|auto",
       "auto",
       "ignored: attention is always fused",
       [](O& o, auto& f, auto& v) {
         if (v != "on" && v != "off" && v != "auto") bad_value(f, "on, off or auto", v);
         o.warnings.push_back(f + " " + v + " is ignored: bloomery's attention is always fused");
       }},
      {{"-ngl", "--gpu-layers", "--n-gpu-layers"},
       {},
       "LLAMA_ARG_N_GPU_LAYERS",
       Kind::Value,
       "N|auto|all",
       "auto",
       "ignored: every layer runs on the engine's device",
       [](O& o, auto& f, auto& v) {
         o.warnings.push_back(f + " " + v + " is ignored: no layer split exists");
       }},
      {{"--load-delay-ms"},
       {},
       "",
       Kind::Value,
       "MS",
       "0",
       "bloomery: wait this long before loading the weights (lets tests see /health 503)",
       [](O& o, auto& f, auto& v) { o.load_delay_ms = static_cast<int>(to_int(f, v, 0, 600000)); }},
      {{"-cb", "--cont-batching"},
       {},
       "LLAMA_ARG_CONT_BATCHING",
       Kind::Switch,
       "",
       "on",
       "accepted; continuous batching is always on",
       {},
       [](O&, auto&, bool) {}},
  };
  return t;
}
#pragma GCC diagnostic pop

struct Lookup {
  const Flag* flag = nullptr;
  bool negative = false;
};

Lookup find_flag(const std::string& name) {
  for (const auto& f : flag_table()) {
    for (const auto& n : f.names)
      if (n == name) return {&f, false};
    for (const auto& n : f.negative)
      if (n == name) return {&f, true};
  }
  return {};
}

const Refused* find_refused(const std::string& name) {
  for (const auto& r : refused_flags())
    for (const auto& n : r.names)
      if (n == name) return &r;
  return nullptr;
}

std::string upper_env(const std::string& canon) {
  std::string s = "BLOOMERY_ARG_";
  for (char c : canon) s += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

void apply(ServerOptions& o, const Flag& f, const std::string& shown_name, const std::string& value,
           bool negative, bool from_env) {
  if (f.kind == Kind::Value) {
    f.set(o, shown_name, value);
  } else if (from_env) {
    auto b = to_bool(value);
    if (!b) bad_value(shown_name, "true/1/on/enabled or false/0/off/disabled", value);
    f.set_switch(o, shown_name, *b);
  } else {
    f.set_switch(o, shown_name, !negative);
  }
  o.set_by_user.insert(canonical(f));
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

std::vector<std::string> all_flag_names() {
  std::vector<std::string> out;
  for (const auto& f : flag_table()) {
    out.insert(out.end(), f.names.begin(), f.names.end());
    out.insert(out.end(), f.negative.begin(), f.negative.end());
  }
  return out;
}

std::vector<std::string> env_names_for(const std::string& long_name) {
  for (const auto& f : flag_table()) {
    if (canonical(f) != long_name) continue;
    std::vector<std::string> v = {upper_env(long_name)};
    if (!f.llama_env.empty()) v.push_back(f.llama_env);
    return v;
  }
  return {};
}

ServerOptions parse_flags(const std::vector<std::string>& args, const EnvLookup& env) {
  ServerOptions o;
  // Command line first, remembering which flags it set; the environment then fills only the others.
  std::set<std::string> from_cli;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> inline_value;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    }
    Lookup l = find_flag(arg);
    if (!l.flag) {
      if (const Refused* r = find_refused(arg)) {
        raise("E_FLAG_REFUSED", Where{"", "", arg}, "a supported flag", arg, r->why);
      }
      if (arg.empty() || arg[0] != '-') {
        raise("E_FLAG_UNKNOWN", Where{"", "", arg}, "a flag (positional arguments are not taken)",
              "'" + arg + "'", "did you mean -m " + arg + "?");
      }
      raise("E_FLAG_UNKNOWN", Where{"", "", arg}, "a known flag", "'" + arg + "'",
            "did you mean " + closest(arg, all_flag_names()) + "? (--help lists every flag)");
    }
    std::string value;
    if (l.flag->kind == Kind::Value) {
      if (inline_value) {
        value = *inline_value;
      } else {
        if (i + 1 >= args.size()) bad_value(arg, l.flag->metavar, "", "the flag needs a value");
        value = args[++i];
      }
    } else if (inline_value) {
      bad_value(arg, "no value (a switch)", *inline_value);
    }
    apply(o, *l.flag, arg, value, l.negative, false);
    o.source[canonical(*l.flag)] = "command line";
    from_cli.insert(canonical(*l.flag));
  }
  for (const auto& f : flag_table()) {
    std::string canon = canonical(f);
    if (from_cli.count(canon) || canon == "help" || canon == "version") continue;
    for (const auto& var : env_names_for(canon)) {
      auto v = env(var);
      if (!v) continue;
      apply(o, f, var, *v, false, true);
      o.source[canon] = var;
      break;  // BLOOMERY_ARG_* wins over LLAMA_ARG_*
    }
  }
  if (o.user_set("ubatch-size") && o.ubatch_size > o.batch_size) {
    bad_value("-ub/--ubatch-size", fmt::format("at most -b/--batch-size ({})", o.batch_size),
              std::to_string(o.ubatch_size));
  }
  if (!o.user_set("ubatch-size") && o.ubatch_size > o.batch_size) o.ubatch_size = o.batch_size;
  if (!o.help && !o.version && o.model.empty()) {
    raise("E_FLAG_VALUE", Where{"", "", "-m/--model"}, "a model folder (-m FOLDER or BLOOMERY_ARG_MODEL)",
          "nothing");
  }
  return o;
}

void check_env_names(const std::vector<std::string>& names) {
  std::vector<std::string> known;
  for (const auto& f : flag_table()) known.push_back(upper_env(canonical(f)));
  for (const auto& n : names) {
    if (n.rfind("BLOOMERY_ARG_", 0) != 0) continue;
    if (std::find(known.begin(), known.end(), n) != known.end()) continue;
    raise("E_FLAG_UNKNOWN", Where{"", "", n}, "a known BLOOMERY_ARG_* variable", n,
          "did you mean " + closest(n, known) + "?");
  }
}

std::string help_text() {
  std::string s =
      "usage: bloomery-serve -m FOLDER [options]\n\n"
      "An OpenAI- and llama-server-compatible HTTP server. Every flag can also be given as an environment\n"
      "variable BLOOMERY_ARG_<NAME> (or llama-server's LLAMA_ARG_* name where it has one); the command line\n"
      "wins. Booleans in the environment: true/1/on/enabled, false/0/off/disabled.\n\n";
  for (const auto& f : flag_table()) {
    std::string names;
    for (const auto& n : f.names) names += (names.empty() ? "" : ", ") + n;
    for (const auto& n : f.negative) names += ", " + n;
    if (!f.metavar.empty()) names += " " + f.metavar;
    s += fmt::format("  {:<38} {}", names, f.help);
    if (!f.dflt.empty()) s += fmt::format(" (default: {})", f.dflt);
    std::string canon = canonical(f);
    if (canon != "help" && canon != "version") {
      auto envs = env_names_for(canon);
      std::string e;
      for (const auto& v : envs) e += (e.empty() ? "" : ", ") + v;
      s += fmt::format("\n  {:<38} env: {}", "", e);
    }
    s += "\n";
  }
  s += "\nRefused llama-server flags (with the reason printed when used):";
  for (const auto& r : refused_flags()) s += " " + r.names.back();
  s += "\n";
  return s;
}

}  // namespace bloomery::server
