#include "rankd/server/serve.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/common/work_queue.h"
#include "rankd/model/config.h"
#include "rankd/server/auth.h"
#include "rankd/server/credentials.h"
#include "rankd/server/http_api.h"
#include "rankd/server/http_server.h"
#include "rankd/server/metrics.h"
#include "rankd/server/process.h"
#include "rankd/server/scorer_service.h"
#include "rankd/server/tokenize_service.h"
#include "rankd/server/worker_plan.h"
#include "rankd/server/worker_pool.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

constexpr char kScorerServiceName[] = "rankd.v1.Scorer";
// How often the serving loop looks whether the workers failed to start for good.
constexpr std::chrono::milliseconds kStartFailurePoll(100);

// The HTTP side: /metrics (Prometheus), /healthz (alive), /readyz (ready to score). With
// `metrics_keys`, /metrics answers 401 without `Authorization: Bearer KEY`.
absl::Status StartHttp(HttpServer* http, const std::string& address,
                       const MetricsRegistry* registry, const WorkerPool* pool,
                       const ApiKeys* metrics_keys) {
  http->Handle("GET", "/metrics",
               [registry, metrics_keys](const HttpRequest& request, HttpServer::Reply reply) {
                 const std::string* authorization = request.Header("authorization");
                 if (metrics_keys != nullptr &&
                     !metrics_keys->Accepts(authorization ? *authorization : "")) {
                   reply({.status = 401, .body = "a valid API key is required\n"});
                   return;
                 }
                 reply({.content_type = "text/plain; version=0.0.4; charset=utf-8",
                        .body = registry->Render()});
               });
  http->Handle("GET", "/healthz",
               [](const HttpRequest&, HttpServer::Reply reply) { reply({.body = "ok\n"}); });
  http->Handle("GET", "/readyz", [pool](const HttpRequest&, HttpServer::Reply reply) {
    const bool ready = pool->ready();
    reply({.status = ready ? 200 : 503, .body = ready ? "ready\n" : "not ready\n"});
  });
  return http->Start(address);
}

// How long the stop waits for gRPC to send the answers it holds before it ends the connections.
constexpr std::chrono::seconds kAnswersSentTimeout(2);

// Ends this process's TCP connections accepted on `port` (shutdown: what the kernel holds is
// still sent, then FIN), so that their clients see UNAVAILABLE for any call they have in flight.
// The stop needs it because grpc::Server::Shutdown answers CANCELLED to the calls that reach it
// after it started but before its GOAWAY reached the client (gRPC 1.51 kills them as zombies);
// with the connections ended first, no call can reach it any more. Returns how many it ended.
int DisconnectPeers(int port) {
  int ended = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    int fd = -1;
    if (!absl::SimpleAtoi(it->path().filename().string(), &fd)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof(local), peer_size = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) {
      continue;  // not a socket, or not connected (the listening socket)
    }
    int local_port = -1;
    if (local.ss_family == AF_INET) {
      local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    } else if (local.ss_family == AF_INET6) {
      local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
    }
    if (local_port == port && shutdown(fd, SHUT_RDWR) == 0) ++ended;
  }
  return ended;
}

// server.reflection: false. The reflection plugin, once linked, adds itself to every builder;
// this option takes it out again.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
      return dynamic_cast<grpc::reflection::ProtoServerReflectionPlugin*>(p.get()) != nullptr;
    });
  }
};

absl::Status WriteReadyFile(const std::string& path, int grpc_port, int metrics_port,
                            int http_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"pid\": " << getpid() << ", \"grpc_port\": " << grpc_port
        << ", \"metrics_port\": " << metrics_port << ", \"http_port\": " << http_port << "}\n";
    if (!out) return absl::InternalError(absl::StrCat("--ready-file ", path, ": cannot write"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("--ready-file ", path, ": rename: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// The SIGTERM drain: NOT_SERVING, new calls refused, in-flight work given drain_timeout_s (a
// second stop request cuts it short).
void Drain(const ServeConfig& config, const ServeOptions& options, WorkerPool& pool) {
  spdlog::info(
      "stopping: draining (NOT_SERVING, new calls get UNAVAILABLE, in-flight work has "
      "{} s)",
      config.server.drain_timeout_s);
  pool.StartDrain();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(config.server.drain_timeout_s));
  while (!pool.WaitIdle(std::chrono::milliseconds(50))) {
    if (std::chrono::steady_clock::now() >= deadline) {
      spdlog::warn("drain timeout: failing the work still in flight");
      break;
    }
    if (options.wait_for_stop(std::chrono::milliseconds(0))) {
      spdlog::warn("second stop request: failing the work still in flight");
      break;
    }
  }
}

}  // namespace

absl::Status RunServer(const ServeConfig& config, const ServeOptions& options) {
  RANKD_ASSIGN_OR_RETURN(model::ModelConfig model_config,
                         model::ModelConfig::FromHfDir(config.model.engine.model_dir));
  const ModelInfo model{config.model.name, model_config.vocab_size, model_config.hidden_size,
                        model_config.max_position_embeddings};
  RANKD_ASSIGN_OR_RETURN(std::vector<WorkerSpec> specs,
                         PlanWorkers(config.workers, config.model.engine.backend.kind == "cuda",
                                     CountVisibleGpus(), AvailableCpus()));

  MetricsRegistry registry;
  ServerMetrics metrics(&registry);
  WorkerPool pool(config, specs, &metrics);
  // Tokenize's encoder: the engine's tokenizer and templates, loaded here without the weights.
  RANKD_ASSIGN_OR_RETURN(std::unique_ptr<engine::TextEncoder> encoder,
                         engine::TextEncoder::Load(config.model.engine));
  TokenizeService tokenize(config, model, std::move(encoder), &registry);
  ScorerService service(config, model, &pool, &metrics, &tokenize);

  std::shared_ptr<ApiKeys> keys;
  if (!config.server.auth.api_keys_file.empty()) {
    RANKD_ASSIGN_OR_RETURN(keys, ApiKeys::Load(config.server.auth.api_keys_file));
  }
  RANKD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                         MakeServerCredentials(config.server, keys));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!config.server.reflection.value_or(false)) {
    builder.SetOption(std::make_unique<WithoutReflection>());
  }
  int grpc_port = 0;
  builder.AddListeningPort(config.server.listen, credentials, &grpc_port);
  builder.SetMaxReceiveMessageSize(TransportMessageLimit(config.limits));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("server.listen: cannot listen on ", config.server.listen));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(kScorerServiceName, false);
  pool.SetReadinessCallback(
      [health](bool ready) { health->SetServingStatus(kScorerServiceName, ready); });

  // The HTTP API's bodies are parsed on these threads, not on its server's (declared first: it
  // outlives the server's handlers).
  WorkQueue http_bodies("HTTP bodies to parse", kHttpBodyThreads, kMaxQueuedHttpBodies);
  // Two HTTP servers, each with its own connections: the JSON API may face the clients' network
  // while /metrics and the probes stay on an internal address, and busy API clients cannot
  // crowd out a probe. The metrics port serves GETs: it takes no bodies.
  HttpServer::Options http_options{
      .max_connections = config.server.http_max_connections,
      .read_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::duration<double>(config.server.http_read_timeout_s)),
      .max_body_bytes = 0,
      .name = "server.metrics_listen"};
  HttpServer http(http_options);
  http_options.max_body_bytes = config.limits.max_message_bytes;
  http_options.max_buffered_bytes = config.server.http_max_buffered_bytes;
  http_options.name = "server.http_listen";
  http_options.error_response = HttpApiErrors(&registry);
  HttpServer api(http_options);
  absl::Status http_started;
  if (!config.server.metrics_listen.empty()) {
    http_started = StartHttp(&http, config.server.metrics_listen, &registry, &pool,
                             config.server.auth.protect_metrics ? keys.get() : nullptr);
  }
  if (http_started.ok() && !config.server.http_listen.empty()) {
    RegisterHttpApi(&api, &service, keys.get(), &http_bodies);
    http_started = api.Start(config.server.http_listen);
  }
  if (!http_started.ok()) {
    server->Shutdown();
    return http_started;
  }
  if (absl::Status s = pool.Start(); !s.ok()) {
    server->Shutdown();
    return s;
  }
  spdlog::info("serving model {} ({}, backend {}, {} workers) on {} (gRPC port {}, {}{}{}){}{}",
               config.model.name, config.model.engine.model_dir, config.model.engine.backend.kind,
               specs.size(), config.server.listen, grpc_port,
               config.server.tls.cert_file.empty()        ? "plaintext"
               : config.server.tls.client_ca_file.empty() ? "TLS"
                                                          : "mutual TLS",
               keys == nullptr ? "" : absl::StrCat(", ", keys->size(), " API keys"),
               config.server.reflection.value_or(false) ? ", reflection" : "",
               config.server.metrics_listen.empty()
                   ? std::string()
                   : absl::StrCat(", metrics on port ", http.port()),
               config.server.http_listen.empty() ? std::string()
                                                 : absl::StrCat(", HTTP API on port ", api.port()));
  // SIGHUP re-reads the API keys (the TLS files are re-read by gRPC's watcher on its own).
  std::atomic<bool> stopping{false};
  std::thread reloader;
  if (keys != nullptr && options.wait_for_reload) {
    reloader = std::thread([&] {
      while (!stopping.load()) {
        if (!options.wait_for_reload(std::chrono::milliseconds(200))) continue;
        if (absl::Status s = keys->Reload(); !s.ok()) {
          spdlog::error("SIGHUP: keeping the API keys in use: {}", s.message());
        } else {
          spdlog::info("SIGHUP: reloaded {} API keys", keys->size());
        }
      }
    });
  }
  if (!options.ready_file.empty()) {
    if (absl::Status s = WriteReadyFile(options.ready_file, grpc_port, http.port(), api.port());
        !s.ok()) {
      spdlog::error("{}", s.message());
    }
  }

  // Serves until a stop request, or until the workers failed to start for good (then exits with
  // their error: nothing to drain).
  absl::Status start_failure;
  while (start_failure.ok() && !options.wait_for_stop(kStartFailurePoll)) {
    start_failure = pool.start_failure();
  }
  if (start_failure.ok()) Drain(config, options, pool);
  // Bodies still waiting are answered 503, the ones being parsed finish (each is bounded by
  // limits.max_message_bytes): their calls get UNAVAILABLE from the draining pool.
  http_bodies.Stop();
  stopping.store(true);
  if (reloader.joinable()) reloader.join();
  // Every accepted call has its answer now (its work done, or failed UNAVAILABLE here), written
  // while the workers stop. The clients' connections go before the server, so that a call still
  // arriving gets UNAVAILABLE, not CANCELLED (DisconnectPeers).
  pool.Shutdown();
  pool.SetReadinessCallback(nullptr);
  // An answer handed to gRPC may not be on the wire yet: wait (bounded) until every call's
  // reactor is done, so that ending the connections does not cut one off.
  const auto sent_by = std::chrono::steady_clock::now() + kAnswersSentTimeout;
  while (service.open_calls() > 0 && std::chrono::steady_clock::now() < sent_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (const int open = service.open_calls(); open > 0) {
    spdlog::warn("{} call{} still being answered at the stop", open, open == 1 ? "" : "s");
  }
  const int ended = DisconnectPeers(grpc_port);
  if (ended > 0) spdlog::info("closed {} client connection{}", ended, ended == 1 ? "" : "s");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  api.Stop();
  http.Stop();
  if (!options.ready_file.empty()) std::remove(options.ready_file.c_str());
  if (!start_failure.ok()) return start_failure;
  spdlog::info("stopped");
  return absl::OkStatus();
}

}  // namespace rankd::server
