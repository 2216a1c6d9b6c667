// Route table, API keys, error bodies and the non-completion endpoints. The three completion routes share
// handle_completion (completion_routes.cc).
#include "server/http_server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include <httplib.h>

#include <fmt/format.h>

#include "core/error.h"
#include "server/api_error.h"
#include "server/api_keys.h"
#include "server/connection_layer.h"
#include "server/request_parse.h"
#include "server/sse.h"

namespace bloomery::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

void send_json(httplib::Response& res, int status, const ojson& j) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json; charset=utf-8");
}

// Routes that need no API key: health, and the model list (llama-server keeps /v1/models public too).
bool public_path(const std::string& p) {
  return p == "/health" || p == "/v1/health" || p == "/v1/models" || p == "/models";
}

// Why host:port cannot be bound, in the system's words: the bind is tried again on a socket of our own
// (cpp-httplib reports only that it failed).
std::string bind_failure_reason(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) return std::string("cannot resolve the address: ") + ::gai_strerror(gai);
  std::string reason = "unknown (a second try bound it)";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int sock = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (sock < 0) {
      reason = std::strerror(errno);
      continue;
    }
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    int r = ::bind(sock, a->ai_addr, a->ai_addrlen);
    int err = errno;
    ::close(sock);
    if (r != 0) {
      reason = std::strerror(err);
      break;
    }
  }
  ::freeaddrinfo(res);
  return reason;
}

// The Content-Length header's value (-1 when absent, UINT64_MAX-like when unreadable).
int64_t content_length(const httplib::Request& req) {
  if (!req.has_header("Content-Length")) return -1;
  std::string v = req.get_header_value("Content-Length");
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 0) return INT64_MAX;
  return n;
}

ConnectionLimits limits_from(const ServerOptions& o) {
  ConnectionLimits l;
  l.max_connections = o.http_max_connections;
  l.header_timeout_s = o.http_header_timeout;
  l.body_timeout_s = o.http_body_timeout;
  l.max_body_bytes = static_cast<uint64_t>(o.http_max_body_mib) << 20;
  l.write_timeout_s = o.timeout;
  // An idle keep-alive connection is closed after 5 s (cpp-httplib's and llama-server's default). At 1 s a
  // client that reuses a pooled connection (undici keeps one for timeout minus its own 1–2 s margin) could
  // send its next request into a socket the server was closing: "other side closed" under load (the soak
  // test saw it on CI's 2 cores). An idle connection costs a sleeping thread, not a worker.
  l.keep_alive_s = 5;
  return l;
}

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, int n_slots, int64_t n_ctx_slot)
    : opts_(options),
      n_slots_(n_slots),
      n_ctx_slot_(n_ctx_slot),
      http_(std::make_unique<GuardedServer>(limits_from(options))) {
  created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  // A chunked body (no Content-Length to check first) is bounded by cpp-httplib's payload limit as well as by
  // the connection layer's read budget.
  http_->set_payload_max_length(static_cast<size_t>(opts_.http_max_body_mib) << 20);
  routes();
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  if (!http_->bind_to_port(opts_.host, opts_.port))
    raise("E_LISTEN", Where{"", "", "--host/--port"},
          fmt::format("to listen on {}:{}", opts_.host, opts_.port),
          bind_failure_reason(opts_.host, opts_.port),
          "another server (a second bloomery-serve?) may hold the port; pick another with --port");
  bound_port_ = opts_.port;
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

int HttpServer::requests_in_flight() {
  EngineHost* h = host_.load();
  if (!h) return 0;
  SchedulerStats st = h->scheduler().stats();
  return st.requests_processing + st.requests_deferred;
}

void HttpServer::stop() {
  if (thread_.joinable()) {
    http_->stop();
    thread_.join();
  }
}

void HttpServer::set_loading_progress(const std::string& message) {
  std::lock_guard lk(state_mu_);
  loading_message_ = message;
}

void HttpServer::set_ready(EngineHost* host) {
  host_.store(host);
}

void HttpServer::set_failed(const std::string& reason) {
  std::lock_guard lk(state_mu_);
  failure_ = reason;
}

EngineHost& HttpServer::engine() {
  EngineHost* h = host_.load();
  if (h) {
    // A tensor-parallel rank that died or hung ends the engine for good (serving.md R-5).
    const std::string failed = h->failure();
    if (failed.empty()) return *h;
    throw loading("Engine failed: " + failed);
  }
  std::lock_guard lk(state_mu_);
  if (!failure_.empty()) throw loading("Engine failed: " + failure_);
  throw loading("Loading model");
}

void HttpServer::routes() {
  auto& s = *http_;
  // Every handler's errors become OpenAI error bodies; the server keeps serving.
  auto wrap = [this](std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        counters_.request_error(e.type);
        send_json(res, e.status, error_body(e));
      } catch (const Error& e) {
        ApiError a(400, "invalid_request_error", e.what());
        counters_.request_error(a.type);
        send_json(res, 400, error_body(a));
      } catch (const nlohmann::json::exception&) {
        // A field read with the wrong type that request_parse did not check first: still the client's
        // mistake, and the library's text names no field, so it is not passed on.
        ApiError a(400, "invalid_request_error", "a request field has the wrong type");
        counters_.request_error(a.type);
        send_json(res, 400, error_body(a));
      } catch (const std::exception& e) {
        ApiError a = server_error(e.what());
        counters_.request_error(a.type);
        send_json(res, 500, error_body(a));
      }
    };
  };

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Access-Control-Allow-Origin", "*");
    if (req.method == "OPTIONS") {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "*");
      res.status = 200;
      GuardedServer::close_after_response();  // a body (if any) stays unread
      return httplib::Server::HandlerResponse::Handled;
    }
    // The head is in; the body, if any, is read next, against the body deadline.
    GuardedServer::head_received();
    auto refuse = [&](const ApiError& e) {
      counters_.request_error(e.type);
      send_json(res, e.status, error_body(e));
      GuardedServer::close_after_response();  // the body (if any) stays unread: the connection cannot go on
      return httplib::Server::HandlerResponse::Handled;
    };
    const int64_t limit = opts_.http_max_body_mib << 20;
    if (const int64_t n = content_length(req); n > limit)
      return refuse(
          ApiError(413, "invalid_request_error",
                   fmt::format("the request body is {} bytes; the limit is {} bytes (--http-max-body {})",
                               n == INT64_MAX ? std::string("unreadable") : std::to_string(n), limit,
                               opts_.http_max_body_mib)));
    if (draining_.load() && !public_path(req.path))
      return refuse(ApiError(503, "unavailable_error", "the server is shutting down"));
    if (opts_.api_keys.empty() || public_path(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    std::string key;
    std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    if (key.empty()) key = req.get_header_value("x-api-key");
    if (api_key_accepted(opts_.api_keys, key)) return httplib::Server::HandlerResponse::Unhandled;
    return refuse(unauthorized());
  });

  // Unknown routes (and wrong methods) get an OpenAI-format 404 instead of httplib's empty page; the
  // library's own refusals (a chunked body past the limit, a malformed request) get an OpenAI body too.
  s.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e =
        res.status == 404   ? not_found("File Not Found")
        : res.status == 413 ? ApiError(413, "invalid_request_error",
                                       fmt::format("the request body is too large: JSON bodies may "
                                                   "take {} bytes (--http-max-body {}), form-encoded "
                                                   "ones 8 KiB (send Content-Type: application/json)",
                                                   opts_.http_max_body_mib << 20, opts_.http_max_body_mib))
        : res.status >= 500 ? ApiError(res.status, "server_error", "the request could not be served")
                            : ApiError(res.status, "invalid_request_error", "malformed HTTP request");
    counters_.request_error(e.type);
    send_json(res, res.status, error_body(e));
  });

  auto health = wrap([this](const httplib::Request&, httplib::Response& res) {
    if (draining_.load()) throw loading("Shutting down");
    engine();
    send_json(res, 200, {{"status", "ok"}});
  });
  s.Get("/health", health);
  s.Get("/v1/health", health);

  auto models = wrap([this](const httplib::Request&, httplib::Response& res) {
    EngineHost* h = host_.load();
    ojson meta = nullptr;
    if (h) {
      const auto& sm = h->summary();
      meta = {{"vocab_type", "bpe"},      {"n_vocab", sm.vocab_size}, {"n_ctx_train", sm.max_positions},
              {"n_embd", sm.hidden_size}, {"n_params", sm.n_params},  {"size", sm.stored_bytes}};
    }
    std::string id = opts_.alias.empty() ? opts_.model : opts_.alias;
    ojson m = {{"id", id},
               {"object", "model"},
               {"created", created_},
               {"owned_by", "llamacpp"},
               {"architecture", {{"input_modalities", {"text"}}, {"output_modalities", {"text"}}}},
               {"meta", meta}};
    send_json(res, 200, {{"object", "list"}, {"data", ojson::array({m})}});
  });
  s.Get("/v1/models", models);
  s.Get("/models", models);

  s.Get("/props", wrap([this](const httplib::Request&, httplib::Response& res) {
          EngineHost& h = engine();
          const auto& sm = h.summary();
          ojson formats = ojson::object();
          for (const auto& [role, f] : sm.formats_by_role) formats[role] = f;
          ojson settings = {{"n_ctx", n_ctx_slot_},
                            {"params",
                             {{"temperature", opts_.temperature},
                              {"top_k", opts_.top_k},
                              {"top_p", opts_.top_p},
                              {"min_p", opts_.min_p},
                              {"presence_penalty", opts_.presence_penalty},
                              {"frequency_penalty", opts_.frequency_penalty},
                              {"repeat_penalty", opts_.repeat_penalty},
                              {"repeat_last_n", opts_.repeat_last_n},
                              {"seed", opts_.seed},
                              {"n_predict", opts_.n_predict}}}};
          send_json(res, 200,
                    {{"default_generation_settings", settings},
                     {"total_slots", n_slots_},
                     {"model_path", opts_.model},
                     {"chat_template", h.chat_template().source()},
                     {"chat_template_caps", ojson::object()},
                     {"modalities", {{"vision", false}}},
                     {"build_info", "bloomery 0.1.0"},
                     {"is_sleeping", false},
                     {"generation_config", h.generation_config()},
                     {"bloomery",
                      {{"family", sm.family},
                       {"formats", formats},
                       {"tp", h.tp_size()},
                       {"engine", "cpu"},
                       {"speculative", {{"type", "none"}, {"n_max", 0}}}}}});
        }));
  s.Post("/props", wrap([this](const httplib::Request&, httplib::Response& res) {
           if (opts_.props) {
             res.set_content("{}", "application/json; charset=utf-8");
             return;
           }
           throw not_supported(
               "This server does not support changing global properties. Start it with `--props`");
         }));

  s.Get("/slots", wrap([this](const httplib::Request& req, httplib::Response& res) {
          if (!opts_.slots) throw not_supported("This server does not support slots endpoint.");
          EngineHost& h = engine();
          auto slots = h.scheduler().slots();
          if (req.get_param_value("fail_on_no_slot") == "1") {
            bool idle = false;
            for (const auto& sl : slots) idle |= !sl.is_processing;
            if (!idle) throw ApiError(503, "unavailable_error", "no slot available");
          }
          ojson arr = ojson::array();
          for (const auto& sl : slots) {
            arr.push_back({{"id", sl.id},
                           {"id_task", sl.is_processing ? static_cast<int64_t>(sl.id_task) : -1},
                           {"n_ctx", sl.n_ctx},
                           {"speculative", opts_.spec_type != "none"},
                           {"is_processing", sl.is_processing},
                           {"params",
                            {{"temperature", sl.params.temperature},
                             {"top_k", sl.params.top_k},
                             {"top_p", sl.params.top_p},
                             {"min_p", sl.params.min_p},
                             {"n_probs", sl.params.n_probs},
                             {"samplers", {"penalties", "top_k", "top_p", "min_p", "temperature"}},
                             {"speculative.n_max", opts_.spec_type != "none" ? opts_.spec_n_max : 0},
                             {"speculative.n_min", opts_.spec_type != "none" ? opts_.spec_n_min : 0},
                             {"speculative.p_min", opts_.spec_type != "none" ? opts_.spec_p_min : 0.0}}},
                           {"draft_n", sl.drafts.drafted_total()},
                           {"draft_n_accepted", sl.drafts.accepted_total()},
                           {"draft_n_by_position",
                            std::vector<uint64_t>(sl.drafts.drafted, sl.drafts.drafted + kMaxDrafts)},
                           {"draft_n_accepted_by_position",
                            std::vector<uint64_t>(sl.drafts.accepted, sl.drafts.accepted + kMaxDrafts)},
                           {"next_token",
                            {{"has_next_token", sl.is_processing},
                             {"has_new_line", false},
                             {"n_remain", sl.n_remain},
                             {"n_decoded", sl.n_decoded}}}});
          }
          send_json(res, 200, arr);
        }));

  s.Get("/metrics", wrap([this](const httplib::Request&, httplib::Response& res) {
          if (!opts_.metrics) throw not_supported("This server does not support metrics endpoint.");
          EngineHost& h = engine();
          res.status = 200;
          res.set_content(render_metrics(h.scheduler().stats(), counters_), "text/plain; version=0.0.4");
        }));

  s.Post("/tokenize", wrap([this](const httplib::Request& req, httplib::Response& res) {
           EngineHost& h = engine();
           ojson b = parse_body(req.body);
           if (!b.contains("content") || !b["content"].is_string())
             bad_field("content", "a string", b.contains("content") ? b["content"] : ojson());
           bool add_special = field_bool(b, "add_special", false);
           bool parse_special = field_bool(b, "parse_special", true);
           bool with_pieces = field_bool(b, "with_pieces", false);
           std::vector<int32_t> ids =
               h.tokenizer().encode(b["content"].get<std::string>(), parse_special, false);
           if (add_special && h.tokenizer().add_bos() && h.tokenizer().bos_id())
             ids.insert(ids.begin(), *h.tokenizer().bos_id());
           ojson toks = ojson::array();
           for (int32_t id : ids) {
             if (!with_pieces) {
               toks.push_back(id);
               continue;
             }
             std::string piece = h.tokenizer().decode({&id, 1});
             ojson p;
             if (valid_utf8(piece) == piece) {
               p = piece;
             } else {
               p = ojson::array();
               for (unsigned char c : piece) p.push_back(static_cast<int>(c));
             }
             toks.push_back({{"id", id}, {"piece", p}});
           }
           send_json(res, 200, {{"tokens", toks}});
         }));

  s.Post("/detokenize", wrap([this](const httplib::Request& req, httplib::Response& res) {
           EngineHost& h = engine();
           ojson b = parse_body(req.body);
           if (!b.contains("tokens") || !b["tokens"].is_array())
             bad_field("tokens", "an array of token ids", b.contains("tokens") ? b["tokens"] : ojson());
           std::vector<int32_t> ids;
           for (const auto& t : b["tokens"]) {
             if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
                 t.get<int64_t>() >= h.tokenizer().vocab_size())
               bad_field("tokens", "token ids in [0, " + std::to_string(h.tokenizer().vocab_size()) + ")", t);
             ids.push_back(t.get<int32_t>());
           }
           send_json(res, 200, {{"content", h.tokenizer().decode_text(ids)}});
         }));

  s.Post("/apply-template", wrap([this](const httplib::Request& req, httplib::Response& res) {
           EngineHost& h = engine();
           ojson b = parse_body(req.body);
           send_json(res, 200, {{"prompt", render_chat(b, h.chat_template(), h.tokenizer())}});
         }));

  auto chat =
      wrap([this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, 0); });
  auto cmpl =
      wrap([this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, 1); });
  auto llama =
      wrap([this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res, 2); });
  s.Post("/v1/chat/completions", chat);
  s.Post("/chat/completions", chat);
  s.Post("/v1/completions", cmpl);
  s.Post("/completion", llama);
  s.Post("/completions", llama);

  auto unsupported = wrap([](const httplib::Request& req, httplib::Response&) {
    throw not_supported("This server does not support " + req.path);
  });
  for (const char* p : {"/infill", "/embedding", "/embeddings", "/v1/embeddings", "/reranking", "/rerank",
                        "/v1/rerank", "/v1/reranking"})
    s.Post(p, unsupported);
  s.Get("/lora-adapters",
        [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, ojson::array()); });
  s.Post("/lora-adapters", unsupported);
  s.Get("/", [this](const httplib::Request&, httplib::Response& res) {
    bool ready = host_.load() != nullptr;
    res.set_content(std::string("<!doctype html><title>bloomery-serve</title><p>bloomery-serve: ") +
                        (ready ? "ready" : "loading") + ". OpenAI API at /v1; health at /health.</p>",
                    "text/html; charset=utf-8");
  });
}

}  // namespace bloomery::server
