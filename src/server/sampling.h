// The server's token sampler (runtime's SampleFn): logit bias, repetition / presence / frequency penalties,
// then greedy or temperature with top-k, top-p and min-p, drawn from the request's seeded generator. Reported
// log-probabilities are those of the raw logits (OpenAI's meaning), not of the truncated distribution.
#pragma once

#include <random>
#include <span>

#include "runtime/scheduler.h"

namespace bloomery::server {

SampledToken sample_token(std::span<const float> logits, const SamplingParams& p,
                          std::span<const int32_t> recent, std::mt19937_64& rng);

}  // namespace bloomery::server
