// Walks serving.md §1's flag table (1.1–1.3, 1.5–1.7; the speculative-decoding flags of §1.4 have their own
// test): every llama-server flag bloomery lists is implemented, mapped, ignored with a start-screen line that
// names it, or refused with a reason, as its row says; none is "unknown". Also: docs/serving.md lists every
// flag the parser knows.
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "server/flags.h"

using namespace bloomery;
using namespace bloomery::server;

namespace {

enum class Want { Ok, Warn, Refuse, Unknown };

struct Row {
  std::vector<std::string> args;  // the flag (and value) as a launch script writes it
  Want want;
};

// One row per use that the spec's table names; `Ok` = impl or map with the value bloomery behaves as.
const std::vector<Row>& spec_rows() {
  static const std::vector<Row> rows = {
      // 1.1
      {{"-hf", "user/model"}, Want::Refuse},
      {{"-hfr", "user/model"}, Want::Refuse},
      {{"--hf-repo", "user/model"}, Want::Refuse},
      {{"-hff", "x.gguf"}, Want::Refuse},
      {{"--hf-file", "x.gguf"}, Want::Refuse},
      {{"-hft", "tok"}, Want::Warn},
      {{"--hf-token", "tok"}, Want::Warn},
      {{"-mu", "http://x"}, Want::Refuse},
      {{"--model-url", "http://x"}, Want::Refuse},
      {{"--offline"}, Want::Ok},
      {{"-a", "name"}, Want::Ok},
      {{"--alias", "name"}, Want::Ok},
      {{"-lm", "dio"}, Want::Ok},
      {{"--load-mode", "auto"}, Want::Ok},
      {{"--load-mode", "mmap"}, Want::Warn},
      {{"--mmap"}, Want::Warn},
      {{"--no-mmap"}, Want::Ok},
      {{"--mlock"}, Want::Warn},
      {{"-dio"}, Want::Ok},
      {{"--direct-io"}, Want::Ok},
      {{"-lzm", "on"}, Want::Warn},
      {{"--lazy-mode", "auto"}, Want::Ok},
      {{"--check-tensors"}, Want::Warn},
      {{"--warmup"}, Want::Ok},
      {{"--no-warmup"}, Want::Ok},
      {{"--override-kv", "a=int:1"}, Want::Refuse},
      {{"-mm", "x.gguf"}, Want::Refuse},
      {{"--mmproj", "x.gguf"}, Want::Refuse},
      {{"--mmproj-url", "http://x"}, Want::Refuse},
      {{"--image-min-tokens", "4"}, Want::Refuse},
      {{"--image-max-tokens", "4"}, Want::Refuse},
      {{"--media-path", "/tmp"}, Want::Refuse},
      {{"--lora", "a.gguf"}, Want::Refuse},
      {{"--lora-scaled", "a.gguf"}, Want::Refuse},
      {{"--lora-init-without-apply"}, Want::Refuse},
      {{"--control-vector", "a.gguf"}, Want::Refuse},
      {{"--control-vector-scaled", "a.gguf"}, Want::Refuse},
      {{"--control-vector-layer-range", "1"}, Want::Refuse},
      {{"-dr", "x"}, Want::Unknown},
      {{"--docker-repo", "x"}, Want::Unknown},
      {{"-cl"}, Want::Unknown},
      {{"--cache-list"}, Want::Unknown},
      {{"--models-dir", "x"}, Want::Unknown},
      {{"--models-preset", "x"}, Want::Unknown},
      {{"--models-max", "2"}, Want::Unknown},
      {{"--models-autoload"}, Want::Unknown},
      // 1.2
      {{"-c", "4096"}, Want::Ok},
      {{"--ctx-size", "4096"}, Want::Ok},
      {{"-n", "16"}, Want::Ok},
      {{"--predict", "16"}, Want::Ok},
      {{"--n-predict", "16"}, Want::Ok},
      {{"-b", "1024"}, Want::Ok},
      {{"--batch-size", "1024"}, Want::Ok},
      {{"-ub", "256"}, Want::Ok},
      {{"--ubatch-size", "256"}, Want::Ok},
      {{"--keep", "16"}, Want::Ok},
      {{"--context-shift"}, Want::Refuse},
      {{"--no-context-shift"}, Want::Ok},
      {{"--swa-full"}, Want::Warn},
      {{"-np", "2"}, Want::Ok},
      {{"--parallel", "2"}, Want::Ok},
      {{"-kvu"}, Want::Warn},
      {{"--kv-unified"}, Want::Warn},
      {{"-no-kvu"}, Want::Ok},
      {{"--no-kv-unified"}, Want::Ok},
      {{"--kv-unified-per-slot", "1024"}, Want::Warn},
      {{"-cb"}, Want::Ok},
      {{"--cont-batching"}, Want::Ok},
      {{"-nocb"}, Want::Refuse},
      {{"-sps", "0.5"}, Want::Warn},
      {{"--slot-prompt-similarity", "0.1"}, Want::Warn},
      {{"--cache-prompt"}, Want::Ok},
      {{"--no-cache-prompt"}, Want::Ok},
      {{"--cache-reuse", "0"}, Want::Ok},
      {{"--cache-reuse", "256"}, Want::Refuse},
      {{"-cram", "1024"}, Want::Warn},
      {{"--cache-ram", "1024"}, Want::Warn},
      {{"--cache-idle-slots"}, Want::Ok},
      {{"--no-cache-idle-slots"}, Want::Ok},
      {{"-ctxcp", "8"}, Want::Warn},
      {{"--ctx-checkpoints", "8"}, Want::Warn},
      {{"--swa-checkpoints", "8"}, Want::Warn},
      {{"-cms", "1024"}, Want::Warn},
      {{"--checkpoint-min-step", "1024"}, Want::Warn},
      {{"--slot-save-path", "/tmp"}, Want::Refuse},
      {{"-fa", "on"}, Want::Warn},
      {{"--flash-attn", "auto"}, Want::Warn},
      {{"-ctk", "f16"}, Want::Ok},  // a BF16 KV cache
      {{"--cache-type-k", "bf16"}, Want::Ok},
      {{"-ctk", "f32"}, Want::Ok},
      {{"-ctv", "q8_0"}, Want::Refuse},
      {{"--cache-type-v", "q4_0"}, Want::Refuse},
      {{"-kvo"}, Want::Ok},
      {{"--kv-offload"}, Want::Ok},
      {{"-nkvo"}, Want::Refuse},
      {{"--no-kv-offload"}, Want::Refuse},
      {{"--rope-scaling", "yarn"}, Want::Refuse},
      {{"--rope-scale", "2"}, Want::Refuse},
      {{"--rope-freq-base", "1e6"}, Want::Refuse},
      {{"--rope-freq-scale", "0.5"}, Want::Refuse},
      {{"--yarn-orig-ctx", "4096"}, Want::Refuse},
      {{"--yarn-ext-factor", "1"}, Want::Refuse},
      {{"--yarn-attn-factor", "1"}, Want::Refuse},
      {{"--yarn-beta-slow", "1"}, Want::Refuse},
      {{"--yarn-beta-fast", "32"}, Want::Refuse},
      {{"--pooling", "mean"}, Want::Refuse},
      {{"--embedding"}, Want::Refuse},
      {{"--embeddings"}, Want::Refuse},
      {{"--reranking"}, Want::Refuse},
      {{"--rerank"}, Want::Refuse},
      {{"--embd-normalize", "2"}, Want::Refuse},
      {{"--spm-infill"}, Want::Warn},
      // 1.3
      {{"-dev", "none"}, Want::Ok},
      {{"--device", "auto"}, Want::Ok},
      {{"--list-devices"}, Want::Refuse},
      {{"-ngl", "99"}, Want::Warn},
      {{"--gpu-layers", "all"}, Want::Warn},
      {{"--n-gpu-layers", "auto"}, Want::Warn},
      {{"-sm", "none"}, Want::Ok},
      {{"--split-mode", "layer"}, Want::Refuse},
      {{"--split-mode", "row"}, Want::Refuse},
      {{"--split-mode", "tensor"}, Want::Warn},  // one rank: a note to give --tp
      {{"--tp", "2"}, Want::Ok},
      {{"--collective-timeout-ms", "500"}, Want::Ok},
      {{"--nodes", "127.0.0.1:1,127.0.0.1:2"}, Want::Ok},
      {{"-ts", "1,1"}, Want::Warn},
      {{"--tensor-split", "3,1"}, Want::Refuse},
      {{"-mg", "0"}, Want::Ok},
      {{"--main-gpu", "1"}, Want::Refuse},
      {{"-fit", "on"}, Want::Ok},
      {{"--fit", "off"}, Want::Ok},
      {{"-fitt", "2048"}, Want::Warn},
      {{"--fit-target", "1024"}, Want::Warn},
      {{"-fitc", "8192"}, Want::Warn},
      {{"--fit-ctx", "4096"}, Want::Warn},
      {{"-ot", "exps=CPU"}, Want::Refuse},
      {{"--override-tensor", "exps=CPU"}, Want::Refuse},
      {{"-cmoe"}, Want::Refuse},
      {{"--cpu-moe"}, Want::Refuse},
      {{"-ncmoe", "4"}, Want::Refuse},
      {{"--n-cpu-moe", "4"}, Want::Refuse},
      {{"--moe-cache-mib", "512"}, Want::Refuse},
      {{"-ncffn", "2"}, Want::Refuse},
      {{"--n-cpu-ffn", "2"}, Want::Refuse},
      {{"--rpc", "host:1"}, Want::Refuse},
      {{"-t", "4"}, Want::Ok},
      {{"--threads", "4"}, Want::Ok},
      {{"-tb", "4"}, Want::Warn},
      {{"--threads-batch", "4"}, Want::Warn},
      {{"-C", "ff"}, Want::Warn},
      {{"--cpu-mask", "ff"}, Want::Warn},
      {{"--cpu-range", "0-3"}, Want::Warn},
      {{"--prio", "2"}, Want::Warn},
      {{"--poll", "50"}, Want::Warn},
      {{"--numa", "distribute"}, Want::Warn},
      // 1.5
      {{"--jinja"}, Want::Ok},
      {{"--no-jinja"}, Want::Ok},
      {{"--chat-template", "chatml"}, Want::Ok},
      {{"--chat-template", "llama3"}, Want::Refuse},
      {{"--chat-template-file", "/tmp/t.jinja"}, Want::Ok},
      {{"--chat-template-kwargs", "{\"enable_thinking\": false}"}, Want::Ok},
      {{"--skip-chat-parsing"}, Want::Ok},
      {{"--prefill-assistant"}, Want::Ok},
      {{"--no-prefill-assistant"}, Want::Warn},
      {{"--reasoning-format", "deepseek"}, Want::Ok},
      {{"--reasoning-format", "none"}, Want::Ok},
      {{"-rea", "off"}, Want::Ok},
      {{"--reasoning", "auto"}, Want::Ok},
      {{"--reasoning-budget", "-1"}, Want::Ok},
      {{"--reasoning-budget", "0"}, Want::Ok},
      {{"--reasoning-budget", "512"}, Want::Refuse},
      {{"--reasoning-budget-message", "stop"}, Want::Warn},
      {{"--reasoning-effort", "high"}, Want::Ok},
      {{"--reasoning-preserve"}, Want::Ok},
      // 1.6
      {{"--host", "0.0.0.0"}, Want::Ok},
      {{"--port", "9000"}, Want::Ok},
      {{"--reuse-port"}, Want::Warn},
      {{"--path", "/srv"}, Want::Warn},
      {{"--api-prefix", "/v2"}, Want::Refuse},
      {{"--api-key", "k"}, Want::Ok},
      {{"--ssl-key-file", "k.pem"}, Want::Refuse},
      {{"--ssl-cert-file", "c.pem"}, Want::Refuse},
      {{"-to", "600"}, Want::Ok},
      {{"--timeout", "600"}, Want::Ok},
      {{"--sse-ping-interval", "10"}, Want::Warn},
      {{"--threads-http", "8"}, Want::Ok},
      {{"--cors-origins", "*"}, Want::Ok},
      {{"--cors-origins", "https://a.example"}, Want::Warn},
      {{"--cors-methods", "GET, POST, DELETE, OPTIONS"}, Want::Ok},
      {{"--cors-headers", "*"}, Want::Ok},
      {{"--cors-credentials"}, Want::Ok},
      {{"--ui"}, Want::Ok},
      {{"--webui"}, Want::Ok},
      {{"--no-ui"}, Want::Ok},
      {{"--no-webui"}, Want::Ok},
      {{"--ui-config", "{}"}, Want::Warn},
      {{"--ui-config-file", "ui.json"}, Want::Warn},
      {{"--metrics"}, Want::Ok},
      {{"--props"}, Want::Ok},
      {{"--slots"}, Want::Ok},
      {{"--no-slots"}, Want::Ok},
      {{"--sleep-idle-seconds", "-1"}, Want::Ok},
      {{"--sleep-idle-seconds", "300"}, Want::Refuse},
      {{"--tools", "all"}, Want::Refuse},
      {{"--tools-runtime", "x"}, Want::Refuse},
      {{"--mcp-servers", "x"}, Want::Refuse},
      {{"-ag"}, Want::Refuse},
      {{"--agent"}, Want::Refuse},
      {{"--ui-mcp-proxy", "x"}, Want::Refuse},
      {{"-v"}, Want::Warn},
      {{"--verbose"}, Want::Warn},
      {{"-lv", "4"}, Want::Warn},
      {{"--verbosity", "3"}, Want::Ok},
      {{"--log-file", "x.log"}, Want::Warn},
      {{"--log-disable"}, Want::Warn},
      {{"--log-jsonl"}, Want::Warn},
      {{"--log-colors", "on"}, Want::Warn},
      {{"--log-prefix"}, Want::Warn},
      {{"--log-timestamps"}, Want::Warn},
      {{"--log-prompts-dir", "/tmp"}, Want::Warn},
      {{"--completion-bash"}, Want::Refuse},
      // 1.7
      {{"--samplers", "top_k;temperature"}, Want::Warn},
      {{"-s", "42"}, Want::Ok},
      {{"--seed", "42"}, Want::Ok},
      {{"--temp", "0.5"}, Want::Ok},
      {{"--temperature", "0.5"}, Want::Ok},
      {{"--top-k", "20"}, Want::Ok},
      {{"--top-p", "0.9"}, Want::Ok},
      {{"--min-p", "0.1"}, Want::Ok},
      {{"--top-nsigma", "-1"}, Want::Ok},
      {{"--top-nsigma", "1.5"}, Want::Refuse},
      {{"--typical", "1.0"}, Want::Ok},
      {{"--typical", "0.5"}, Want::Refuse},
      {{"--repeat-last-n", "32"}, Want::Ok},
      {{"--repeat-penalty", "1.1"}, Want::Ok},
      {{"--presence-penalty", "0.5"}, Want::Ok},
      {{"--frequency-penalty", "0.5"}, Want::Ok},
      {{"--dry-multiplier", "0"}, Want::Ok},
      {{"--dry-multiplier", "0.8"}, Want::Refuse},
      {{"--dry-base", "1.75"}, Want::Warn},
      {{"--dry-allowed-length", "2"}, Want::Warn},
      {{"--dry-penalty-last-n", "64"}, Want::Warn},
      {{"--xtc-probability", "0"}, Want::Ok},
      {{"--xtc-probability", "0.5"}, Want::Refuse},
      {{"--xtc-threshold", "0.1"}, Want::Warn},
      {{"--mirostat", "0"}, Want::Ok},
      {{"--mirostat", "2"}, Want::Refuse},
      {{"--mirostat-lr", "0.1"}, Want::Warn},
      {{"--mirostat-ent", "5"}, Want::Warn},
      {{"--dynatemp-range", "0"}, Want::Ok},
      {{"--dynatemp-range", "0.5"}, Want::Refuse},
      {{"--dynatemp-exp", "1"}, Want::Warn},
      {{"-l", "15043+1"}, Want::Ok},
      {{"--logit-bias", "15043-inf"}, Want::Ok},
      {{"--grammar", "root ::= \"a\""}, Want::Ok},
      {{"-j", "{\"type\": \"object\"}"}, Want::Ok},
      {{"--json-schema", "{}"}, Want::Ok},
      {{"--ignore-eos"}, Want::Ok},
      {{"-h"}, Want::Ok},
      {{"--help"}, Want::Ok},
      {{"--version"}, Want::Ok},
  };
  return rows;
}

const char* want_name(Want w) {
  switch (w) {
    case Want::Ok:
      return "accepted silently";
    case Want::Warn:
      return "accepted with a start-screen note";
    case Want::Refuse:
      return "refused";
    case Want::Unknown:
      return "unknown";
  }
  return "?";
}

}  // namespace

TEST(FlagTable, EveryRowOfTheSpecTableBehavesAsItsClassSays) {
  for (const auto& row : spec_rows()) {
    std::vector<std::string> args = {"-m", "/x"};
    args.insert(args.end(), row.args.begin(), row.args.end());
    const std::string& flag = row.args[0];
    std::string got, message;
    try {
      ServerOptions o = parse_flags(args, [](const std::string&) { return std::nullopt; });
      bool named = false;
      for (const auto& w : o.warnings)
        if (w.find(flag) != std::string::npos) named = true;
      got = named ? want_name(Want::Warn) : (o.warnings.empty() ? want_name(Want::Ok) : "other warnings");
      for (const auto& w : o.warnings) message += w + "; ";
    } catch (const Error& e) {
      message = e.what();
      got = e.id() == "E_FLAG_REFUSED"   ? want_name(Want::Refuse)
            : e.id() == "E_FLAG_UNKNOWN" ? want_name(Want::Unknown)
                                         : e.id();
      // A refusal names the flag and gives a reason; an unknown llama-server flag says what it is.
      EXPECT_NE(message.find(flag), std::string::npos) << message;
      if (e.id() == "E_FLAG_UNKNOWN") EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
    }
    EXPECT_EQ(got, want_name(row.want))
        << row.args[0] << (row.args.size() > 1 ? " " + row.args[1] : "") << ": " << message;
  }
}

TEST(FlagTable, ImplementedRowsSetTheirOption) {
  auto p = [](std::vector<std::string> a) {
    a.insert(a.begin(), {"-m", "/x"});
    return parse_flags(a, [](const std::string&) { return std::nullopt; });
  };
  EXPECT_EQ(p({"--no-jinja"}).chat_template, "chatml");
  EXPECT_EQ(p({"--reasoning-format", "none"}).reasoning_format, "none");
  EXPECT_TRUE(p({"--skip-chat-parsing"}).skip_chat_parsing);
  EXPECT_TRUE(p({"--props"}).props);
  EXPECT_TRUE(p({"--ignore-eos"}).ignore_eos);
  EXPECT_EQ(p({"--keep", "12"}).n_keep, 12);
  auto lb = p({"-l", "7+1.5", "-l", "9-2"}).logit_bias;
  ASSERT_EQ(lb.size(), 2u);
  EXPECT_EQ(lb[0].first, 7);
  EXPECT_FLOAT_EQ(lb[0].second, 1.5f);
  EXPECT_FLOAT_EQ(lb[1].second, -2.0f);
  EXPECT_NE(p({"-rea", "off"}).chat_template_kwargs.find("\"enable_thinking\":false"), std::string::npos);
  EXPECT_NE(p({"--reasoning-budget", "0"}).chat_template_kwargs.find("\"enable_thinking\":false"),
            std::string::npos);
  EXPECT_EQ(p({"--grammar", "root ::= \"x\""}).grammar, "root ::= \"x\"");
  std::string gf = ::testing::TempDir() + "/g.gbnf";
  std::ofstream(gf) << "root ::= [a-z]+\n";
  EXPECT_EQ(p({"--grammar-file", gf}).grammar, "root ::= [a-z]+\n");
  // Environment variables reach the compatibility rows too (the command line wins).
  auto env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "LLAMA_ARG_THINK") return std::string("none");
    if (k == "LLAMA_ARG_CONTEXT_SHIFT") return std::string("false");
    return std::nullopt;
  };
  EXPECT_EQ(parse_flags({"-m", "/x"}, env).reasoning_format, "none");
  EXPECT_EQ(parse_flags({"-m", "/x", "--reasoning-format", "deepseek"}, env).reasoning_format, "deepseek");
  auto on = [](const std::string& k) -> std::optional<std::string> {
    if (k == "LLAMA_ARG_CONTEXT_SHIFT") return std::string("on");
    return std::nullopt;
  };
  EXPECT_THROW(parse_flags({"-m", "/x"}, on), Error);
}

TEST(FlagTable, SuggestionsComeFromLlamaServerFlagsAndNameRefusals) {
  auto err = [](std::vector<std::string> a) {
    a.insert(a.begin(), {"-m", "/x"});
    try {
      parse_flags(a, [](const std::string&) { return std::nullopt; });
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Typos of accepted flags suggest the flag itself, not a random short neighbour.
  EXPECT_NE(err({"--no-mmapp"}).find("did you mean --no-mmap?"), std::string::npos) << err({"--no-mmapp"});
  EXPECT_NE(err({"--cache-promt"}).find("did you mean --cache-prompt?"), std::string::npos);
  // A typo of a refused flag names the refusal.
  std::string e = err({"--model-draf", "x"});
  EXPECT_NE(e.find("--model-draft is refused"), std::string::npos) << e;
  e = err({"--slot-save-pat", "/tmp"});
  EXPECT_NE(e.find("--slot-save-path is refused"), std::string::npos) << e;
}

TEST(FlagTable, InventoryHasNoDuplicateNamesAndDocsListEveryFlag) {
  std::map<std::string, int> seen;
  for (const auto& f : flag_inventory())
    for (const auto& n : f.names) seen[n]++;
  for (const auto& [n, c] : seen) EXPECT_EQ(c, 1) << n << " is listed " << c << " times";
  std::ifstream in(std::string(BLOOMERY_SOURCE_DIR) + "/docs/serving.md");
  ASSERT_TRUE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string docs = ss.str();
  for (const auto& f : flag_inventory()) {
    for (const auto& n : f.names)
      EXPECT_NE(docs.find("`" + n), std::string::npos) << n << " is missing from docs/serving.md";
  }
}
