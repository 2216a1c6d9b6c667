#include "formats/strict_json.h"

#include <unordered_set>

namespace bloomery {
namespace {

// Thrown out of the parser callback to stop at the first repeated key.
struct DuplicateKeyFound {};

}  // namespace

StrictJsonResult parse_json_strict(std::string_view text) {
  StrictJsonResult result;
  // One key set per open object; `keys[d]` is the latest key seen at object depth d (for the error path).
  std::vector<std::unordered_set<std::string>> open_objects;
  std::vector<std::string> keys;
  using json = nlohmann::json;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        keys.pop_back();
        break;
      case json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        keys.back() = key;
        if (!open_objects.back().insert(std::move(key)).second) {
          result.path = keys;
          throw DuplicateKeyFound{};
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    result.value = json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                               /*ignore_comments=*/false);
    result.ok = true;
  } catch (const DuplicateKeyFound&) {
    result.duplicate = true;
    result.error = "key '" + result.path.back() + "' appears twice";
  } catch (const json::exception& e) {
    result.error = e.what();
  }
  if (!result.ok) result.value = nullptr;
  return result;
}

}  // namespace bloomery
