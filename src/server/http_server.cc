// Route table, API keys, error bodies and the non-completion endpoints. The three completion routes share
// handle_completion (completion_routes.cc).
#include "server/http_server.h"

#include <chrono>

#include <httplib.h>

#include "core/error.h"
#include "server/api_error.h"
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

bool public_path(const std::string& p) {
  return p == "/health" || p == "/v1/health";
}

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, int n_slots, int64_t n_ctx_slot)
    : opts_(options), n_slots_(n_slots), n_ctx_slot_(n_ctx_slot), http_(std::make_unique<httplib::Server>()) {
  created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  // One worker per slot (a streaming request holds its worker) plus four for health, metrics and requests
  // waiting in the queue; not the library's default of one per core.
  int workers = opts_.threads_http > 0 ? opts_.threads_http : n_slots_ + 4;
  http_->new_task_queue = [workers] { return new httplib::ThreadPool(static_cast<size_t>(workers)); };
  http_->set_read_timeout(opts_.timeout, 0);
  http_->set_write_timeout(opts_.timeout, 0);
  // An idle keep-alive connection is closed after 5 s (cpp-httplib's and llama-server's default). At 1 s a
  // client that reuses a pooled connection (undici keeps one for timeout minus its own 1–2 s margin) could
  // send its next request into a socket the server was closing: "other side closed" under load (the soak
  // test saw it on CI's 2 cores).
  http_->set_keep_alive_timeout(5);
  routes();
}

HttpServer::~HttpServer() {
  stop();
}

bool HttpServer::start(std::string* error) {
  if (!http_->bind_to_port(opts_.host, opts_.port)) {
    *error =
        "cannot listen on " + opts_.host + ":" + std::to_string(opts_.port) + " (in use or not permitted)";
    return false;
  }
  bound_port_ = opts_.port;
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return true;
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
  if (h) return *h;
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
      return httplib::Server::HandlerResponse::Handled;
    }
    if (opts_.api_keys.empty() || public_path(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    std::string key;
    std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    if (key.empty()) key = req.get_header_value("x-api-key");
    for (const auto& k : opts_.api_keys)
      if (k == key) return httplib::Server::HandlerResponse::Unhandled;
    counters_.request_error("authentication_error");
    send_json(res, 401, error_body(unauthorized()));
    return httplib::Server::HandlerResponse::Handled;
  });

  // Unknown routes (and wrong methods) get an OpenAI-format 404 instead of httplib's empty page.
  s.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      counters_.request_error("not_found_error");
      send_json(res, 404, error_body(not_found("File Not Found")));
    }
  });

  auto health = wrap([this](const httplib::Request&, httplib::Response& res) {
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
                       {"tp", 1},
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
             bad_field("content", "a string", b.value("content", ojson()));
           bool add_special = b.value("add_special", false), parse_special = b.value("parse_special", true);
           bool with_pieces = b.value("with_pieces", false);
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
             bad_field("tokens", "an array of token ids", b.value("tokens", ojson()));
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
