// qwen4_exp PLE (models.md §3.6): the n-gram hashing lives in ple_hash.h (host-side, header-only); the stream
// gate is CpuFamilyOps::ple_gate (ple.cc); the rest of the layer (row gather through the streamed table,
// projections, grouped norms, dilated conv) is composed from generic ops in models/qwen4_exp.cc.
#pragma once

#include "backend/cpu/ple_hash.h"
