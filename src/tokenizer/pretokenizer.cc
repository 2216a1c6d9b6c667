#include "tokenizer/pretokenizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace bloomery {
namespace {

// GPT-2's word pattern, used by ByteLevel when "use_regex" is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool flag(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

}  // namespace

void PreTokenizer::parse(const nlohmann::json& j, const std::string& file, const std::string& path,
                         std::vector<Step>& steps) {
  if (j.is_null()) return;
  auto unsupported = [&](const std::string& field, const std::string& expected, const std::string& found) {
    raise("E_TOK_UNSUPPORTED", Where{file, {}, field}, expected, found);
  };
  std::string type =
      j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  if (!steps.empty() && steps.back().kind == Step::Kind::ByteLevel)
    unsupported(path, "ByteLevel as the last pre-tokenizer", type + " after ByteLevel");
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      unsupported(path + ".pretokenizers", "an array", j.dump());
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      parse(j["pretokenizers"][i], file, path + ".pretokenizers[" + std::to_string(i) + "]", steps);
    return;
  }
  Step step;
  if (type == "Split") {
    step.kind = Step::Kind::Split;
    const auto& pat = j.contains("pattern") ? j["pattern"] : nlohmann::json();
    if (pat.is_object() && pat.contains("Regex") && pat["Regex"].is_string()) {
      step.regex = std::make_shared<Regex>(pat["Regex"].get<std::string>(), file, path + ".pattern.Regex");
    } else if (pat.is_object() && pat.contains("String") && pat["String"].is_string()) {
      step.regex = std::make_shared<Regex>(Regex::escape(pat["String"].get<std::string>()), file,
                                           path + ".pattern.String");
    } else {
      unsupported(path + ".pattern", "{\"Regex\": ...} or {\"String\": ...}", pat.dump());
    }
    std::string b =
        j.contains("behavior") && j["behavior"].is_string() ? j["behavior"].get<std::string>() : "";
    if (b == "Removed")
      step.behavior = Behavior::Removed;
    else if (b == "Isolated")
      step.behavior = Behavior::Isolated;
    else if (b == "MergedWithPrevious")
      step.behavior = Behavior::MergedWithPrevious;
    else if (b == "MergedWithNext")
      step.behavior = Behavior::MergedWithNext;
    else if (b == "Contiguous")
      step.behavior = Behavior::Contiguous;
    else
      unsupported(path + ".behavior", "Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous",
                  b);
    step.invert = flag(j, "invert", false);
  } else if (type == "ByteLevel") {
    step.kind = Step::Kind::ByteLevel;
    step.add_prefix_space = flag(j, "add_prefix_space", true);
    if (flag(j, "use_regex", true))
      step.regex = std::make_shared<Regex>(kGpt2Pattern, file, path + ".use_regex");
  } else {
    unsupported(path, "null, Split, ByteLevel or a Sequence of them", type.empty() ? j.dump() : type);
  }
  steps.push_back(std::move(step));
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, const std::string& file) {
  PreTokenizer p;
  parse(j, file, "pre_tokenizer", p.steps_);
  for (const auto& s : p.steps_)
    if (s.kind == Step::Kind::ByteLevel) p.byte_level_ = true;
  return p;
}

void PreTokenizer::split(std::string_view text, const std::function<void(std::string_view)>& emit) const {
  if (!text.empty()) run(0, text, emit);
}

// Applies steps[step..] to one piece. Pieces are views into the caller's text except after ByteLevel's
// add_prefix_space, which needs a new string.
void PreTokenizer::run(size_t step, std::string_view piece,
                       const std::function<void(std::string_view)>& emit) const {
  if (step == steps_.size()) {
    emit(piece);
    return;
  }
  const Step& s = steps_[step];
  std::string prefixed;
  Behavior behavior = s.behavior;
  bool invert = s.invert;
  if (s.kind == Step::Kind::ByteLevel) {
    // HF prepends the space to every piece that does not already start with one.
    if (s.add_prefix_space && piece.front() != ' ') {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!s.regex) {
      run(step + 1, piece, emit);
      return;
    }
    behavior = Behavior::Isolated;
    invert = false;
  }

  // The parts of HF's Pattern::find_matches (gaps and matches covering the piece), streamed through the
  // delimiter behaviour; `pending` is the part a behaviour may still extend.
  struct Part {
    size_t start, end;
    bool is_match;
  };
  auto out = [&](const Part& p) {
    if (p.end > p.start) run(step + 1, piece.substr(p.start, p.end - p.start), emit);
  };
  Part pending{0, 0, false};
  bool has_pending = false;
  bool previous_match = false;
  auto take = [&](Part p) {
    switch (behavior) {
      case Behavior::Isolated:
        out(p);
        break;
      case Behavior::Removed:
        if (!p.is_match) out(p);
        break;
      case Behavior::Contiguous:
        if (has_pending && p.is_match == previous_match) {
          pending.end = p.end;
        } else {
          if (has_pending) out(pending);
          pending = p;
          has_pending = true;
        }
        break;
      case Behavior::MergedWithPrevious:
        if (has_pending && p.is_match && !previous_match) {
          pending.end = p.end;
        } else {
          if (has_pending) out(pending);
          pending = p;
          has_pending = true;
        }
        break;
      case Behavior::MergedWithNext:
        // A match joins the part after it when that part is not a match (HF folds from the right).
        if (has_pending && pending.is_match && !p.is_match) {
          out({pending.start, p.end, false});
          has_pending = false;
        } else {
          if (has_pending) out(pending);
          if (p.is_match) {
            pending = p;
            has_pending = true;
          } else {
            out(p);
            has_pending = false;
          }
        }
        break;
    }
    previous_match = p.is_match;
  };
  size_t prev = 0;
  s.regex->for_each(piece, [&](const Regex::Match& m) {
    if (m.start != prev) take({prev, m.start, invert});
    take({m.start, m.end, !invert});
    prev = m.end;
  });
  if (prev != piece.size()) take({prev, piece.size(), invert});
  if (has_pending) out(pending);
}

}  // namespace bloomery
