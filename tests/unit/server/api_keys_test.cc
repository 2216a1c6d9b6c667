// API keys: what counts as a key in --api-key and --api-key-file, and that a key file with none refuses.
#include "server/api_keys.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"

using namespace bloomery;
using namespace bloomery::server;

namespace {

std::string write_file(const std::string& text) {
  std::string path = testing::TempDir() + "keys_" + std::to_string(std::rand());
  std::ofstream(path) << text;
  return path;
}

std::string error_id_of(const std::string& text) {
  try {
    read_api_key_file("--api-key-file", write_file(text));
  } catch (const Error& e) {
    return e.id();
  }
  return "";
}

}  // namespace

TEST(ApiKeys, CommaSeparatedKeysAreTrimmed) {
  EXPECT_EQ(split_api_keys("K1, K2 ,K3"), (std::vector<std::string>{"K1", "K2", "K3"}));
  EXPECT_EQ(split_api_keys(" , ,"), std::vector<std::string>{});
  EXPECT_EQ(split_api_keys("\tonly\n"), std::vector<std::string>{"only"});
}

TEST(ApiKeys, FileCommentsWhitespaceAndCommas) {
  auto keys = read_api_key_file("--api-key-file",
                                write_file("# team\n  alpha   # laptop\nbeta, gamma\n\n\tdel#ta\r\n#x\n"));
  EXPECT_EQ(keys, (std::vector<std::string>{"alpha", "beta", "gamma", "del#ta"}));
}

TEST(ApiKeys, FileWithoutKeysRefuses) {
  for (const char* text : {"", "\n\n", "# only a comment\n", "   # indented comment\n", " , \n"})
    EXPECT_EQ(error_id_of(text), "E_FLAG_VALUE") << "key file " << testing::PrintToString(std::string(text));
  try {
    read_api_key_file("--api-key-file", "/nonexistent/keys");
    FAIL() << "a missing key file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.id(), "E_FLAG_VALUE");
    EXPECT_NE(std::string(e.what()).find("--api-key-file"), std::string::npos) << e.what();
  }
}

TEST(ApiKeys, AcceptsExactlyTheKeys) {
  std::vector<std::string> keys = {"alpha", "beta"};
  EXPECT_TRUE(api_key_accepted(keys, "alpha"));
  EXPECT_TRUE(api_key_accepted(keys, "beta"));
  EXPECT_FALSE(api_key_accepted(keys, "alph"));
  EXPECT_FALSE(api_key_accepted(keys, "alphaa"));
  EXPECT_FALSE(api_key_accepted(keys, ""));
  EXPECT_FALSE(api_key_accepted({}, ""));
}
