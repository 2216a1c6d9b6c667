#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/metrics.h"
#include "server/sse.h"

using namespace bloomery;
using namespace bloomery::server;
using nlohmann::json;

TEST(Sse, DataEventIsOneLineAndBlankLineTerminated) {
  std::string e = sse_data(json{{"text", "a\nb"}, {"n", 1}});
  EXPECT_EQ(e, "data: {\"n\":1,\"text\":\"a\\nb\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_error_line(json{{"x", 1}}), "error: {\"x\":1}\n\n");
  EXPECT_EQ(sse_comment("ping\nagain"), ": ping\n: again\n\n");
}

TEST(Sse, InvalidUtf8IsReplacedNotThrown) {
  std::string bad = "ok\xE3\x81";
  std::string e;
  EXPECT_NO_THROW(e = sse_data(json{{"t", bad}}));
  EXPECT_NE(e.find("\xEF\xBF\xBD"), std::string::npos) << e;
}

TEST(ApiErrors, OpenAiShapeAndStatus) {
  try {
    bad_field("temperature", "a number", json("hot"));
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    json b = error_body(e);
    EXPECT_EQ(b["error"]["code"], 400);
    EXPECT_EQ(b["error"]["type"], "invalid_request_error");
    EXPECT_EQ(b["error"]["message"], "'temperature': expected a number, found \"hot\"");
  }
  json u = error_body(unauthorized());
  EXPECT_EQ(
      u,
      (json{{"error", {{"code", 401}, {"message", "Invalid API Key"}, {"type", "authentication_error"}}}}));
  json c = error_body(exceed_context(5000, 4096));
  EXPECT_EQ(c["error"]["code"], 400);
  EXPECT_EQ(c["error"]["type"], "exceed_context_size_error");
  EXPECT_EQ(c["error"]["n_prompt_tokens"], 5000);
  EXPECT_EQ(c["error"]["n_ctx"], 4096);
  EXPECT_EQ(error_body(loading())["error"]["message"], "Loading model");
  EXPECT_EQ(error_body(loading())["error"]["code"], 503);
  EXPECT_EQ(error_body(not_found("x"))["error"]["type"], "not_found_error");
}

TEST(Metrics, LlamaServerNamesAndValues) {
  SchedulerStats s;
  s.prompt_tokens_total = 12;
  s.tokens_predicted_total = 7;
  s.n_decode_total = 4;
  s.n_busy_slots_total = 6;
  s.requests_deferred = 2;
  ServerCounters c;
  c.request_error("invalid_request_error");
  std::string m = render_metrics(s, c);
  EXPECT_NE(m.find("# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 12\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("llamacpp:tokens_predicted_total 7\n"), std::string::npos);
  EXPECT_NE(m.find("llamacpp:n_busy_slots_per_decode 1.5\n"), std::string::npos);
  EXPECT_NE(m.find("llamacpp:requests_deferred 2\n"), std::string::npos);
  EXPECT_NE(m.find("bloomery:request_errors_total{type=\"invalid_request_error\"} 1\n"), std::string::npos);
}
