// bloomery-serve's command line: llama-server's flag names, aliases and defaults, each also read from an
// environment variable (BLOOMERY_ARG_<NAME>, then llama-server's LLAMA_ARG_* name); the command line wins.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace bloomery::server {

struct ServerOptions {
  std::string model;               // -m: a model folder
  std::string alias;               // -a: name reported by /v1/models (default: the model path)
  std::string host = "127.0.0.1";  // --host
  int port = 8080;                 // --port
  int64_t ctx_size = 0;            // -c: total context over all slots; 0 = from the model
  int n_parallel = -1;             // -np: slots; -1 = auto
  int64_t batch_size = 2048;       // -b: most prompt tokens accepted per scheduler step
  int64_t ubatch_size = 512;       // -ub: most prompt tokens of one sequence per forward
  int64_t n_predict = -1;          // -n: default generation limit; -1 = until EOS or the context end
  int threads = -1;                // -t: CPU engine threads; -1 = every core
  int threads_http = -1;           // --threads-http: -1 = slots + 4
  // Sampling defaults (§1.7); requests override them.
  double temperature = 0.8;
  int top_k = 40;
  double top_p = 0.95;
  double min_p = 0.05;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repeat_penalty = 1.0;
  int repeat_last_n = 64;
  int64_t seed = -1;  // -1 = random per request
  // Security and HTTP.
  std::vector<std::string> api_keys;  // --api-key (comma-separated) plus --api-key-file lines
  std::string api_key_file;
  int timeout = 3600;               // -to: read/write timeout in seconds
  int64_t http_max_body_mib = 32;   // --http-max-body: 413 past it
  int http_max_connections = 4096;  // --http-max-connections: 503 past it
  int http_header_timeout = 10;     // --http-header-timeout: request line + headers
  int http_body_timeout = 60;       // --http-body-timeout: the body, after the headers
  int shutdown_timeout = 30;        // --shutdown-timeout: drain time on the first SIGTERM
  bool metrics = false;
  bool slots = true;
  bool cache_prompt = true;  // --cache-prompt: a finished request's slot keeps its state for the next prompt
  bool webui = true;         // accepted; bloomery serves no web UI either way
  std::string chat_template_file;
  std::string device = "auto";  // -dev: auto (CUDA when it can run the family, else CPU), none (CPU), cuda0
  std::string cache_type_k = "auto";  // -ctk/-ctv: models/kv_cache_type.h
  std::string cache_type_v = "auto";
  std::string spec_type = "none";      // --spec-type: none or draft-mtp
  int spec_n_max = 3, spec_n_min = 0;  // --spec-draft-n-max / -n-min
  double spec_p_min = 0.0;             // --spec-draft-p-min
  // Tensor parallelism (serving.md §1.3, R-5): --tp ranks (-sm tensor is llama-server's spelling), one per
  // process with --nodes host:port,… --node-rank R, every collective under --collective-timeout-ms.
  int tp = 1;
  std::string split_mode = "none";  // -sm: none or tensor
  std::string split_mode_flag;      // -sm as it was spelled, for the start-screen note
  std::string nodes;
  int node_rank = 0;
  // --tp-launch: how --tp N ranks run on this host without --nodes: "auto" (one process per GPU for CUDA
  // ranks on as many GPUs, threads of this process otherwise), "threads" or "processes".
  std::string tp_launch = "auto";
  int collective_timeout_ms = 10000;
  int load_delay_ms = 0;  // --load-delay-ms: a pause before the weights load (tests of the loading state)
  bool help = false;
  bool version = false;
  // llama-server compatibility (serving.md §1.2, §1.5, §1.6, §1.7): defaults that requests inherit.
  int64_t n_keep = 0;                     // --keep: bookkeeping only (context shift is off)
  std::string chat_template;              // --chat-template: a built-in name ("chatml") or Jinja text
  std::string chat_template_kwargs;       // --chat-template-kwargs: a JSON object merged into every render
  std::string reasoning_format = "auto";  // --reasoning-format: the requests' default
  bool skip_chat_parsing = false;         // --skip-chat-parsing: no reasoning / tool-call split
  std::string grammar;                    // --grammar / --grammar-file: GBNF every request inherits
  std::string json_schema;                // -j / -jf: a JSON schema every request inherits
  bool ignore_eos = false;                // --ignore-eos
  std::vector<std::pair<int32_t, float>> logit_bias;  // -l/--logit-bias TOKEN(+/-)BIAS
  bool props = false;                                 // --props: POST /props answers
  // One line per accepted-but-ignored flag (printed once at startup).
  std::vector<std::string> warnings;

  // Long names of the flags the user set (command line or environment): the start screen explains every
  // other choice and names the flag that changes it.
  std::set<std::string> set_by_user;
  // Where each user-set value came from ("command line" or the variable's name), for the start screen.
  std::map<std::string, std::string> source;
  bool user_set(const std::string& long_name) const { return set_by_user.count(long_name) > 0; }
};

// The environment as the parser sees it (tests pass a map; main passes getenv).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Parses argv (without argv[0]) and the environment. Throws bloomery::Error: E_FLAG_UNKNOWN (with the closest
// known flag suggested), E_FLAG_VALUE (a missing or malformed value, naming the flag and the expected form),
// E_FLAG_REFUSED (a llama-server flag bloomery does not support, naming the alternative). Touches no file
// except --api-key-file, which it reads (E_FLAG_VALUE when unreadable).
ServerOptions parse_flags(const std::vector<std::string>& args, const EnvLookup& env);

// Refuses (E_FLAG_UNKNOWN, with the closest known name) any BLOOMERY_ARG_* variable among `names` that names
// no flag: a typo there would otherwise be ignored silently.
void check_env_names(const std::vector<std::string>& names);

// The --help text: every flag with aliases, value, default and environment variables.
std::string help_text();

// Every long and short flag name (for suggestions and tests).
std::vector<std::string> all_flag_names();

// How bloomery treats a llama-server flag (serving.md §0's classes).
enum class FlagStatus { Impl, Map, Ignore, Refuse, NotServed };
const char* flag_status_name(FlagStatus s);

// Every llama-server flag the parser knows, with its class and the one-line reason shown for it (for the
// docs, the table test and suggestions). A flag whose class depends on its value (--cache-reuse 0 is fine,
// N > 0 refused) is listed with the class of its non-default use.
struct FlagInfo {
  std::vector<std::string> names;  // aliases and negative names
  FlagStatus status;
  bool takes_value;
  std::string why;
};
std::vector<FlagInfo> flag_inventory();

// Jinja source of a built-in chat template (--chat-template NAME, --no-jinja): "chatml"; else the argument
// itself (Jinja text).
std::string builtin_chat_template(const std::string& name_or_text);

// The variables a flag reads: {"BLOOMERY_ARG_CTX_SIZE", "LLAMA_ARG_CTX_SIZE"}.
std::vector<std::string> env_names_for(const std::string& long_name);

}  // namespace bloomery::server
