// Labels and JSON shared by `bloomery inspect` and `bloomery tensor`: a record's format, dtypes, size, the
// plan.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/quant_plan.h"
#include "formats/weight_record.h"

namespace bloomery::tools {

// The format name, or the stored dtype for a parameter / buffer that is not a float ("I64").
std::string record_format_label(const WeightRecord& r);
const char* record_kind_name(RecordKind k);
// Logical element count (product of the dequantised shape).
uint64_t record_params(const WeightRecord& r);
// {"main": "U8", "block_scale": "F8_E4M3", ...} for the parts present.
nlohmann::json record_dtypes_json(const WeightRecord& r);
// Every stored tensor of the record, main first.
std::vector<std::string> record_tensor_names(const WeightRecord& r);
// "U8+F8_E4M3+F32" from record_dtypes_json's object; "[a, b]" from a shape array.
std::string dtypes_label(const nlohmann::json& dtypes);
std::string shape_label(const nlohmann::json& shape);

nlohmann::json plan_json(const QuantPlan& p);
std::string plan_summary(const QuantPlan& p);

}  // namespace bloomery::tools
