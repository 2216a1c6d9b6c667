#include "server/flags.h"

#include <fstream>
#include <map>

#include <gtest/gtest.h>

#include "core/error.h"
#include "models/kv_cache_type.h"
#include "server/suggest.h"

using namespace bloomery;
using namespace bloomery::server;

namespace {

EnvLookup env_of(std::map<std::string, std::string> m) {
  return [m](const std::string& k) -> std::optional<std::string> {
    auto it = m.find(k);
    if (it == m.end()) return std::nullopt;
    return it->second;
  };
}

ServerOptions parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return parse_flags(args, env_of(std::move(env)));
}

std::string error_of(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  try {
    parse(args, env);
  } catch (const Error& e) {
    return e.id() + " | " + e.what();
  }
  return "no error";
}

}  // namespace

TEST(Flags, LlamaServerDefaults) {
  ServerOptions o = parse({"-m", "/x"});
  EXPECT_EQ(o.model, "/x");
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.port, 8080);
  EXPECT_EQ(o.ctx_size, 0);
  EXPECT_EQ(o.n_parallel, -1);
  EXPECT_EQ(o.batch_size, 2048);
  EXPECT_EQ(o.ubatch_size, 512);
  EXPECT_EQ(o.n_predict, -1);
  EXPECT_DOUBLE_EQ(o.temperature, 0.8);
  EXPECT_EQ(o.top_k, 40);
  EXPECT_DOUBLE_EQ(o.top_p, 0.95);
  EXPECT_DOUBLE_EQ(o.min_p, 0.05);
  EXPECT_EQ(o.seed, -1);
  EXPECT_EQ(o.timeout, 3600);
  EXPECT_FALSE(o.metrics);
  EXPECT_TRUE(o.slots);
  EXPECT_TRUE(o.api_keys.empty());
  EXPECT_EQ(o.set_by_user, std::set<std::string>{"model"});
}

TEST(Flags, ShortAndLongAliasesAndEqualsForm) {
  ServerOptions a = parse(
      {"-m", "/x", "-c", "8192", "-np", "3", "-b", "256", "-ub", "64", "-n", "17", "-s", "5", "-to", "9"});
  ServerOptions b = parse({"--model=/x", "--ctx-size=8192", "--parallel", "3", "--batch-size", "256",
                           "--ubatch-size=64", "--n-predict", "17", "--seed", "5", "--timeout", "9"});
  for (const ServerOptions* o : {&a, &b}) {
    EXPECT_EQ(o->ctx_size, 8192);
    EXPECT_EQ(o->n_parallel, 3);
    EXPECT_EQ(o->batch_size, 256);
    EXPECT_EQ(o->ubatch_size, 64);
    EXPECT_EQ(o->n_predict, 17);
    EXPECT_EQ(o->seed, 5);
    EXPECT_EQ(o->timeout, 9);
  }
  EXPECT_EQ(parse({"-m", "/x", "--predict", "4"}).n_predict, 4);
  EXPECT_DOUBLE_EQ(parse({"-m", "/x", "--temperature", "0.25"}).temperature, 0.25);
  EXPECT_DOUBLE_EQ(parse({"-m", "/x", "--temp", "0"}).temperature, 0.0);
}

TEST(Flags, SwitchesAndNegations) {
  EXPECT_TRUE(parse({"-m", "/x", "--metrics"}).metrics);
  EXPECT_FALSE(parse({"-m", "/x", "--no-slots"}).slots);
  EXPECT_TRUE(parse({"-m", "/x", "--no-slots", "--slots"}).slots);
  EXPECT_FALSE(parse({"-m", "/x", "--no-webui"}).webui);
  EXPECT_NO_THROW(parse({"-m", "/x", "--jinja"}));
  EXPECT_NE(error_of({"-m", "/x", "--metrics=1"}).find("E_FLAG_VALUE"), std::string::npos);
}

TEST(Flags, EnvironmentFillsAndCommandLineWins) {
  ServerOptions o = parse({"-m", "/x"}, {{"BLOOMERY_ARG_CTX_SIZE", "1024"},
                                         {"LLAMA_ARG_PORT", "9000"},
                                         {"BLOOMERY_ARG_METRICS", "enabled"},
                                         {"LLAMA_ARG_ENDPOINT_SLOTS", "off"}});
  EXPECT_EQ(o.ctx_size, 1024);
  EXPECT_EQ(o.port, 9000);
  EXPECT_TRUE(o.metrics);
  EXPECT_FALSE(o.slots);
  EXPECT_EQ(o.source.at("ctx-size"), "BLOOMERY_ARG_CTX_SIZE");
  EXPECT_TRUE(o.user_set("port"));

  ServerOptions c = parse({"-m", "/x", "-c", "2048"}, {{"BLOOMERY_ARG_CTX_SIZE", "1024"}});
  EXPECT_EQ(c.ctx_size, 2048);
  EXPECT_EQ(c.source.at("ctx-size"), "command line");
  // BLOOMERY_ARG_* beats LLAMA_ARG_*.
  EXPECT_EQ(parse({"-m", "/x"}, {{"BLOOMERY_ARG_PORT", "1"}, {"LLAMA_ARG_PORT", "2"}}).port, 1);
  // The model itself may come from the environment.
  EXPECT_EQ(parse({}, {{"BLOOMERY_ARG_MODEL", "/m"}}).model, "/m");
  EXPECT_EQ(parse({}, {{"LLAMA_API_KEY", "k1,k2"}, {"BLOOMERY_ARG_MODEL", "/m"}}).api_keys,
            (std::vector<std::string>{"k1", "k2"}));
  EXPECT_NE(error_of({"-m", "/x"}, {{"BLOOMERY_ARG_METRICS", "maybe"}}).find("BLOOMERY_ARG_METRICS"),
            std::string::npos);
  EXPECT_EQ(parse({"-m", "/x"}, {{"BLOOMERY_ARG_N_PREDICT", "12"}}).n_predict, 12);
  EXPECT_EQ(parse({"-m", "/x"}, {{"LLAMA_ARG_N_PREDICT", "13"}}).n_predict, 13);
  EXPECT_EQ(env_names_for("ctx-size"),
            (std::vector<std::string>{"BLOOMERY_ARG_CTX_SIZE", "LLAMA_ARG_CTX_SIZE"}));
}

TEST(Flags, UnknownFlagSuggestsClosest) {
  std::string e = error_of({"-m", "/x", "--ctx-sise", "4"});
  EXPECT_NE(e.find("E_FLAG_UNKNOWN"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean --ctx-size?"), std::string::npos) << e;
  e = error_of({"-m", "/x", "--paralel", "4"});
  EXPECT_NE(e.find("did you mean --parallel?"), std::string::npos) << e;
  e = error_of({"-m", "/x", "--api-kye", "k"});
  EXPECT_NE(e.find("did you mean --api-key?"), std::string::npos) << e;
  EXPECT_NO_THROW(check_env_names({"BLOOMERY_ARG_PORT", "HOME", "LLAMA_ARG_WHATEVER"}));
  try {
    check_env_names({"BLOOMERY_ARG_CTX_SIZ"});
    FAIL() << "accepted an unknown BLOOMERY_ARG_ variable";
  } catch (const Error& err) {
    EXPECT_EQ(err.id(), "E_FLAG_UNKNOWN");
    EXPECT_NE(std::string(err.what()).find("BLOOMERY_ARG_CTX_SIZE"), std::string::npos) << err.what();
  }
}

TEST(Flags, BadValuesNameTheFlag) {
  for (auto args : std::vector<std::vector<std::string>>{{"-m", "/x", "-c", "abc"},
                                                         {"-m", "/x", "--port", "70000"},
                                                         {"-m", "/x", "-np", "0"},
                                                         {"-m", "/x", "--top-p", "1.5"},
                                                         {"-m", "/x", "-c"},
                                                         {"-m", "/x", "-c", "12k"}}) {
    std::string e = error_of(args);
    EXPECT_NE(e.find("E_FLAG_VALUE"), std::string::npos) << e;
    EXPECT_NE(e.find(args[2]), std::string::npos) << e;
  }
  EXPECT_NE(error_of({"-m", "/x", "-b", "64", "-ub", "128"}).find("E_FLAG_VALUE"), std::string::npos);
  // -b below the default -ub lowers -ub with it (llama-server does the same).
  EXPECT_EQ(parse({"-m", "/x", "-b", "64"}).ubatch_size, 64);
  EXPECT_NE(error_of({}).find("-m/--model"), std::string::npos);
}

TEST(Flags, RefusedFlagsSayWhy) {
  std::string e = error_of({"-m", "/x", "-ctk", "q8_0"});
  EXPECT_NE(e.find("E_FLAG_REFUSED"), std::string::npos) << e;
  EXPECT_NE(e.find("quantized KV"), std::string::npos) << e;
  e = error_of({"-m", "/x", "-ctk", "fp8"});
  EXPECT_NE(e.find("E_FLAG_REFUSED"), std::string::npos) << e;
  EXPECT_TRUE(parse({"-m", "/x"}).warnings.empty());
  e = error_of({"-m", "/x", "--lora", "a.gguf"});
  EXPECT_NE(e.find("E_FLAG_REFUSED"), std::string::npos) << e;
  EXPECT_EQ(parse({"-m", "/x", "--no-jinja"}).chat_template, "chatml");
  EXPECT_NE(error_of({"-m", "/x", "-ctk", "nonsense"}).find("E_FLAG_VALUE"), std::string::npos);
}

// -ctk/-ctv with llama-server's meaning (models/kv_cache_type.h): f16 and bf16 are a BF16 cache, f32 and auto
// (the default) the f32 one; one flag alone sets both, K and V of two types are refused.
TEST(Flags, CacheTypes) {
  const ServerOptions d = parse({"-m", "/x"});
  EXPECT_EQ(d.cache_type_k, "auto");
  EXPECT_EQ(kv_cache_type(d.cache_type_k, d.cache_type_v), kDefaultKvType);
  EXPECT_EQ(kDefaultKvType, ElemType::F32);  // the CPU engine is the f32 reference; the card's BF16 is slower
  const ServerOptions ctv = parse({"-m", "/x", "-ctv", "bf16"});
  EXPECT_EQ(ctv.cache_type_v, "bf16");
  EXPECT_TRUE(ctv.warnings.empty());
  EXPECT_EQ(kv_cache_type(ctv.cache_type_k, ctv.cache_type_v), ElemType::BF16);
  const ServerOptions both = parse({"-m", "/x", "-ctk", "f16", "--cache-type-v", "bf16"});
  EXPECT_EQ(kv_cache_type(both.cache_type_k, both.cache_type_v), ElemType::BF16);
  const ServerOptions f32 = parse({"-m", "/x", "-ctk", "f32", "-ctv", "f32"});
  EXPECT_EQ(kv_cache_type(f32.cache_type_k, f32.cache_type_v), ElemType::F32);
  const std::string e = error_of({"-m", "/x", "-ctk", "bf16", "-ctv", "f32"});
  EXPECT_NE(e.find("E_FLAG_VALUE"), std::string::npos) << e;
  EXPECT_NE(e.find("one type for K and V"), std::string::npos) << e;
}

TEST(Flags, ApiKeyFile) {
  std::string path = ::testing::TempDir() + "/keys.txt";
  {
    std::ofstream f(path);
    f << "# comment\n  key-one  \n\nkey-two\n";
  }
  ServerOptions o = parse({"-m", "/x", "--api-key", "a", "--api-key-file", path});
  EXPECT_EQ(o.api_keys, (std::vector<std::string>{"a", "key-one", "key-two"}));
  EXPECT_NE(error_of({"-m", "/x", "--api-key-file", "/nonexistent/keys"}).find("E_FLAG_VALUE"),
            std::string::npos);
}

TEST(Flags, HelpNeedsNoModelAndListsEveryFlag) {
  ServerOptions o = parse({"--help"});
  EXPECT_TRUE(o.help);
  std::string h = help_text();
  for (const auto& n : all_flag_names()) EXPECT_NE(h.find(n), std::string::npos) << n;
  EXPECT_NE(h.find("BLOOMERY_ARG_CTX_SIZE"), std::string::npos);
}

TEST(Suggest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(closest("--prot", {"--port", "--parallel", "--host"}), "--port");
  EXPECT_EQ(closest("x", {}), "");
}

TEST(Flags, DeviceChoosesTheEngine) {
  EXPECT_EQ(parse({"-m", "/x"}).device, "auto");
  EXPECT_EQ(parse({"-m", "/x", "-dev", "none"}).device, "none");
  EXPECT_EQ(parse({"-m", "/x", "--device", "cuda0"}).device, "cuda0");
  EXPECT_EQ(parse({"-m", "/x", "--device=cuda"}).device, "cuda0");
  EXPECT_EQ(parse({"-m", "/x"}, {{"BLOOMERY_ARG_DEVICE", "none"}}).device, "none");
  const std::string e = error_of({"-m", "/x", "-dev", "vulkan0"});
  EXPECT_NE(e.find("E_FLAG_VALUE"), std::string::npos) << e;
  EXPECT_NE(e.find("auto, none (the CPU engine) or cuda0"), std::string::npos) << e;
}
