#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>

#include "formats/strict_json.h"

namespace bloomery {
namespace {

using nlohmann::json;

// First invalid byte position of `s` as UTF-8 (RFC 3629: no overlong forms, no surrogates, max U+10FFFF),
// or npos when valid.
size_t first_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (n - i < len) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

// A JSON value for a message, cut to a readable length.
std::string show(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Reads one tensor entry's JSON into `t`, raising the §2.3 entry-level errors.
void parse_entry(const std::string& name, const json& v, uint64_t data_len, const std::string& display,
                 SafetensorsTensor& t) {
  auto bad = [&](const std::string& field, const std::string& expected, const std::string& found) {
    raise("E_ST_BAD_ENTRY", {display, name, field}, expected, found);
  };
  if (!v.is_object()) bad({}, "an object with dtype, shape and data_offsets", show(v));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(key, "the key to be present", "it missing");

  const json& dt = v["dtype"];
  if (!dt.is_string()) bad("dtype", "a string", show(dt));
  const json& shape = v["shape"];
  if (!shape.is_array()) bad("shape", "an array of non-negative integers", show(shape));
  for (const json& d : shape)
    if (!d.is_number_unsigned()) bad("shape", "non-negative integer dimensions", show(shape));
  const json& offs = v["data_offsets"];
  if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
    bad("data_offsets", "[begin, end] of two non-negative integers", show(offs));

  t.name = name;
  const std::string dtype_str = dt.get<std::string>();
  auto dtype = dtype_from_string(dtype_str);
  if (!dtype)
    raise("E_ST_DTYPE_UNKNOWN", {display, name, "dtype"},
          "a safetensors dtype (BF16, F16, F32, F64, U8, I8, F8_E4M3, F8_E5M2, F8_E8M0, F4, ...)",
          "'" + dtype_str + "'");
  t.dtype = *dtype;
  t.shape.clear();
  for (const json& d : shape) t.shape.push_back(d.get<uint64_t>());
  t.begin = offs[0].get<uint64_t>();
  t.end = offs[1].get<uint64_t>();

  // numel is 0 whenever any dimension is 0, however large the others are.
  const bool empty = std::find(t.shape.begin(), t.shape.end(), 0) != t.shape.end();
  unsigned __int128 numel = 1;
  if (empty) {
    numel = 0;
  } else {
    for (uint64_t d : t.shape) {
      numel *= d;
      if (numel > UINT64_MAX)
        raise("E_ST_SHAPE_OVERFLOW", {display, name, "shape"}, "an element count that fits in 64 bits",
              describe_dtype_shape(t.dtype, t.shape));
    }
  }
  t.numel = static_cast<uint64_t>(numel);
  const unsigned __int128 bits = numel * static_cast<unsigned>(dtype_bits(t.dtype));
  if (bits / 8 > UINT64_MAX)
    raise("E_ST_SHAPE_OVERFLOW", {display, name, "shape"}, "a byte size that fits in 64 bits",
          describe_dtype_shape(t.dtype, t.shape));

  if (t.begin > t.end)
    raise("E_ST_OFFSETS_INVALID", {display, name, "data_offsets"}, "begin <= end",
          range_text(t.begin, t.end));
  if (bits % 8 != 0)
    raise("E_ST_SIZE_MISMATCH", {display, name, "shape"},
          "an element count that fills whole bytes (" + std::string(dtype_name(t.dtype)) + " has " +
              std::to_string(dtype_bits(t.dtype)) + " bits per element)",
          std::to_string(t.numel) + " elements (" + describe_dtype_shape(t.dtype, t.shape) + ")");
  const uint64_t want = static_cast<uint64_t>(bits / 8);
  if (t.end - t.begin != want)
    raise("E_ST_SIZE_MISMATCH", {display, name, "data_offsets"},
          std::to_string(want) + " bytes (" + describe_dtype_shape(t.dtype, t.shape) + ")",
          std::to_string(t.end - t.begin) + " bytes");
  if (t.end > data_len)
    raise("E_ST_OUT_OF_BOUNDS", {display, name, "data_offsets"},
          "end <= " + std::to_string(data_len) + " (the data section length)",
          "end " + std::to_string(t.end) + " " + range_text(t.begin, t.end));
}

// __metadata__ must map strings to strings; anything else is ignored with a warning.
void parse_metadata(const json& v, const std::string& display, Warnings& warnings, SafetensorsHeader& h) {
  bool ok = v.is_object();
  if (ok)
    for (const auto& [k, s] : v.items())
      if (!s.is_string()) ok = false;
  if (!ok) {
    warnings.add("W_ST_METADATA_TYPE", {display, {}, "__metadata__"},
                 "expected a string to string map, found " + show(v) + "; ignored");
    return;
  }
  for (const auto& [k, s] : v.items()) h.metadata[k] = s.get<std::string>();
}

// The ranges of the non-empty tensors, sorted, must tile [0, data_len) exactly.
void check_tiling(const SafetensorsHeader& h, const std::string& display) {
  uint64_t cursor = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : h.tensors) {
    if (t.begin == t.end) continue;  // an empty range covers nothing and overlaps nothing
    if (t.begin < cursor)
      raise("E_ST_OVERLAP", {display, t.name, "data_offsets"},
            "begin >= " + std::to_string(cursor) + " (end of tensor '" + prev->name + "' " +
                range_text(prev->begin, prev->end) + ")",
            range_text(t.begin, t.end));
    if (t.begin > cursor)
      raise(
          "E_ST_HOLE", {display, t.name, "data_offsets"},
          "begin " + std::to_string(cursor) +
              (prev ? " (end of tensor '" + prev->name + "')" : std::string(" (start of the data section)")),
          "begin " + std::to_string(t.begin) + " (" + std::to_string(t.begin - cursor) + " unused bytes)");
    cursor = t.end;
    prev = &t;
  }
  if (cursor != h.data_len)
    raise("E_ST_HOLE", {display, prev ? prev->name : std::string(), "data_offsets"},
          "the data section to end at byte " + std::to_string(cursor) +
              (prev ? " (end of the last tensor)" : std::string(" (no tensor holds bytes)")),
          "a data section of " + std::to_string(h.data_len) + " bytes (" +
              std::to_string(h.data_len - cursor) + " trailing bytes)");
}

}  // namespace

std::string describe_dtype_shape(DType dtype, const std::vector<uint64_t>& shape) {
  std::string s = std::string(dtype_name(dtype)) + " [";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    if (i == 8 && shape.size() > 10) {
      s += "... (" + std::to_string(shape.size()) + " dims)";
      break;
    }
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

uint64_t check_safetensors_prefix(std::string_view first_bytes, uint64_t file_size,
                                  const std::string& display) {
  if (file_size < 8 || first_bytes.size() < 8)
    raise("E_ST_TRUNCATED", {display, {}, "header length"}, "at least 8 bytes (the u64 header length)",
          std::to_string(std::min<uint64_t>(file_size, first_bytes.size())) + " bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(first_bytes[i]);
  if (n > kSafetensorsMaxHeaderBytes)
    raise("E_ST_HEADER_TOO_LARGE", {display, {}, "header length"},
          "at most " + std::to_string(kSafetensorsMaxHeaderBytes) + " bytes", std::to_string(n) + " bytes");
  if (n > file_size - 8)
    raise("E_ST_TRUNCATED", {display, {}, "header length"},
          "a file of at least " + std::to_string(8 + n) + " bytes (8 + header length " + std::to_string(n) +
              ")",
          std::to_string(file_size) + " bytes");
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t file_size,
                                           const std::string& display, Warnings& warnings) {
  SafetensorsHeader h;
  h.header_len = header_json.size();
  if (h.header_len > kSafetensorsMaxHeaderBytes)
    raise("E_ST_HEADER_TOO_LARGE", {display, {}, "header length"},
          "at most " + std::to_string(kSafetensorsMaxHeaderBytes) + " bytes",
          std::to_string(h.header_len) + " bytes");
  if (file_size < 8 || h.header_len > file_size - 8)
    raise("E_ST_TRUNCATED", {display, {}, "header length"},
          "a file of at least " + std::to_string(8 + h.header_len) + " bytes",
          std::to_string(file_size) + " bytes");
  h.data_start = 8 + h.header_len;
  h.data_len = file_size - h.data_start;

  if (size_t bad = first_invalid_utf8(header_json); bad != std::string_view::npos)
    raise("E_ST_HEADER_NOT_UTF8", {display, {}, "header"}, "valid UTF-8",
          "an invalid sequence at header byte " + std::to_string(bad) + " (file offset " +
              std::to_string(8 + bad) + ")");

  StrictJsonResult parsed = parse_json_strict(header_json);
  if (parsed.duplicate) {
    // path[0] is the tensor name; a deeper path is a repeated field inside one entry.
    const std::string& tensor = parsed.path[0];
    const std::string field = parsed.path.size() >= 2 ? parsed.path.back() : std::string();
    raise("E_ST_DUPLICATE_KEY", {display, tensor, field}, "each key once",
          "key '" + parsed.path.back() + "' twice");
  }
  if (!parsed.ok) raise("E_ST_HEADER_NOT_JSON", {display, {}, "header"}, "a JSON object", parsed.error);
  if (!parsed.value.is_object())
    raise("E_ST_HEADER_NOT_JSON", {display, {}, "header"}, "a JSON object",
          "a JSON " + std::string(parsed.value.type_name()));

  h.tensors.reserve(parsed.value.size());
  for (const auto& [key, value] : parsed.value.items()) {
    if (key == "__metadata__") {
      parse_metadata(value, display, warnings, h);
      continue;
    }
    SafetensorsTensor t;
    parse_entry(key, value, h.data_len, display, t);
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : (a.end != b.end ? a.end < b.end : a.name < b.name);
  });
  check_tiling(h, display);

  for (const SafetensorsTensor& t : h.tensors) {
    const int bits = dtype_bits(t.dtype);
    if (t.begin == t.end || bits < 16 || bits % 8 != 0) continue;
    const uint64_t elem = static_cast<uint64_t>(bits / 8);
    const uint64_t at = h.data_start + t.begin;
    if (at % elem != 0)
      warnings.add("W_ST_MISALIGNED", {display, t.name, "data_offsets"},
                   "file offset " + std::to_string(at) + " is not a multiple of the " + std::to_string(elem) +
                       "-byte element size of " + std::string(dtype_name(t.dtype)) +
                       "; read through a staging copy");
  }
  return h;
}

SafetensorsHeader parse_safetensors_bytes(std::string_view bytes, uint64_t file_size,
                                          const std::string& display, Warnings& warnings) {
  const uint64_t n = check_safetensors_prefix(bytes, file_size, display);
  if (bytes.size() - 8 < n)
    raise("E_ST_TRUNCATED", {display, {}, "header"}, std::to_string(n) + " header bytes in the buffer",
          std::to_string(bytes.size() - 8) + " bytes");
  return parse_safetensors_header(bytes.substr(8, n), file_size, display, warnings);
}

SafetensorsHeader read_safetensors_header(const File& file, const std::string& display, Warnings& warnings) {
  char prefix[8] = {};
  const uint64_t size = file.size();
  if (size >= 8) file.read(0, 8, prefix);
  const uint64_t n = check_safetensors_prefix(std::string_view(prefix, size >= 8 ? 8 : size), size, display);
  std::string header(n, '\0');
  if (n) file.read(8, n, header.data());
  return parse_safetensors_header(header, size, display, warnings);
}

}  // namespace bloomery
