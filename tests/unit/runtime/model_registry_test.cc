// Model registry: text_config unwrapping, checkpoint prefix choice, unknown / unsupported model types.
#include "models/model_registry.h"

#include <gtest/gtest.h>

namespace bloomery {

TEST(ModelRegistry, FlatConfigUsesModelPrefix) {
  nlohmann::json c = {{"model_type", "qwen3_next"}, {"hidden_size", 64}, {"eos_token_id", 2}};
  ModelConfig mc = read_model_config(c, {"model.embed_tokens.weight", "lm_head.weight"});
  EXPECT_EQ(mc.model_type, "qwen3_next");
  EXPECT_EQ(mc.prefix, "model.");
  EXPECT_EQ(mc.text["hidden_size"], 64);
  EXPECT_EQ(cfg_eos_ids(mc.text), std::vector<int32_t>{2});
}

TEST(ModelRegistry, WrapperUnwrapsTextConfigAndPrefix) {
  nlohmann::json c = {{"model_type", "glm5_next"},
                      {"eos_token_id", {0, 4, 6}},
                      {"text_config", {{"model_type", "glm5_next_text"}, {"hidden_size", 64}}},
                      {"vision_config", {{"depth", 1}}}};
  ModelConfig mc = read_model_config(c, {"model.language_model.embed_tokens.weight", "model.visual.x"});
  EXPECT_EQ(mc.model_type, "glm5_next");
  EXPECT_EQ(mc.prefix, "model.language_model.");
  EXPECT_EQ(mc.text["hidden_size"], 64);
  EXPECT_EQ(cfg_eos_ids(mc.text), (std::vector<int32_t>{0, 4, 6}));  // top-level field made visible
}

TEST(ModelRegistry, UnknownTypeIsRefusedByName) {
  nlohmann::json c = {{"model_type", "llama"}};
  ModelConfig mc = read_model_config(c, {});
  try {
    create_model(mc);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_MODEL_TYPE_UNKNOWN");
    EXPECT_NE(std::string(e.what()).find("qwen3_next"), std::string::npos);
  }
}

TEST(ModelRegistry, MissingModelTypeAndBadFieldTypes) {
  try {
    read_model_config(nlohmann::json{{"hidden_size", 3}}, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_MODEL_TYPE_MISSING");
  }
  try {
    cfg_int(nlohmann::json{{"hidden_size", "64"}}, "hidden_size");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_CFG_FIELD_TYPE");
  }
  EXPECT_EQ(cfg_int(nlohmann::json::object(), "x", 7), 7);
}

}  // namespace bloomery
