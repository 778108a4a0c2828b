// An HttpServer in-process for tests: a real engine on the shared tiny Qwen2 model behind the
// server on a free loopback port, with a cpp-httplib client. The chat template is a plain
// "role: content" rendering (the tiny model has none worth testing here).
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "server/http_server.h"
#include "test_models.h"

namespace uf::server {

class ServerHarness {
 public:
  // so.ctx left at its default becomes 256 (the tiny model's tests need no more); keys null: no
  // authentication; render null: the plain "role: content" rendering.
  explicit ServerHarness(engine::ServiceOptions so = {}, std::unique_ptr<KeyStore> keys = nullptr,
                         ServerOptions ho = {}, ChatRenderer render = nullptr) {
    testing_models::Loaded& tiny = testing_models::TinyQwen2();
    so.n_threads = 2;
    if (so.ctx == 4096) so.ctx = 256;
    service_ = std::move(engine::Service::Create(*tiny.model, *tiny.tokenizer, so)).value();
    keys_ = keys ? std::move(keys) : std::make_unique<KeyStore>();
    ho.port = 0;
    ho.model_id = "tiny";
    ho.poll_s = 0.02;
    if (!render) render = PlainRender;
    http_ = std::make_unique<HttpServer>(ho, service_.get(), render, keys_.get(), &metrics_);
    UF_CHECK(http_->Bind().ok());
    thread_ = std::thread([this] { http_->Serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
    client_->set_read_timeout(120, 0);
  }
  static StatusOr<std::string> PlainRender(const nlohmann::json& messages,
                                           const nlohmann::ordered_json&) {
    std::string out;
    for (const auto& m : messages) {
      out += m["role"].get<std::string>() + ": " + m["content"].get<std::string>() + "\n";
    }
    return out + "assistant:";
  }

  ~ServerHarness() {
    client_.reset();  // an idle keep-alive connection would hold Stop() for its timeout
    service_->Shutdown();
    http_->Stop();
    thread_.join();
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
    return client_->Post(path.c_str(), headers, body, "application/json");
  }
  httplib::Result Get(const std::string& path, const httplib::Headers& headers = {}) {
    return client_->Get(path.c_str(), headers);
  }
  // The engine's stats once every sequence has finished and given back its K/V (a condition
  // waited for; the 30 s cap only ends a test that would otherwise hang).
  engine::EngineStats Settled() {
    engine::EngineStats st = service_->Stats();
    for (int i = 0; i < 30000 && (st.running > 0 || st.kv_blocks_used > 0); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      st = service_->Stats();
    }
    return st;
  }
  int port() const { return http_->port(); }
  httplib::Client& client() { return *client_; }
  engine::Service& service() { return *service_; }

 private:
  std::unique_ptr<engine::Service> service_;
  std::unique_ptr<KeyStore> keys_;
  Metrics metrics_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

}  // namespace uf::server
