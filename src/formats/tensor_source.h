// TensorSource: a model folder's stored tensors (names → file, dtype, shape, bytes), validated before any
// read. It knows files, not models: safetensors single file, sharded with model.safetensors.index.json, and
// the lil-nvfp4-csf container (manifest.json + build-contract.json) or a serving folder pointing at one.
// Spec: shared/spec/formats.md §1, §2, §3, §8.1, §8.2.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file.h"

namespace bloomery {

enum class FolderKind { CsfContainer, CsfServing, Sharded, SingleFile };
std::string_view folder_kind_name(FolderKind k);

struct TensorEntry {
  std::string name;
  DType dtype = DType::U8;
  std::vector<uint64_t> shape;  // [] is a scalar (numel 1)
  uint64_t numel = 1;
  uint32_t file_index = 0;  // into TensorSource::files()
  uint64_t offset = 0;      // absolute byte offset in that file (header length already added)
  uint64_t nbytes = 0;
};

class TensorSource {
 public:
  // Classifies the folder (§1), parses and validates every header of every shard (§2.3, §3, §8.2) before any
  // tensor byte is read. Throws Error on a structural problem; warnings go to `warnings`.
  static TensorSource open(const std::filesystem::path& folder, Warnings& warnings);

  FolderKind kind() const { return kind_; }
  // The folder given by the user.
  const std::filesystem::path& root() const { return root_; }
  // Where config.json, tokenizer files and hf_quant_config.json live (metadata/ for a CSF container, or the
  // serving folder itself).
  const std::filesystem::path& config_dir() const { return config_dir_; }
  const nlohmann::json& config() const { return config_; }
  // hf_quant_config.json if present, else null.
  const nlohmann::json& hf_quant_config() const { return hf_quant_config_; }
  // CSF container manifest.json (null unless kind is CsfContainer or CsfServing).
  const nlohmann::json& csf_manifest() const { return csf_manifest_; }
  // CSF container build-contract.json (null unless kind is CsfContainer or CsfServing).
  const nlohmann::json& csf_contract() const { return csf_contract_; }
  // The CSF container's root: root() for a container, checkpoint_root for a serving folder; empty otherwise.
  const std::filesystem::path& csf_root() const { return csf_root_; }

  // All tensors, sorted by name.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorEntry* find(std::string_view name) const;
  const File& file(uint32_t index) const { return *files_[index]; }
  size_t file_count() const { return files_.size(); }
  // File path relative to root() for messages.
  std::string display_path(uint32_t file_index) const;

  // Reads [offset, offset+len) of a tensor's bytes (offset relative to the tensor start).
  void read(const TensorEntry& t, uint64_t offset, uint64_t len, void* dst) const;
  std::vector<uint8_t> read_all(const TensorEntry& t) const;

 private:
  FolderKind kind_ = FolderKind::SingleFile;
  std::filesystem::path root_, config_dir_;
  nlohmann::json config_, hf_quant_config_, csf_manifest_, csf_contract_;
  std::filesystem::path csf_root_;
  std::vector<std::unique_ptr<File>> files_;
  std::vector<std::string> file_display_;
  std::vector<TensorEntry> tensors_;

  friend struct TensorSourceBuilder;  // tensor_source.cc fills the fields
};

}  // namespace bloomery
