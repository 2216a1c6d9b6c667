#include "server/metrics.h"

#include <fmt/format.h>

namespace bloomery::server {

void ServerCounters::request_error(const std::string& type) {
  std::lock_guard lk(mu_);
  errors_[type]++;
}

std::map<std::string, uint64_t> ServerCounters::errors() const {
  std::lock_guard lk(mu_);
  return errors_;
}

namespace {
void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}
}  // namespace

std::string render_metrics(const SchedulerStats& s, const ServerCounters& c) {
  std::string o;
  metric(o, "llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed.",
         static_cast<double>(s.prompt_tokens_total));
  metric(o, "llamacpp:prompt_seconds_total", "counter", "Prompt process time", s.prompt_seconds_total);
  metric(o, "llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed.",
         static_cast<double>(s.tokens_predicted_total));
  metric(o, "llamacpp:tokens_predicted_seconds_total", "counter", "Predict process time",
         s.tokens_predicted_seconds_total);
  metric(o, "llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls",
         static_cast<double>(s.n_decode_total));
  metric(o, "llamacpp:n_tokens_max", "counter", "Largest observed n_tokens.",
         static_cast<double>(s.n_tokens_max));
  metric(o, "llamacpp:n_busy_slots_per_decode", "gauge",
         "Average number of busy slots per llama_decode() call",
         s.n_decode_total ? static_cast<double>(s.n_busy_slots_total) / static_cast<double>(s.n_decode_total)
                          : 0.0);
  metric(
      o, "llamacpp:prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.",
      s.prompt_seconds_total > 0 ? static_cast<double>(s.prompt_tokens_total) / s.prompt_seconds_total : 0.0);
  metric(o, "llamacpp:predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.",
         s.tokens_predicted_seconds_total > 0
             ? static_cast<double>(s.tokens_predicted_total) / s.tokens_predicted_seconds_total
             : 0.0);
  metric(o, "llamacpp:requests_processing", "gauge", "Number of requests processing.",
         static_cast<double>(s.requests_processing));
  metric(o, "llamacpp:requests_deferred", "gauge", "Number of requests deferred.",
         static_cast<double>(s.requests_deferred));
  metric(o, "bloomery:draft_tokens_total", "counter", "MTP drafts verified.",
         static_cast<double>(s.drafts.drafted_total()));
  metric(o, "bloomery:draft_tokens_accepted_total", "counter", "MTP drafts accepted.",
         static_cast<double>(s.drafts.accepted_total()));
  o += "# HELP bloomery:draft_tokens_by_position_total MTP drafts verified and accepted, by draft position.\n"
       "# TYPE bloomery:draft_tokens_by_position_total counter\n";
  for (int i = 0; i < kMaxDrafts; ++i)
    o += fmt::format(
        "bloomery:draft_tokens_by_position_total{{position=\"{}\",outcome=\"drafted\"}} {}\n"
        "bloomery:draft_tokens_by_position_total{{position=\"{}\",outcome=\"accepted\"}} {}\n",
        i, s.drafts.drafted[i], i, s.drafts.accepted[i]);
  metric(o, "bloomery:load_seconds", "gauge", "Seconds the model load took.", c.load_seconds.load());
  metric(o, "bloomery:load_bytes_total", "counter", "Checkpoint bytes read at load.",
         static_cast<double>(c.load_bytes.load()));
  metric(o, "bloomery:requests_finished_total", "counter", "Requests that left a slot.",
         static_cast<double>(s.requests_finished));
  metric(o, "bloomery:requests_cancelled_total", "counter", "Requests cancelled (client gone).",
         static_cast<double>(s.requests_cancelled));
  o += "# HELP bloomery:request_errors_total Requests answered with an error, by type.\n"
       "# TYPE bloomery:request_errors_total counter\n";
  for (auto& [type, n] : c.errors())
    o += fmt::format("bloomery:request_errors_total{{type=\"{}\"}} {}\n", type, n);
  return o;
}

}  // namespace bloomery::server
