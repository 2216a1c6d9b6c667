#include "formats/tensor_source.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "formats/safetensors.h"
#include "formats/strict_json.h"

namespace bloomery {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kIndexName = "model.safetensors.index.json";
constexpr std::string_view kCsfSchema = "lil-nvfp4-csf-checkpoint/1";
constexpr std::string_view kCsfCodec = "byte-window4-fixed-stream-u24-exceptions/1";
constexpr std::string_view kCsfFixedSuffix = ".nvfp4_csf_fixed";
constexpr std::string_view kCsfExcSuffix = ".nvfp4_csf_exceptions";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A shard name must be a plain file name in the folder: no directories, no "..", ends ".safetensors".
bool is_bare_shard_name(std::string_view s) {
  return s.size() > std::string_view(".safetensors").size() && ends_with(s, ".safetensors") &&
         s.find('/') == std::string_view::npos && s.find('\\') == std::string_view::npos &&
         s.find("..") == std::string_view::npos && s.find('\0') == std::string_view::npos;
}

std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Regular files (symlinks followed, as in a Hugging Face cache snapshot) directly in `dir`, sorted by name.
std::vector<std::string> list_files(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool is_calibration_leftover(std::string_view name) {
  return name == "amax.safetensors" || name == "amax_checkpoint.safetensors";
}

bool is_pickle_weight(std::string_view name) {
  if (name == "training_args.bin") return false;  // trainer state, never weights
  return ends_with(name, ".bin") || ends_with(name, ".pt") || ends_with(name, ".pth");
}

// A JSON file that must parse as an object; `fail` raises the caller's error id with the reason.
template <typename Fail>
json load_json_object(const fs::path& path, Fail fail) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const Error& e) {
    fail("a readable file", e.info().found);
  }
  StrictJsonResult r = parse_json_strict(text);
  if (!r.ok) fail("valid JSON", r.error);
  if (!r.value.is_object()) fail("a JSON object", std::string("a JSON ") + r.value.type_name());
  return std::move(r.value);
}

json load_config(const fs::path& path, const std::string& display) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    raise("E_FOLDER_NO_CONFIG", {display, {}, {}}, "a readable config.json", "no such file");
  return load_json_object(path, [&](const std::string& expected, const std::string& found) {
    raise("E_FOLDER_NO_CONFIG", {display, {}, {}}, expected, found);
  });
}

// The nvfp4_csf quantization_config block of a serving folder's config (top level or text_config), or null.
const json* csf_serving_block(const json& config) {
  for (const json* c : {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (!c || !c->is_object() || !c->contains("quantization_config")) continue;
    const json& qc = (*c)["quantization_config"];
    if (qc.is_object() && qc.contains("quant_method") && qc["quant_method"] == "nvfp4_csf") return &qc;
  }
  return nullptr;
}

// model_type values (top level or text_config) each CSF family belongs to.
const std::vector<std::string>* family_model_types(const std::string& family) {
  static const std::vector<std::string> glm = {"glm5_next", "glm5_next_text"};
  static const std::vector<std::string> qwen = {"qwen4_exp", "qwen4_exp_text"};
  if (family == "glm53_nvfp4") return &glm;
  if (family == "qwen38_flash_next_nvfp4") return &qwen;
  return nullptr;
}

std::string config_model_type(const json& config) {
  if (config.contains("model_type") && config["model_type"].is_string()) return config["model_type"];
  if (config.contains("text_config") && config["text_config"].is_object() &&
      config["text_config"].contains("model_type") && config["text_config"]["model_type"].is_string())
    return config["text_config"]["model_type"];
  return {};
}

}  // namespace

// Fills a TensorSource; a friend so the loading steps can stay out of the public header.
struct TensorSourceBuilder {
  TensorSource& src;
  Warnings& warnings;

  // What a set of shards is checked against.
  struct ShardSet {
    fs::path dir;                                             // where the shard files are
    std::string display_prefix;                               // prepended to shard names in messages
    std::vector<std::string> names;                           // shard file names, sorted, unique
    const std::map<std::string, std::string>* map = nullptr;  // tensor → shard; null when there is none
    std::string map_display;                                  // the file the map came from
    bool csf_pairs = false;  // a mapped `X.weight_scale` may be stored as its two CSF streams
  };

  // Returns the summed header bytes (8 + N per shard).
  uint64_t load_shards(const ShardSet& set) {
    // 1. Every header of every shard, before anything else.
    std::vector<SafetensorsHeader> headers;
    std::vector<uint32_t> file_ids;
    uint64_t header_bytes = 0;
    for (const std::string& name : set.names) {
      const std::string display = set.display_prefix + name;
      auto file = std::make_unique<File>(set.dir / name);
      headers.push_back(read_safetensors_header(*file, display, warnings));
      header_bytes += headers.back().data_start;
      file_ids.push_back(static_cast<uint32_t>(src.files_.size()));
      src.files_.push_back(std::move(file));
      src.file_display_.push_back(display);
    }

    // 2. Each tensor name in exactly one shard.
    std::unordered_map<std::string_view, size_t> where;  // name → shard position in set.names
    for (size_t s = 0; s < headers.size(); ++s) {
      for (const SafetensorsTensor& t : headers[s].tensors) {
        auto [it, fresh] = where.emplace(t.name, s);
        if (!fresh)
          raise(set.map ? "E_IDX_DUPLICATE_TENSOR" : "E_FOLDER_AMBIGUOUS",
                {set.display_prefix + set.names[s], t.name, {}}, "the tensor in one shard only",
                "it also in " + set.display_prefix + set.names[it->second]);
      }
    }

    // 3. The map and the headers agree.
    if (set.map) {
      std::map<std::string_view, size_t> shard_pos;
      for (size_t s = 0; s < set.names.size(); ++s) shard_pos[set.names[s]] = s;
      auto held_by = [&](const std::string& name, size_t s) {
        auto it = where.find(name);
        return it != where.end() && it->second == s;
      };
      for (const auto& [tensor, shard] : *set.map) {
        const size_t s = shard_pos.at(shard);
        if (held_by(tensor, s)) continue;
        if (set.csf_pairs && ends_with(tensor, ".weight_scale") &&
            (held_by(tensor + std::string(kCsfFixedSuffix), s) ||
             held_by(tensor + std::string(kCsfExcSuffix), s)))
          continue;
        auto other = where.find(tensor);
        raise("E_IDX_TENSOR_ABSENT", {set.display_prefix + shard, tensor, {}},
              "the tensor in this shard's header, as " + set.map_display + " says",
              other == where.end() ? std::string("it in no shard")
                                   : "it only in " + set.display_prefix + set.names[other->second]);
      }
      for (size_t s = 0; s < headers.size(); ++s) {
        for (const SafetensorsTensor& t : headers[s].tensors) {
          if (set.map->count(t.name)) continue;
          if (set.csf_pairs) {
            std::string_view n = t.name;
            for (std::string_view suffix : {kCsfFixedSuffix, kCsfExcSuffix})
              if (ends_with(n, suffix) &&
                  set.map->count(std::string(n.substr(0, n.size() - suffix.size())))) {
                n = {};
                break;
              }
            if (n.empty()) continue;
          }
          warnings.add("W_IDX_EXTRA_TENSOR", {set.display_prefix + set.names[s], t.name, {}},
                       set.map_display + " does not list this tensor; loaded from this shard");
        }
      }
    }

    // 4. The entries, sorted by name.
    for (size_t s = 0; s < headers.size(); ++s) {
      for (SafetensorsTensor& t : headers[s].tensors) {
        TensorEntry e;
        e.name = std::move(t.name);
        e.dtype = t.dtype;
        e.shape = std::move(t.shape);
        e.numel = t.numel;
        e.file_index = file_ids[s];
        e.offset = headers[s].data_start + t.begin;
        e.nbytes = t.end - t.begin;
        src.tensors_.push_back(std::move(e));
      }
    }
    std::sort(src.tensors_.begin(), src.tensors_.end(),
              [](const TensorEntry& a, const TensorEntry& b) { return a.name < b.name; });
    return header_bytes;
  }

  void load_hf_quant_config(const std::vector<fs::path>& dirs) {
    for (const fs::path& dir : dirs) {
      const fs::path p = dir / "hf_quant_config.json";
      std::error_code ec;
      if (!fs::exists(p, ec)) continue;
      const std::string display = fs::relative(p, src.root_, ec).string();
      src.hf_quant_config_ = load_json_object(p, [&](const std::string& expected, const std::string& found) {
        raise("E_CFG_NOT_JSON", {ec ? p.string() : display, {}, {}}, expected, found);
      });
      return;
    }
  }

  // §3: a folder with model.safetensors.index.json.
  void open_sharded(const std::vector<std::string>& files) {
    const fs::path index_path = src.root_ / kIndexName;
    const std::string index_display(kIndexName);
    auto not_json = [&](const std::string& expected, const std::string& found) {
      raise("E_IDX_NOT_JSON", {index_display, {}, {}}, expected, found);
    };
    std::string text;
    try {
      text = read_text_file(index_path);
    } catch (const Error& e) {
      not_json("a readable file", e.info().found);
    }
    StrictJsonResult r = parse_json_strict(text);
    if (r.duplicate && r.path.size() == 2 && r.path[0] == "weight_map")
      raise("E_IDX_DUPLICATE_TENSOR", {index_display, r.path[1], "weight_map"}, "each tensor listed once",
            "it listed twice");
    if (!r.ok) not_json("valid JSON without repeated keys", r.error);
    if (!r.value.is_object()) not_json("a JSON object", std::string("a JSON ") + r.value.type_name());
    if (!r.value.contains("weight_map") || !r.value["weight_map"].is_object())
      raise("E_IDX_NOT_JSON", {index_display, {}, "weight_map"},
            "an object mapping tensor names to shard files",
            r.value.contains("weight_map") ? show(r.value["weight_map"]) : std::string("no such key"));

    std::map<std::string, std::string> map;
    for (const auto& [tensor, shard] : r.value["weight_map"].items()) {
      if (!shard.is_string())
        raise("E_IDX_NOT_JSON", {index_display, tensor, "weight_map"}, "a shard file name string",
              show(shard));
      const std::string name = shard.get<std::string>();
      if (!is_bare_shard_name(name))
        raise("E_IDX_SHARD_NAME", {index_display, tensor, "weight_map"},
              "a plain file name in the folder ending .safetensors", "'" + name + "'");
      map.emplace(tensor, name);
    }
    if (map.empty())
      raise("E_FOLDER_NO_WEIGHTS", {index_display, {}, "weight_map"}, "at least one tensor", "an empty map");

    std::set<std::string> shard_names;
    for (const auto& [tensor, shard] : map) {
      if (shard_names.insert(shard).second) {
        std::error_code ec;
        if (!fs::is_regular_file(src.root_ / shard, ec))
          raise("E_IDX_SHARD_MISSING", {shard, tensor, {}}, "the shard file named by " + index_display,
                "no such file in the folder");
      }
    }

    // Unreferenced *.safetensors files are skipped, but a model.safetensors that disagrees with the index
    // leaves two candidate checkpoints: refuse.
    for (const std::string& f : files) {
      if (!ends_with(f, ".safetensors") || shard_names.count(f)) continue;
      if (f == "model.safetensors") {
        File file(src.root_ / f);
        SafetensorsHeader h = read_safetensors_header(file, f, warnings);
        std::set<std::string_view> in_file, in_map;
        for (const auto& t : h.tensors) in_file.insert(t.name);
        for (const auto& [tensor, shard] : map) in_map.insert(tensor);
        if (in_file != in_map)
          raise("E_FOLDER_AMBIGUOUS", {f, {}, {}},
                "the same tensors as " + index_display + " (" + std::to_string(in_map.size()) + " tensors)",
                "a different set of " + std::to_string(in_file.size()) + " tensors");
      }
      warnings.add("W_IDX_UNREFERENCED_SHARD", {f, {}, {}},
                   index_display + " names no tensor in it; skipped");
    }

    ShardSet set;
    set.dir = src.root_;
    set.names.assign(shard_names.begin(), shard_names.end());
    set.map = &map;
    set.map_display = index_display;
    const uint64_t header_bytes = load_shards(set);

    // total_size is informational; only a difference beyond the header bytes is worth a warning.
    const json& meta = r.value.contains("metadata") ? r.value["metadata"] : json();
    if (meta.is_object() && meta.contains("total_size") && meta["total_size"].is_number()) {
      uint64_t sum = 0;
      for (const TensorEntry& t : src.tensors_) sum += t.nbytes;
      const double total = meta["total_size"].get<double>();
      const double diff = total > static_cast<double>(sum) ? total - static_cast<double>(sum)
                                                           : static_cast<double>(sum) - total;
      if (diff > static_cast<double>(header_bytes))
        warnings.add("W_IDX_TOTAL_SIZE", {index_display, {}, "metadata.total_size"},
                     "expected about " + std::to_string(sum) + " bytes (sum of tensor sizes), found " +
                         show(meta["total_size"]));
    }
  }

  // §1 kind 4 (and several index-less files whose names do not overlap).
  void open_single(const std::vector<std::string>& weight_files) {
    ShardSet set;
    set.dir = src.root_;
    set.names = weight_files;
    load_shards(set);
  }

  // §8.1–§8.2: `root` is a container; files are displayed as `display_base` + "tensors/<shard>".
  void open_container(const fs::path& root, const std::string& display_base, const json& family_config,
                      const std::string& config_display) {
    src.csf_root_ = root;
    auto load = [&](const char* name) {
      return load_json_object(root / name, [&](const std::string& expected, const std::string& found) {
        raise("E_CSF_SCHEMA", {display_base + name, {}, {}}, expected, found);
      });
    };
    json manifest = load("manifest.json");
    json contract = load("build-contract.json");
    const std::string mdisp = display_base + "manifest.json", cdisp = display_base + "build-contract.json";

    auto str_field = [](const json& j, const char* key) -> std::string {
      return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
    };
    auto found_text = [](const json& j, const char* key) {
      return j.contains(key) ? show(j[key]) : std::string("no such key");
    };
    if (str_field(manifest, "schema") != kCsfSchema)
      raise("E_CSF_SCHEMA", {mdisp, {}, "schema"}, "'" + std::string(kCsfSchema) + "'",
            found_text(manifest, "schema"));
    if (str_field(manifest, "codec") != kCsfCodec)
      raise("E_CSF_CODEC", {mdisp, {}, "codec"}, "'" + std::string(kCsfCodec) + "'",
            found_text(manifest, "codec"));
    const std::string family = str_field(manifest, "family");
    const std::vector<std::string>* model_types = family_model_types(family);
    if (!model_types)
      raise("E_CSF_FAMILY", {mdisp, {}, "family"}, "'glm53_nvfp4' or 'qwen38_flash_next_nvfp4'",
            found_text(manifest, "family"));
    for (const char* key : {"schema", "codec", "family"})
      if (!contract.contains(key) || contract[key] != manifest[key])
        raise("E_CSF_MANIFEST_MISMATCH", {cdisp, {}, key}, show(manifest[key]) + " as in manifest.json",
              found_text(contract, key));
    const std::string model_type = config_model_type(family_config);
    if (std::find(model_types->begin(), model_types->end(), model_type) == model_types->end())
      raise("E_CSF_FAMILY", {config_display, {}, "model_type"},
            "model_type '" + model_types->front() + "' for family '" + family + "'",
            model_type.empty() ? std::string("no model_type") : "'" + model_type + "'");

    // Manifest shards and the contract's source_names must name the same files.
    if (!manifest.contains("shards") || !manifest["shards"].is_array() || manifest["shards"].empty())
      raise("E_CSF_SCHEMA", {mdisp, {}, "shards"}, "a non-empty array of {\"file\": ...}",
            found_text(manifest, "shards"));
    std::set<std::string> manifest_files;
    for (size_t i = 0; i < manifest["shards"].size(); ++i) {
      const json& s = manifest["shards"][i];
      const std::string field = "shards[" + std::to_string(i) + "].file";
      if (!s.is_object() || !s.contains("file") || !s["file"].is_string())
        raise("E_CSF_SHARD_NAME", {mdisp, {}, field}, "a file name string", show(s));
      const std::string name = s["file"];
      if (!is_bare_shard_name(name))
        raise("E_CSF_SHARD_NAME", {mdisp, {}, field}, "a plain file name ending .safetensors",
              "'" + name + "'");
      if (!manifest_files.insert(name).second)
        raise("E_CSF_SHARD_SET", {mdisp, {}, field}, "each shard listed once", "'" + name + "' twice");
    }
    if (!contract.contains("source_names") || !contract["source_names"].is_object())
      raise("E_CSF_SCHEMA", {cdisp, {}, "source_names"}, "an object mapping tensor names to shard files",
            found_text(contract, "source_names"));
    std::map<std::string, std::string> map;
    std::set<std::string> contract_files;
    for (const auto& [tensor, shard] : contract["source_names"].items()) {
      if (!shard.is_string() || !is_bare_shard_name(shard.get<std::string>()))
        raise("E_CSF_SHARD_NAME", {cdisp, tensor, "source_names"}, "a plain file name ending .safetensors",
              show(shard));
      map.emplace(tensor, shard.get<std::string>());
      contract_files.insert(shard.get<std::string>());
    }
    for (const std::string& f : contract_files)
      if (!manifest_files.count(f))
        raise("E_CSF_SHARD_SET", {cdisp, {}, "source_names"}, "only shards listed in manifest.json",
              "'" + f + "', which manifest.json does not list");
    for (const std::string& f : manifest_files)
      if (!contract_files.count(f))
        raise("E_CSF_SHARD_SET", {mdisp, {}, "shards"}, "only shards that source_names maps tensors to",
              "'" + f + "', which build-contract.json's source_names never names");
    for (const std::string& f : manifest_files) {
      std::error_code ec;
      if (!fs::is_regular_file(root / "tensors" / f, ec))
        raise("E_CSF_SHARD_MISSING", {display_base + "tensors/" + f, {}, {}},
              "the shard listed in manifest.json", "no such file");
    }

    ShardSet set;
    set.dir = root / "tensors";
    set.display_prefix = display_base + "tensors/";
    set.names.assign(manifest_files.begin(), manifest_files.end());
    set.map = &map;
    set.map_display = cdisp;
    set.csf_pairs = true;
    load_shards(set);
    src.csf_manifest_ = std::move(manifest);
    src.csf_contract_ = std::move(contract);
  }

  // §8.1: a serving folder whose config points at a container.
  void open_serving(const json& qc) {
    const std::string where = "config.json";
    const bool nested =
        !(src.config_.contains("quantization_config") && &src.config_["quantization_config"] == &qc);
    const std::string prefix = nested ? "text_config.quantization_config." : "quantization_config.";
    if (!qc.contains("format_version") || !qc["format_version"].is_number_integer() ||
        qc["format_version"] != 1)
      raise("E_CSF_FORMAT_VERSION", {where, {}, prefix + "format_version"}, "1",
            qc.contains("format_version") ? show(qc["format_version"]) : std::string("no such key"));
    if (!qc.contains("checkpoint_root") || !qc["checkpoint_root"].is_string())
      raise("E_CSF_ROOT", {where, {}, prefix + "checkpoint_root"}, "an absolute path to a CSF container",
            qc.contains("checkpoint_root") ? show(qc["checkpoint_root"]) : std::string("no such key"));
    const fs::path root = qc["checkpoint_root"].get<std::string>();
    if (!root.is_absolute())
      raise("E_CSF_ROOT", {where, {}, prefix + "checkpoint_root"}, "an absolute path",
            "'" + root.string() + "'");
    std::error_code ec;
    if (!fs::is_regular_file(root / "manifest.json", ec) ||
        !fs::is_regular_file(root / "build-contract.json", ec))
      raise("E_CSF_ROOT", {where, {}, prefix + "checkpoint_root"},
            "a CSF container folder (manifest.json and build-contract.json)", "'" + root.string() + "'");
    std::string display_base = root.string();
    while (display_base.size() > 1 && display_base.back() == '/') display_base.pop_back();
    open_container(root, display_base + "/", src.config_, where);
  }

  void open(const fs::path& folder) {
    src.root_ = folder;
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) {
      if (fs::is_regular_file(folder, ec) && ends_with(folder.string(), ".gguf"))
        raise("E_FOLDER_NO_WEIGHTS", {folder.string(), {}, {}}, "a safetensors model folder",
              "a GGUF file (GGUF support is a later item)");
      raise("E_FOLDER_NO_WEIGHTS", {folder.string(), {}, {}}, "a model folder",
            fs::exists(folder, ec) ? "not a directory" : "no such directory");
    }

    // 1. CSF container.
    if (fs::exists(folder / "manifest.json", ec) && fs::exists(folder / "build-contract.json", ec)) {
      src.kind_ = FolderKind::CsfContainer;
      src.config_dir_ = folder / "metadata";
      src.config_ = load_config(src.config_dir_ / "config.json", "metadata/config.json");
      open_container(folder, "", src.config_, "metadata/config.json");
      load_hf_quant_config({src.config_dir_});
      return;
    }
    src.config_dir_ = folder;
    const bool has_config = fs::exists(folder / "config.json", ec);
    if (has_config) src.config_ = load_config(folder / "config.json", "config.json");

    // 2. CSF serving folder.
    if (has_config) {
      if (const json* qc = csf_serving_block(src.config_)) {
        src.kind_ = FolderKind::CsfServing;
        open_serving(*qc);
        load_hf_quant_config({src.config_dir_, src.csf_root_ / "metadata"});
        return;
      }
    }

    const std::vector<std::string> files = list_files(folder);
    std::vector<std::string> weights;
    bool pickle = false, gguf = false;
    for (const std::string& f : files) {
      if (ends_with(f, ".safetensors") && !is_calibration_leftover(f)) weights.push_back(f);
      pickle |= is_pickle_weight(f);
      gguf |= ends_with(f, ".gguf");
    }
    const bool has_index = std::find(files.begin(), files.end(), kIndexName) != files.end();
    if (!has_index && weights.empty()) {
      if (pickle)
        raise("E_FOLDER_PICKLE_ONLY", {folder.string(), {}, {}}, "safetensors weights",
              "only pickle weights (*.bin / *.pt / *.pth), which bloomery never unpickles");
      raise("E_FOLDER_NO_WEIGHTS", {folder.string(), {}, {}},
            "model.safetensors.index.json or *.safetensors files",
            gguf ? "only GGUF files (GGUF support is a later item)" : "none");
    }
    if (!has_config)
      raise("E_FOLDER_NO_CONFIG", {"config.json", {}, {}}, "a readable config.json", "no such file");

    for (const std::string& f : files) {
      if (has_index) break;  // the index pass reports every unreferenced file itself
      if (is_calibration_leftover(f) || is_pickle_weight(f) || f == "training_args.bin")
        warnings.add("W_FOLDER_IGNORED", {f, {}, {}}, "not model weights; ignored");
    }

    // 3. / 4. Sharded or single file.
    if (has_index) {
      src.kind_ = FolderKind::Sharded;
      open_sharded(files);
    } else {
      src.kind_ = weights.size() == 1 ? FolderKind::SingleFile : FolderKind::Sharded;
      open_single(weights);
    }
    load_hf_quant_config({src.config_dir_});
  }
};

std::string_view folder_kind_name(FolderKind k) {
  switch (k) {
    case FolderKind::CsfContainer:
      return "csf-container";
    case FolderKind::CsfServing:
      return "csf-serving";
    case FolderKind::Sharded:
      return "sharded-safetensors";
    case FolderKind::SingleFile:
      return "single-safetensors";
  }
  return "unknown";
}

TensorSource TensorSource::open(const fs::path& folder, Warnings& warnings) {
  TensorSource src;
  TensorSourceBuilder{src, warnings}.open(folder);
  return src;
}

const TensorEntry* TensorSource::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorEntry& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::string TensorSource::display_path(uint32_t file_index) const {
  return file_display_.at(file_index);
}

void TensorSource::read(const TensorEntry& t, uint64_t offset, uint64_t len, void* dst) const {
  if (offset > t.nbytes || len > t.nbytes - offset)
    raise("E_ST_OUT_OF_BOUNDS", {display_path(t.file_index), t.name, {}},
          "a range inside the tensor's " + std::to_string(t.nbytes) + " bytes",
          "[" + std::to_string(offset) + ", " + std::to_string(offset + len) + ")");
  if (len) files_.at(t.file_index)->read(t.offset + offset, len, dst);
}

std::vector<uint8_t> TensorSource::read_all(const TensorEntry& t) const {
  std::vector<uint8_t> out(t.nbytes);
  read(t, 0, t.nbytes, out.data());
  return out;
}

}  // namespace bloomery
