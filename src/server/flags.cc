// The flag table and its parser. One row per flag: names (llama-server's aliases), llama-server's environment
// variable, the value form, the default shown by --help, and what it sets.
#include "server/flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>

#include <cmath>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/kv_cache_type.h"
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
  FlagStatus status = FlagStatus::Impl;  // for the inventory (docs, tests)
  std::string why;                       // Map / Ignore / Refuse: the reason shown
};

// "a, b,c" -> {"a", "b", "c"} (blanks trimmed, empty parts dropped): list-valued flags such as -ts.
std::vector<std::string> split_commas(const std::string& v) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= v.size()) {
    size_t j = v.find(',', i);
    if (j == std::string::npos) j = v.size();
    std::string part = v.substr(i, j - i);
    const size_t b = part.find_first_not_of(" \t"), e = part.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(part.substr(b, e - b + 1));
    i = j + 1;
  }
  return out;
}

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
      {{"-nocb", "--no-cont-batching"}, false, "continuous batching is always on"},
      {{"--ssl-key-file", "--ssl-cert-file"}, true, "TLS is not built yet; put a TLS proxy in front"},
      {{"-hff", "--hf-file"},
       true,
       "GGUF files are not loaded yet; pass a local Hugging Face folder with -m"},
      {{"--override-kv"}, true, "Hugging Face folders take config.json as it is (GGUF-only flag)"},
      {{"--mmproj-url", "--mmproj-auto", "--no-mmproj", "--mmproj-offload", "--no-mmproj-offload",
        "--image-min-tokens", "--image-max-tokens", "--media-path"},
       true,
       "vision is out of scope"},
      {{"--lora-init-without-apply"}, false, "LoRA adapters are not supported"},
      {{"--control-vector", "--control-vector-scaled", "--control-vector-layer-range"},
       true,
       "control vectors are not supported"},
      {{"--slot-save-path"}, true, "slot save/restore is not built yet; slots live only in memory"},
      {{"-nkvo", "--no-kv-offload"},
       false,
       "the KV cache always lives with the weights on the engine's device"},
      {{"--rope-scaling", "--rope-scale", "--rope-freq-base", "--rope-freq-scale", "--yarn-orig-ctx",
        "--yarn-ext-factor", "--yarn-attn-factor", "--yarn-beta-slow", "--yarn-beta-fast"},
       true,
       "these families keep their trained RoPE; a request beyond max_position_embeddings is refused instead"},
      {{"--pooling", "--embd-normalize"}, true, "embeddings are not supported"},
      {{"--reranking", "--rerank"}, false, "reranking is not supported"},
      {{"--list-devices"},
       false,
       "bloomery runs on CUDA device 0 or the CPU engine (-dev); nvidia-smi lists devices"},
      {{"-ot", "--override-tensor", "-ncmoe", "--n-cpu-moe", "--moe-cache-mib", "-ncffn", "--n-cpu-ffn"},
       true,
       "all weights live on the engine's device; on unified memory CPU placement saves nothing"},
      {{"-cmoe", "--cpu-moe"},
       false,
       "all weights live on the engine's device; on unified memory CPU placement saves nothing"},
      {{"-hfd", "-hfrd", "--hf-repo-draft", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "-devd",
        "--device-draft", "-ctkd", "--cache-type-k-draft", "-ctvd", "--cache-type-v-draft", "-td",
        "--threads-draft", "-tbd", "--threads-batch-draft"},
       true,
       "external draft models are not supported; the checkpoint's own MTP layer drafts (--spec-type "
       "draft-mtp)"},
      {{"-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic"},
       true,
       "n-gram lookup cache files are not supported; --spec-type ngram-simple drafts from the request's own "
       "tokens"},
      {{"--api-prefix"}, true, "routes are served at the root only; a reverse proxy can strip the prefix"},
      {{"--tools", "--tools-runtime", "--mcp-servers", "--mcp-servers-file", "--ui-mcp-proxy"},
       true,
       "server-side tools are not run; the client executes the tool calls bloomery returns"},
      {{"-ag", "--agent"},
       false,
       "server-side agents are not run; the client executes the tool calls bloomery returns"},
      {{"--completion-bash"}, false, "shell completion is not generated; --help lists every flag"},
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
  check_kv_cache_value(flag, v);  // E_FLAG_REFUSED for quantized caches, E_FLAG_VALUE otherwise
  dst = v;
}

// --- llama-server compatibility rows (serving.md §1): flags bloomery accepts for launch scripts' sake. Each
// row either sets an option (Impl/Map) or, where it has no meaning here, prints one start-screen line saying
// why (Ignore), or refuses a value bloomery cannot honour with the alternative (Refuse).

using Setter = std::function<void(ServerOptions&, const std::string&, const std::string&)>;
using SwitchSetter = std::function<void(ServerOptions&, const std::string&, bool)>;

Flag value_row(std::vector<std::string> names, std::string env, std::string metavar, std::string dflt,
               FlagStatus status, std::string why, Setter set) {
  Flag f;
  f.names = std::move(names);
  f.llama_env = std::move(env);
  f.kind = Kind::Value;
  f.metavar = std::move(metavar);
  f.dflt = std::move(dflt);
  f.help = status == FlagStatus::Impl ? why : std::string(flag_status_name(status)) + ": " + why;
  f.set = std::move(set);
  f.status = status;
  f.why = std::move(why);
  return f;
}

Flag switch_row(std::vector<std::string> names, std::vector<std::string> negative, std::string env,
                std::string dflt, FlagStatus status, std::string why, SwitchSetter set) {
  Flag f;
  f.names = std::move(names);
  f.negative = std::move(negative);
  f.llama_env = std::move(env);
  f.kind = Kind::Switch;
  f.dflt = std::move(dflt);
  f.help = status == FlagStatus::Impl ? why : std::string(flag_status_name(status)) + ": " + why;
  f.set_switch = std::move(set);
  f.status = status;
  f.why = std::move(why);
  return f;
}

// A value that bloomery does not use: one warning naming the flag, its value and why.
Setter note(std::string why) {
  return [why](ServerOptions& o, const std::string& f, const std::string& v) {
    o.warnings.push_back(f + " " + v + " is ignored: " + why);
  };
}
// Like note(), but silent when the value is the one bloomery behaves as anyway.
Setter note_unless(std::vector<std::string> same, std::string why) {
  return [same, why](ServerOptions& o, const std::string& f, const std::string& v) {
    if (std::find(same.begin(), same.end(), v) == same.end())
      o.warnings.push_back(f + " " + v + " is ignored: " + why);
  };
}
// A switch: warns when turned to the side bloomery does not do (`on_differs`: the on side differs).
SwitchSetter note_switch(bool on_differs, std::string why) {
  return [on_differs, why](ServerOptions& o, const std::string& f, bool on) {
    if (on == on_differs) o.warnings.push_back(f + " is ignored: " + why);
  };
}
SwitchSetter refuse_switch_on(std::string why) {
  return [why](ServerOptions&, const std::string& f, bool on) {
    if (on) raise("E_FLAG_REFUSED", Where{"", "", f}, "a supported flag", f, why);
  };
}
// A sampler bloomery has not built: accepted at its neutral value, refused otherwise.
Setter neutral_only(double neutral, std::string why) {
  return [neutral, why](ServerOptions&, const std::string& f, const std::string& v) {
    if (to_num(f, v, -1e9, 1e9) != neutral)
      raise("E_FLAG_REFUSED", Where{"", "", f}, fmt::format("{} (off)", neutral), "'" + v + "'", why);
  };
}
void one_of(const std::string& f, const std::string& v, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  bad_value(f, "one of " + list, v);
}

std::string read_flag_file(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_value(flag, "a readable file", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// -l TOKEN(+|-)BIAS: "15043+1", "15043-1"; llama-server also takes "-inf" via a bias of "-inf".
void add_logit_bias(ServerOptions& o, const std::string& f, const std::string& v) {
  size_t k = v.find_first_of("+-", 1);
  if (k == std::string::npos) bad_value(f, "TOKEN+BIAS or TOKEN-BIAS (e.g. 15043+1)", v);
  int64_t id = to_int(f, v.substr(0, k), 0, INT32_MAX);
  std::string b = v.substr(k);
  if (b[0] == '+') b = b.substr(1);
  float bias = b == "-inf" ? -INFINITY : static_cast<float>(to_num(f, b, -1e9, 1e9));
  o.logit_bias.push_back({static_cast<int32_t>(id), bias});
}

std::vector<Flag> compat_rows() {
  using S = FlagStatus;
  using O = ServerOptions;
  const std::string mem = "the memory plan on the start screen chooses context and slots";
  const std::string nosimilar =
      "a slot is chosen by the longest prompt prefix its kept state or its prompt-end snapshot holds, else "
      "least-recently-used: recurrent state cannot resume from part of a history, so no similarity threshold "
      "applies";
  const std::string nosnap =
      "one snapshot a slot, at its last prompt's end: snapshots at more positions are not built yet";
  const std::string log = "bloomery logs the start screen to stdout and errors to stderr at one level";
  return {
      // §1.1 model source and loading
      value_row({"-hft", "--hf-token"}, "", "TOKEN", "HF_TOKEN", S::Ignore, "nothing is downloaded yet",
                note("nothing is downloaded yet")),
      switch_row({"--offline"}, {}, "LLAMA_ARG_OFFLINE", "on", S::Map,
                 "always offline: bloomery reads local folders only", [](O&, auto&, bool) {}),
      value_row({"-lm", "--load-mode"}, "LLAMA_ARG_LOAD_MODE", "auto|none|mmap|mlock|mmap+mlock|dio", "auto",
                S::Map, "weights are always read with direct reads (auto = dio); mmap/mlock do not apply",
                [](O& o, auto& f, auto& v) {
                  one_of(f, v, {"auto", "none", "mmap", "mlock", "mmap+mlock", "dio"});
                  note_unless({"auto", "dio"}, "weights are always read with direct reads")(o, f, v);
                }),
      switch_row({"--mmap"}, {"--no-mmap"}, "LLAMA_ARG_MMAP", "off", S::Map,
                 "weights are always read with direct reads (--no-mmap is what bloomery does)",
                 note_switch(true, "weights are always read with direct reads, never mapped")),
      switch_row({"--mlock"}, {}, "LLAMA_ARG_MLOCK", "off", S::Ignore,
                 "weights live in engine memory, not in mapped pages that could be swapped",
                 note_switch(true, "weights live in engine memory, not in mapped pages")),
      switch_row({"-dio", "--direct-io"}, {"-ndio", "--no-direct-io"}, "LLAMA_ARG_DIO", "on", S::Map,
                 "direct reads are always used", note_switch(false, "direct reads are always used")),
      value_row({"-lzm", "--lazy-mode"}, "LLAMA_ARG_LAZY_MODE", "on|auto|off", "auto", S::Ignore,
                "the PLE table's placement is chosen by the memory plan",
                [](O& o, auto& f, auto& v) {
                  one_of(f, v, {"on", "auto", "off"});
                  note_unless({"auto"}, "the PLE table's placement is chosen by the memory plan")(o, f, v);
                }),
      switch_row({"--check-tensors"}, {}, "", "off", S::Ignore,
                 "scale bytes are always checked at load; a full NaN scan of dense tensors is not built",
                 note_switch(true, "scale bytes are always checked at load; the full NaN scan is not built")),
      switch_row({"--warmup"}, {"--no-warmup"}, "", "on", S::Ignore,
                 "the engine needs no warm-up pass before serving", [](O&, auto&, bool) {}),
      // §1.2 context, batching, slots, caches
      value_row({"--keep"}, "", "N", "0", S::Map, "n_keep bookkeeping only: context shift is off",
                [](O& o, auto& f, auto& v) { o.n_keep = to_int(f, v, -1, int64_t{1} << 30); }),
      switch_row({"--context-shift"}, {"--no-context-shift"}, "LLAMA_ARG_CONTEXT_SHIFT", "off", S::Refuse,
                 "on refused: recurrent state cannot be shifted",
                 refuse_switch_on("recurrent state cannot be shifted; the context end stops generation")),
      switch_row({"--swa-full"}, {}, "LLAMA_ARG_SWA_FULL", "off", S::Ignore,
                 "these families keep full attention caches",
                 note_switch(true, "no sliding-window cache exists")),
      switch_row({"-kvu", "--kv-unified"}, {"-no-kvu", "--no-kv-unified"}, "LLAMA_ARG_KV_UNIFIED", "off",
                 S::Ignore, "each slot owns n_ctx / n_parallel tokens; a shared paged pool is not built yet",
                 note_switch(true, "each slot owns n_ctx / n_parallel tokens (no shared pool yet)")),
      value_row({"--kv-unified-per-slot"}, "LLAMA_ARG_KV_UNIFIED_PER_SLOT", "N", "", S::Ignore,
                "each slot owns n_ctx / n_parallel tokens", note("each slot owns n_ctx / n_parallel tokens")),
      value_row({"-sps", "--slot-prompt-similarity"}, "", "F", "0.10", S::Ignore, nosimilar,
                [nosimilar](O& o, auto& f, auto& v) {
                  to_num(f, v, 0.0, 1.0);
                  note(nosimilar)(o, f, v);
                }),
      switch_row(
          {"--cache-prompt"}, {"--no-cache-prompt"}, "LLAMA_ARG_CACHE_PROMPT", "on", S::Impl,
          "a finished request's slot keeps its state and a snapshot at its prompt's end; a prompt that "
          "extends either resumes from it and reads only the rest",
          [](O& o, auto&, bool on) { o.cache_prompt = on; }),
      value_row({"--cache-reuse"}, "LLAMA_ARG_CACHE_REUSE", "N", "0", S::Refuse,
                "N > 0 refused: KV shifting is impossible with recurrent state",
                [](O&, auto& f, auto& v) {
                  if (to_int(f, v, 0, int64_t{1} << 30) > 0)
                    raise("E_FLAG_REFUSED", Where{"", "", f}, "0", "'" + v + "'",
                          "KV shifting is impossible with recurrent state; leave --cache-reuse at 0");
                }),
      value_row({"-cram", "--cache-ram"}, "LLAMA_ARG_CACHE_RAM", "MiB", "8192", S::Ignore,
                "no host-side store of idle slots yet", note("no host-side store of idle slots yet")),
      switch_row({"--cache-idle-slots"}, {"--no-cache-idle-slots"}, "LLAMA_ARG_CACHE_IDLE_SLOTS", "on",
                 S::Ignore, "idle slots keep their state in place", [](O&, auto&, bool) {}),
      value_row({"-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"}, "LLAMA_ARG_CTX_CHECKPOINTS", "N", "32",
                S::Ignore, nosnap, note(nosnap)),
      value_row({"-cms", "--checkpoint-min-step"}, "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", "N", "8192",
                S::Ignore, nosnap, note(nosnap)),
      switch_row({"-kvo", "--kv-offload"}, {}, "LLAMA_ARG_KV_OFFLOAD", "on", S::Map,
                 "the KV cache always lives on the engine's device", [](O&, auto&, bool) {}),
      switch_row({"--spm-infill"}, {}, "", "off", S::Ignore, "/infill is not served",
                 note_switch(true, "/infill is not served")),
      // §1.3 devices and parallelism
      value_row({"-sm", "--split-mode"}, "LLAMA_ARG_SPLIT_MODE", "none|layer|row|tensor", "none", S::Map,
                "tensor = tensor parallelism over --tp ranks (or the --nodes); layer and row are refused",
                [](O& o, auto& f, auto& v) {
                  one_of(f, v, {"none", "layer", "row", "tensor"});
                  if (v == "layer" || v == "row")
                    raise("E_FLAG_REFUSED", Where{"", "", f}, "none or tensor", "'" + v + "'",
                          "layer and row splits are not built; use -sm tensor with --tp N");
                  o.split_mode = v;
                  o.split_mode_flag = f;
                }),
      value_row({"-ts", "--tensor-split"}, "LLAMA_ARG_TENSOR_SPLIT", "N0,N1,...", "even", S::Map,
                "equal proportions only; unequal splits are refused",
                [](O& o, auto& f, auto& v) {
                  auto parts = split_commas(v);
                  if (parts.empty()) bad_value(f, "comma-separated proportions", v);
                  double first = to_num(f, parts[0], 0.0, 1e9);
                  for (const auto& p : parts)
                    if (to_num(f, p, 0.0, 1e9) != first)
                      raise("E_FLAG_REFUSED", Where{"", "", f}, "equal proportions", "'" + v + "'",
                            "unequal tensor splits are not supported");
                  o.warnings.push_back(f + " " + v + " is ignored: one device per process");
                }),
      value_row({"-mg", "--main-gpu"}, "LLAMA_ARG_MAIN_GPU", "INDEX", "0", S::Map,
                "device 0 only; choose another with CUDA_VISIBLE_DEVICES",
                [](O&, auto& f, auto& v) {
                  if (to_int(f, v, 0, 1024) != 0)
                    raise("E_FLAG_REFUSED", Where{"", "", f}, "0", "'" + v + "'",
                          "bloomery uses CUDA device 0; pick the card with CUDA_VISIBLE_DEVICES");
                }),
      value_row({"-fit", "--fit"}, "LLAMA_ARG_FIT", "on|off", "on", S::Map, mem,
                [](O&, auto& f, auto& v) {
                  one_of(f, v, {"on", "off"});
                }),
      value_row({"-fitt", "--fit-target"}, "LLAMA_ARG_FIT_TARGET", "MiB,...", "1024", S::Ignore, mem,
                note(mem)),
      value_row({"-fitc", "--fit-ctx"}, "LLAMA_ARG_FIT_CTX", "N", "4096", S::Ignore, mem, note(mem)),
      value_row({"-tb", "--threads-batch"}, "LLAMA_ARG_THREADS_BATCH", "N", "-1", S::Map,
                "prompt and decode share the -t/--threads pool",
                [](O& o, auto& f, auto& v) {
                  to_int(f, v, -1, 1024);
                  note("prompt and decode share the -t/--threads pool")(o, f, v);
                }),
      value_row({"-C", "--cpu-mask", "-Cr", "--cpu-range", "-Cb", "--cpu-mask-batch", "-Crb",
                 "--cpu-range-batch", "--prio", "--prio-batch", "--poll", "--poll-batch", "--numa"},
                "", "V", "", S::Ignore, "thread placement is left to the OS",
                note("thread placement is left to the OS")),
      switch_row({"--cpu-strict", "--cpu-strict-batch"}, {}, "", "off", S::Ignore,
                 "thread placement is left to the OS",
                 note_switch(true, "thread placement is left to the OS")),
      // §1.5 chat templates and reasoning
      value_row({"--chat-template"}, "LLAMA_ARG_CHAT_TEMPLATE", "NAME|JINJA", "the model's", S::Impl,
                "built-in template name (chatml) or Jinja text instead of the checkpoint's template",
                [](O& o, auto& f, auto& v) {
                  if (v.find("{{") == std::string::npos && v.find("{%") == std::string::npos && v != "chatml")
                    raise("E_FLAG_REFUSED", Where{"", "", f}, "chatml or Jinja template text", "'" + v + "'",
                          "built-in templates: chatml; pass --chat-template-file FILE for another");
                  o.chat_template = v;
                }),
      value_row({"--chat-template-kwargs"}, "LLAMA_ARG_CHAT_TEMPLATE_KWARGS", "JSON", "", S::Impl,
                "JSON object passed to every chat template render (requests' chat_template_kwargs win)",
                [](O& o, auto& f, auto& v) {
                  auto j = nlohmann::json::parse(v, nullptr, false);
                  if (j.is_discarded() || !j.is_object()) bad_value(f, "a JSON object", v);
                  o.chat_template_kwargs = v;
                }),
      switch_row({"--skip-chat-parsing"}, {"--no-skip-chat-parsing"}, "LLAMA_ARG_SKIP_CHAT_PARSING", "off",
                 S::Impl, "return the generated text as it is: no reasoning or tool-call parsing",
                 [](O& o, auto&, bool on) { o.skip_chat_parsing = on; }),
      switch_row({"--prefill-assistant"}, {"--no-prefill-assistant"}, "LLAMA_ARG_PREFILL_ASSISTANT", "on",
                 S::Ignore, "a trailing assistant message is rendered as the template renders it",
                 note_switch(false, "a trailing assistant message is rendered as the template renders it")),
      value_row({"--reasoning-format"}, "LLAMA_ARG_THINK", "none|deepseek|deepseek-legacy|auto", "auto",
                S::Impl, "default for requests: none keeps <think> text in content; else reasoning_content",
                [](O& o, auto& f, auto& v) {
                  one_of(f, v, {"none", "deepseek", "deepseek-legacy", "auto"});
                  o.reasoning_format = v;
                }),
      value_row({"-rea", "--reasoning"}, "LLAMA_ARG_REASONING", "on|off|auto", "auto", S::Impl,
                "the template's thinking switch (enable_thinking) for every request",
                [](O& o, auto& f, auto& v) {
                  one_of(f, v, {"on", "off", "auto"});
                  if (v == "auto") return;
                  auto j =
                      nlohmann::json::parse(o.chat_template_kwargs.empty() ? "{}" : o.chat_template_kwargs);
                  j["enable_thinking"] = v == "on";
                  o.chat_template_kwargs = j.dump();
                }),
      value_row({"--reasoning-budget"}, "LLAMA_ARG_THINK_BUDGET", "N", "-1", S::Map,
                "-1 = unlimited, 0 = thinking off (enable_thinking false); N > 0 is refused",
                [](O& o, auto& f, auto& v) {
                  int64_t n = to_int(f, v, -1, int64_t{1} << 30);
                  if (n > 0)
                    raise("E_FLAG_REFUSED", Where{"", "", f}, "-1 or 0", "'" + v + "'",
                          "cutting thinking after N tokens is not built; 0 turns thinking off");
                  if (n == 0) {
                    auto j =
                        nlohmann::json::parse(o.chat_template_kwargs.empty() ? "{}" : o.chat_template_kwargs);
                    j["enable_thinking"] = false;
                    o.chat_template_kwargs = j.dump();
                  }
                }),
      value_row({"--reasoning-budget-message"}, "LLAMA_ARG_THINK_BUDGET_MESSAGE", "MSG", "", S::Ignore,
                "no thinking budget is enforced", note("no thinking budget is enforced")),
      value_row({"--reasoning-effort"}, "LLAMA_ARG_REASONING_EFFORT", "LEVEL", "", S::Impl,
                "reasoning_effort passed to the chat template",
                [](O& o, auto&, auto& v) {
                  auto j =
                      nlohmann::json::parse(o.chat_template_kwargs.empty() ? "{}" : o.chat_template_kwargs);
                  j["reasoning_effort"] = v;
                  o.chat_template_kwargs = j.dump();
                }),
      switch_row({"--reasoning-preserve"}, {"--no-reasoning-preserve"}, "", "on", S::Ignore,
                 "earlier turns' reasoning is rendered as the template renders it", [](O&, auto&, bool) {}),
      // §1.6 HTTP, security, monitoring
      switch_row({"--reuse-port"}, {}, "LLAMA_ARG_REUSE_PORT", "off", S::Ignore,
                 "the listening socket is not shared",
                 note_switch(true, "the listening socket is not shared")),
      value_row({"--path"}, "LLAMA_ARG_STATIC_PATH", "PATH", "", S::Ignore,
                "no static files are served; / is a status page", note("no static files are served")),
      value_row({"--cors-origins"}, "LLAMA_ARG_CORS_ORIGINS", "LIST", "*", S::Map, "CORS answers '*'",
                note_unless({"*"}, "CORS answers Access-Control-Allow-Origin: *")),
      value_row({"--cors-methods"}, "LLAMA_ARG_CORS_METHODS", "LIST", "GET, POST, DELETE, OPTIONS", S::Map,
                "CORS answers GET, POST, DELETE, OPTIONS",
                note_unless({"GET, POST, DELETE, OPTIONS"}, "CORS answers GET, POST, DELETE, OPTIONS")),
      value_row({"--cors-headers"}, "LLAMA_ARG_CORS_HEADERS", "LIST", "*", S::Map, "CORS answers '*'",
                note_unless({"*"}, "CORS answers Access-Control-Allow-Headers: *")),
      switch_row({"--cors-credentials"}, {"--no-cors-credentials"}, "LLAMA_ARG_CORS_CREDENTIALS", "on",
                 S::Ignore, "CORS answers are fixed", [](O&, auto&, bool) {}),
      value_row({"--ui-config", "--ui-config-file"}, "", "JSON|FILE", "", S::Ignore,
                "bloomery ships no web UI", note("bloomery ships no web UI")),
      switch_row({"--props"}, {}, "LLAMA_ARG_ENDPOINT_PROPS", "off", S::Impl,
                 "enable POST /props (no settable properties yet)",
                 [](O& o, auto&, bool on) { o.props = on; }),
      value_row({"--sleep-idle-seconds"}, "", "N", "-1", S::Refuse,
                "N >= 0 refused: reloading 100+ GB on wake defeats the purpose",
                [](O&, auto& f, auto& v) {
                  if (to_int(f, v, -1, int64_t{1} << 30) >= 0)
                    raise("E_FLAG_REFUSED", Where{"", "", f}, "-1", "'" + v + "'",
                          "sleeping when idle is not built; stop the process to free the memory");
                }),
      value_row({"--sse-ping-interval"}, "LLAMA_ARG_SSE_PING_INTERVAL", "N", "30", S::Ignore,
                "streams are checked for a gone client every 250 ms instead of pinged",
                note("streams are checked for a gone client every 250 ms instead of pinged")),
      switch_row({"-v", "--verbose", "--log-verbose"}, {}, "LLAMA_ARG_VERBOSE", "off", S::Ignore, log,
                 note_switch(true, log)),
      value_row({"-lv", "--verbosity", "--log-verbosity"}, "LLAMA_ARG_LOG_VERBOSITY", "N", "3", S::Ignore,
                log,
                [log](O& o, auto& f, auto& v) {
                  to_int(f, v, 0, 100);
                  note_unless({"3"}, log)(o, f, v);
                }),
      value_row({"--log-file"}, "LLAMA_ARG_LOG_FILE", "FILE", "", S::Ignore,
                "logs go to stdout/stderr; redirect them", note("logs go to stdout/stderr; redirect them")),
      value_row({"--log-colors"}, "LLAMA_ARG_LOG_COLORS", "on|off|auto", "auto", S::Ignore, log,
                note_unless({"auto", "off"}, "bloomery's logs are never coloured")),
      switch_row({"--log-disable"}, {}, "", "off", S::Ignore, log,
                 note_switch(true, "the start screen and errors are always printed")),
      switch_row({"--log-jsonl", "--log-prefix", "--log-timestamps"}, {}, "", "off", S::Ignore, log,
                 note_switch(true, log)),
      value_row({"--log-prompts-dir"}, "", "DIR", "", S::Ignore, "prompts are never written to disk",
                note("prompts are never written to disk")),
      // §1.7 sampling defaults
      value_row({"--samplers", "--sampling-seq", "--sampler-seq"}, "", "LIST", "penalties;...;temperature",
                S::Ignore, "the sampler order is fixed: penalties, top_k, top_p, min_p, temperature",
                note("the sampler order is fixed: penalties, top_k, top_p, min_p, temperature")),
      value_row({"--top-nsigma"}, "", "N", "-1", S::Refuse, "values other than -1 refused: not supported",
                [](O&, auto& f, auto& v) {
                  if (to_num(f, v, -1e9, 1e9) > 0)
                    raise("E_FLAG_REFUSED", Where{"", "", f}, "-1 (off)", "'" + v + "'",
                          "top-n-sigma sampling is not supported");
                }),
      value_row({"--typical"}, "", "P", "1.0", S::Refuse, "values other than 1.0 refused: not supported",
                neutral_only(1.0, "typical sampling is not supported")),
      value_row({"--dry-multiplier"}, "", "F", "0", S::Refuse, "values other than 0 refused: not supported",
                neutral_only(0.0, "DRY sampling is not supported")),
      value_row({"--dry-base", "--dry-allowed-length", "--dry-penalty-last-n", "--dry-sequence-breaker"}, "",
                "V", "", S::Ignore, "DRY sampling is off (--dry-multiplier 0)",
                note("DRY sampling is not built")),
      value_row({"--xtc-probability"}, "", "P", "0", S::Refuse, "values other than 0 refused: not supported",
                neutral_only(0.0, "XTC sampling is not supported")),
      value_row({"--xtc-threshold"}, "", "T", "0.10", S::Ignore, "XTC sampling is off",
                note("XTC sampling is not built")),
      value_row({"--mirostat"}, "", "N", "0", S::Refuse, "values other than 0 refused: not supported",
                neutral_only(0.0, "mirostat sampling is not supported")),
      value_row({"--mirostat-lr", "--mirostat-ent"}, "", "F", "", S::Ignore, "mirostat is off",
                note("mirostat sampling is not built")),
      value_row({"--dynatemp-range"}, "", "F", "0", S::Refuse, "values other than 0 refused: not supported",
                neutral_only(0.0, "dynamic temperature is not supported")),
      value_row({"--dynatemp-exp"}, "", "F", "1.0", S::Ignore, "dynamic temperature is off",
                note("dynamic temperature is not built")),
      value_row({"-l", "--logit-bias"}, "", "TOKEN(+/-)BIAS", "", S::Impl,
                "default logit bias for requests (repeatable)", add_logit_bias),
      value_row({"--grammar"}, "", "GBNF", "", S::Impl, "GBNF grammar every request is constrained by",
                [](O& o, auto&, auto& v) { o.grammar = v; }),
      value_row({"--grammar-file"}, "", "FILE", "", S::Impl,
                "file with a GBNF grammar every request inherits",
                [](O& o, auto& f, auto& v) { o.grammar = read_flag_file(f, v); }),
      value_row({"-j", "--json-schema"}, "", "SCHEMA", "", S::Impl,
                "JSON schema every request's output follows",
                [](O& o, auto& f, auto& v) {
                  if (nlohmann::json::parse(v, nullptr, false).is_discarded())
                    bad_value(f, "a JSON schema", v);
                  o.json_schema = v;
                }),
      value_row({"-jf", "--json-schema-file"}, "", "FILE", "", S::Impl, "file with a JSON schema (as -j)",
                [](O& o, auto& f, auto& v) {
                  o.json_schema = read_flag_file(f, v);
                  if (nlohmann::json::parse(o.json_schema, nullptr, false).is_discarded())
                    bad_value(f, "a file with a JSON schema", v);
                }),
      switch_row({"--ignore-eos"}, {}, "", "off", S::Impl, "default ignore_eos for requests",
                 [](O& o, auto&, bool on) { o.ignore_eos = on; }),
  };
}

// Value rows leave set_switch empty and Switch rows leave set empty; the table reads better without the
// filler.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
std::vector<Flag> with_compat(std::vector<Flag> base) {
  auto more = compat_rows();
  base.insert(base.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  return base;
}

const std::vector<Flag>& flag_table() {
  using O = ServerOptions;
  static const std::vector<Flag> t = with_compat({
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
      {{"--webui", "--ui"},
       {"--no-webui", "--no-ui"},
       "LLAMA_ARG_WEBUI",
       Kind::Switch,
       "",
       "on",
       "accepted for compatibility; bloomery ships no web UI",
       {},
       [](O& o, auto&, bool on) { o.webui = on; }},
      {{"--jinja"},
       {"--no-jinja"},
       "LLAMA_ARG_JINJA",
       Kind::Switch,
       "",
       "on",
       "the checkpoint's Jinja chat template; --no-jinja = the built-in chatml template",
       {},
       [](O& o, auto&, bool on) {
         if (!on) o.chat_template = "chatml";
       }},
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
       "auto",
       "KV cache type for K: auto (f32 on both engines), f16 or bf16 (a BF16 "
       "cache: half the memory, decode 1-3 % slower on the card), f32; one of -ctk/-ctv alone sets both; "
       "quantized types are refused",
       [](O& o, auto& f, auto& v) { set_cache_type(o.cache_type_k, f, v); }},
      {{"-ctv", "--cache-type-v"},
       {},
       "LLAMA_ARG_CACHE_TYPE_V",
       Kind::Value,
       "TYPE",
       "auto",
       "KV cache type for V: auto (f32 on both engines), f16 or bf16 (a BF16 "
       "cache: half the memory, decode 1-3 % slower on the card), f32; one of -ctk/-ctv alone sets both; "
       "quantized types are refused",
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
       },
       {},
       FlagStatus::Ignore,
       "bloomery's attention kernels are always fused"},
      {{"-ngl", "--gpu-layers", "--n-gpu-layers"},
       {},
       "LLAMA_ARG_N_GPU_LAYERS",
       Kind::Value,
       "N|auto|all",
       "auto",
       "ignored: every layer runs on the engine's device",
       [](O& o, auto& f, auto& v) {
         o.warnings.push_back(f + " " + v + " is ignored: no layer split exists");
       },
       {},
       FlagStatus::Map,
       "every layer runs on the engine's device"},
      {{"--tp"},
       {},
       "",
       Kind::Value,
       "N",
       "1",
       "bloomery: tensor-parallel ranks (CUDA ranks one GPU each, or all on one GPU; CPU ranks as threads; "
       "--tp-launch says whether they are threads or processes; with --nodes, the number of nodes)",
       [](O& o, auto& f, auto& v) { o.tp = static_cast<int>(to_int(f, v, 1, 64)); }},
      {{"--nodes"},
       {},
       "",
       Kind::Value,
       "HOST:PORT,...",
       "",
       "bloomery: one rank per process; rank 0 listens on the first address, the others connect to it",
       [](O& o, auto& f, auto& v) {
         if (v.empty()) bad_value(f, "host:port,host:port,...", v);
         o.nodes = v;
       }},
      {{"--node-rank"},
       {},
       "",
       Kind::Value,
       "R",
       "0",
       "bloomery: this process's rank in --nodes; rank 0 serves HTTP, the others follow it",
       [](O& o, auto& f, auto& v) { o.node_rank = static_cast<int>(to_int(f, v, 0, 63)); }},
      {{"--tp-launch"},
       {},
       "",
       Kind::Value,
       "auto|threads|processes",
       "auto",
       "bloomery: how --tp N ranks run on one host (without --nodes): processes starts one bloomery-serve "
       "per "
       "rank on 127.0.0.1 (rank r on GPU r); auto takes processes for CUDA ranks with a GPU each, threads "
       "otherwise",
       [](O& o, auto& f, auto& v) {
         if (v != "auto" && v != "threads" && v != "processes") bad_value(f, "auto, threads or processes", v);
         o.tp_launch = v;
       }},
      {{"--collective-timeout-ms"},
       {},
       "",
       Kind::Value,
       "MS",
       "10000",
       "bloomery: deadline of every inter-rank collective and heartbeat; a rank later than this is named, "
       "/health turns 503",
       [](O& o, auto& f, auto& v) { o.collective_timeout_ms = static_cast<int>(to_int(f, v, 1, 3600000)); }},
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
       [](O&, auto&, bool) {},
       FlagStatus::Map,
       "continuous batching is always on"},
      // ---- speculative decoding (serving.md §1.4) ----
      {{"--spec-type"},
       {},
       "LLAMA_ARG_SPEC_TYPE",
       Kind::Value,
       "TYPE",
       "none",
       "none, draft-mtp (the checkpoint's own MTP/NextN layer drafts) or ngram-simple (drafts looked up in "
       "the "
       "request's own tokens); the model verifies",
       [](O& o, auto& f, auto& v) {
         if (v == "none" || v == "draft-mtp" || v == "ngram-simple") {
           o.spec_type = v;
           return;
         }
         static const std::vector<std::string> later = {"ngram-map-k",  "ngram-map-k4v", "ngram-mod",
                                                        "ngram-cache",  "draft-simple",  "draft-eagle3",
                                                        "draft-dflash", "draft-dspark"};
         if (std::find(later.begin(), later.end(), v) != later.end())
           raise("E_FLAG_REFUSED", Where{"", "", f}, "none, draft-mtp or ngram-simple", "'" + v + "'",
                 v.rfind("ngram", 0) == 0 ? "only ngram-simple is implemented"
                                          : "external draft models are not supported");
         bad_value(f, "none, draft-mtp or ngram-simple", v);
       }},
      {{"--spec-draft-n-max", "--draft-max", "--draft", "--draft-n"},
       {},
       "LLAMA_ARG_SPEC_DRAFT_N_MAX",
       Kind::Value,
       "N",
       "3",
       "most drafts per step (1-8)",
       [](O& o, auto& f, auto& v) { o.spec_n_max = static_cast<int>(to_int(f, v, 1, 8)); }},
      {{"--spec-draft-n-min", "--draft-min", "--draft-n-min"},
       {},
       "LLAMA_ARG_SPEC_DRAFT_N_MIN",
       Kind::Value,
       "N",
       "0",
       "fewer drafts than this are not verified",
       [](O& o, auto& f, auto& v) { o.spec_n_min = static_cast<int>(to_int(f, v, 0, 8)); }},
      {{"--spec-draft-p-min", "--draft-p-min"},
       {},
       "LLAMA_ARG_SPEC_DRAFT_P_MIN",
       Kind::Value,
       "P",
       "0.00",
       "stop drafting when the draft's top probability falls below P",
       [](O& o, auto& f, auto& v) { o.spec_p_min = to_num(f, v, 0.0, 1.0); }},
      {{"--spec-draft-sampling"},
       {},
       "LLAMA_ARG_SPEC_DRAFT_SAMPLING",
       Kind::Value,
       "MODE",
       "greedy",
       "greedy (drafts are the draft layer's argmax)",
       [](O& o, auto& f, auto& v) {
         if (v == "probabilistic")
           raise("E_FLAG_REFUSED", Where{"", "", f}, "greedy", "'" + v + "'",
                 "drafts sampled from the draft distribution are not implemented yet");
         if (v != "greedy") bad_value(f, "greedy", v);
       }},
      {{"--spec-default"},
       {},
       "",
       Kind::Switch,
       "",
       "off",
       "--spec-type draft-mtp --spec-draft-n-max 3",
       {},
       [](O& o, auto&, bool on) {
         if (on) o.spec_type = "draft-mtp", o.spec_n_max = 3;
       }},
  });
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

// llama-server flags of modes bloomery does not have (serving.md §1.1 "n/a"): still unknown, but the error
// says what they are instead of suggesting a random neighbour.
const std::vector<std::string>& not_served_flags() {
  static const std::vector<std::string> n = {"-dr",          "--docker-repo",     "-cl",
                                             "--cache-list", "--models-dir",      "--models-preset",
                                             "--models-max", "--models-autoload", "--no-models-autoload"};
  return n;
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

// "did you mean X?" over every llama-server flag bloomery knows, accepted or refused; a refused neighbour
// says so, so the user does not retry a flag that cannot work.
std::string suggestion(const std::string& arg) {
  std::vector<std::string> names = all_flag_names();
  for (const auto& r : refused_flags()) names.insert(names.end(), r.names.begin(), r.names.end());
  std::string best = closest(arg, names);
  std::string s = "did you mean " + best + "?";
  if (const Refused* r = find_refused(best))
    s += " (" + best + " is refused: " + r->why + ")";
  else if (Lookup l = find_flag(best); l.flag && l.flag->status == FlagStatus::Refuse)
    s += " (" + best + " " + l.flag->why + ")";
  return s + " (--help lists every flag)";
}

}  // namespace

const char* flag_status_name(FlagStatus s) {
  switch (s) {
    case FlagStatus::Impl:
      return "impl";
    case FlagStatus::Map:
      return "map";
    case FlagStatus::Ignore:
      return "ignore";
    case FlagStatus::Refuse:
      return "refuse";
    case FlagStatus::NotServed:
      return "n/a";
  }
  return "?";
}

std::vector<FlagInfo> flag_inventory() {
  std::vector<FlagInfo> out;
  for (const auto& f : flag_table()) {
    std::vector<std::string> names = f.names;
    names.insert(names.end(), f.negative.begin(), f.negative.end());
    out.push_back({names, f.status, f.kind == Kind::Value, f.status == FlagStatus::Impl ? f.help : f.why});
  }
  for (const auto& r : refused_flags()) out.push_back({r.names, FlagStatus::Refuse, r.takes_value, r.why});
  out.push_back({not_served_flags(), FlagStatus::NotServed, true,
                 "llama-server router and registry flags: bloomery serves one model (-m)"});
  return out;
}

std::string builtin_chat_template(const std::string& name_or_text) {
  if (name_or_text != "chatml") return name_or_text;
  return "{%- for message in messages -%}"
         "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
         "{%- endfor -%}"
         "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";
}

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
      const auto& ns = not_served_flags();
      if (std::find(ns.begin(), ns.end(), arg) != ns.end())
        raise("E_FLAG_UNKNOWN", Where{"", "", arg}, "a known flag", "'" + arg + "'",
              "a llama-server router/registry flag: bloomery serves the one model given with -m");
      raise("E_FLAG_UNKNOWN", Where{"", "", arg}, "a known flag", "'" + arg + "'", suggestion(arg));
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
  // -sm none with several ranks contradicts itself; -sm tensor alone means every --nodes rank.
  if (o.user_set("split-mode") && o.split_mode == "none" && o.tp > 1)
    raise("E_FLAG_VALUE", Where{"", "", "-sm/--split-mode"}, "tensor with --tp " + std::to_string(o.tp),
          "'none'", "drop -sm none or --tp");
  if (o.split_mode == "tensor" && o.tp == 1 && o.nodes.empty())
    o.warnings.push_back(o.split_mode_flag + " tensor with one rank runs as none: give --tp N or --nodes");
  (void)kv_cache_type(o.cache_type_k, o.cache_type_v);  // one type for K and V, else refused by name
  if (o.user_set("tp-launch") && o.tp_launch != "auto" && !o.nodes.empty())
    o.warnings.push_back("--tp-launch " + o.tp_launch +
                         " has no effect with --nodes (each node is a process)");
  if (o.node_rank > 0 && o.nodes.empty())
    raise("E_FLAG_VALUE", Where{"", "", "--node-rank"}, "0 without --nodes", std::to_string(o.node_rank),
          "give every rank's address with --nodes host:port,...");
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
