// Renders every template in tests/chat_template/templates.txt on every case of tests/chat_template/cases.json
// with bloomery's ChatTemplate and with Python Jinja2 (tests/chat_template/jinja2_oracle.py, run now with
// /usr/bin/python3), and requires byte-identical output, or an error on both sides.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const fs::path kRoot = BLOOMERY_SOURCE_DIR;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Template list: one path per line (relative to the repo root); "a|b" means the first of a, b that exists
// (the real Qwen3 config is installed by npm under tests/tokenizer or tests/chat_template).
// BLOOMERY_TEMPLATE_LIST names another list (absolute paths allowed), for checking a real checkpoint's
// template locally without committing it.
std::vector<fs::path> template_paths() {
  std::vector<fs::path> out;
  const char* list = std::getenv("BLOOMERY_TEMPLATE_LIST");
  std::istringstream lines(slurp(list ? fs::path(list) : kRoot / "tests/chat_template/templates.txt"));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    auto pick = [&line]() {
      fs::path chosen;
      std::istringstream alts(line);
      std::string alt;
      while (std::getline(alts, alt, '|'))
        if (chosen.empty() && fs::exists(kRoot / alt)) chosen = kRoot / alt;
      return chosen;
    };
    fs::path chosen = pick();
    if (chosen.empty() && line.find("node_modules") != std::string::npos) {
      // The real template comes from npm (tests/chat_template/package.json); install it into the ignored
      // node_modules once, as a fresh checkout in CI needs.
      std::string cmd = "npm install --prefix " + (kRoot / "tests/chat_template").string() +
                        " --no-audit --no-fund --silent >/dev/null 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
      chosen = pick();
    }
    if (chosen.empty())
      ADD_FAILURE() << "template not found: " << line;
    else
      out.push_back(chosen);
  }
  return out;
}

std::string run_oracle(const fs::path& cases, const std::vector<fs::path>& templates) {
  std::string cmd =
      "/usr/bin/python3 " + (kRoot / "tests/chat_template/jinja2_oracle.py").string() + " " + cases.string();
  for (const auto& t : templates) cmd += " " + t.string();
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = pclose(p);
  EXPECT_EQ(rc, 0) << "oracle failed: " << cmd;
  return out;
}

bloomery::ChatTemplate load(const fs::path& p) {
  if (p.extension() == ".json") return bloomery::ChatTemplate::from_folder(p.parent_path());
  return bloomery::ChatTemplate::from_source(slurp(p), p.filename().string());
}

TEST(ChatTemplateOracle, MatchesPythonJinja2ByteForByte) {
  fs::path cases_path = kRoot / "tests/chat_template/cases.json";
  ojson corpus = ojson::parse(slurp(cases_path));
  ASSERT_GE(corpus["cases"].size(), 40u);
  std::vector<fs::path> templates = template_paths();
  ASSERT_GE(templates.size(), std::getenv("BLOOMERY_TEMPLATE_LIST") ? 1u : 3u);
  ojson results = ojson::parse(run_oracle(cases_path, templates));
  size_t compared = 0, errors_both = 0;
  for (const auto& tp : templates) {
    bloomery::ChatTemplate tpl = load(tp);
    const ojson& rows = results.at(tp.string());
    ASSERT_EQ(rows.size(), corpus["cases"].size());
    for (size_t k = 0; k < rows.size(); ++k) {
      ojson ctx = corpus.value("defaults", ojson::object());
      for (const auto& [key, v] : corpus["cases"][k]["context"].items()) ctx[key] = v;
      const ojson& want = rows[k];
      std::string label = tp.filename().string() + " / " + want["id"].get<std::string>();
      std::string got, err;
      try {
        got = tpl.render(ctx);
      } catch (const bloomery::Error& e) {
        err = e.what();
      }
      if (want.contains("error")) {
        EXPECT_FALSE(err.empty()) << label << ": Jinja2 raised " << want["error"]
                                  << " but bloomery rendered:\n"
                                  << got;
        ++errors_both;
      } else {
        EXPECT_TRUE(err.empty()) << label << ": bloomery raised " << err;
        EXPECT_EQ(got, want["output"].get<std::string>()) << label;
      }
      ++compared;
    }
  }
  EXPECT_GT(compared - errors_both, compared / 2) << "most cases must render, not just fail on both sides";
}

// Small templates probing one rule each (whitespace control, scoping, filters, number and string
// printing, errors), each rendered by Python Jinja2 and by bloomery.
TEST(ChatTemplateOracle, SnippetsMatchPythonJinja2) {
  fs::path path = kRoot / "tests/chat_template/snippets.json";
  ojson snippets = ojson::parse(slurp(path));
  ASSERT_GE(snippets.size(), 100u);
  std::string cmd = "/usr/bin/python3 " + (kRoot / "tests/chat_template/jinja2_oracle.py").string() +
                    " --snippets " + path.string();
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::array<char, 65536> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ASSERT_EQ(pclose(p), 0) << cmd;
  ojson results = ojson::parse(out);
  ASSERT_EQ(results.size(), snippets.size());
  for (size_t k = 0; k < snippets.size(); ++k) {
    const ojson& sn = snippets[k];
    const ojson& want = results[k];
    std::string label = sn["id"].get<std::string>() + " " + sn["template"].dump();
    std::string got, err;
    try {
      got =
          bloomery::ChatTemplate::from_source(sn["template"].get<std::string>(), sn["id"].get<std::string>())
              .render(sn.value("context", ojson::object()));
    } catch (const bloomery::Error& e) {
      err = e.what();
    }
    if (want.contains("error")) {
      EXPECT_FALSE(err.empty()) << label << ": Jinja2 raised " << want["error"]
                                << " but bloomery rendered: " << got;
    } else {
      EXPECT_TRUE(err.empty()) << label << ": bloomery raised " << err;
      EXPECT_EQ(got, want["output"].get<std::string>()) << label;
    }
  }
}

}  // namespace
