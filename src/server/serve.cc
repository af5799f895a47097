#include "rankd/server/serve.h"

#include <malloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
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
#include "rankd/server/grpc/grpc.h"
#include "rankd/server/http/http.h"
#include "rankd/server/metrics.h"
#include "rankd/server/pool/pool.h"
#include "rankd/server/process.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

constexpr char kScorerServiceName[] = "rankd.v1.Scorer";
// How often the serving loop looks whether the workers failed to start for good.
constexpr std::chrono::milliseconds kStartFailurePoll(100);

// Memory that the front end's allocator holds free beyond this goes back to the system. glibc
// keeps what is freed in its heaps, resident: after calls that held much (their request bytes,
// their answers with long ids; 160 unread calls with 16 MB of ids took the front end to 10 GB)
// had ended, the front end stayed at its peak.
constexpr size_t kMaxFreeHeldBytes = size_t{16} << 20;
constexpr std::chrono::seconds kFreeMemoryPoll(1);

void ReturnFreeMemory() {
  if (mallinfo2().fordblks > kMaxFreeHeldBytes) malloc_trim(0);
}

// The HTTP side: /metrics (Prometheus), /healthz (alive), /readyz (ready to score). With
// `metrics_keys`, /metrics answers 401 without `Authorization: Bearer KEY`. A gRPC listener found
// dead (`listener`) makes both probes fail: the process is neither alive nor ready to an
// orchestrator, which should stop sending to it and restart it.
absl::Status StartHttp(HttpServer* http, const std::string& address,
                       const MetricsRegistry* registry, const WorkerPool* pool,
                       const ApiKeys* metrics_keys, const ListenerWatchdog* listener) {
  http->Handle("GET", "/metrics",
               [registry, metrics_keys](const HttpRequest& request, HttpServer::Reply reply) {
                 if (metrics_keys != nullptr) {
                   if (absl::Status s = CheckHttpApiKey(*metrics_keys, request); !s.ok()) {
                     reply({.status = 401,
                            .body = absl::StrCat(s.message(), "\n"),
                            .headers = {{"WWW-Authenticate", "Bearer realm=\"rankd\""}}});
                     return;
                   }
                 }
                 reply({.content_type = "text/plain; version=0.0.4; charset=utf-8",
                        .body = registry->Render()});
               });
  http->Handle("GET", "/healthz", [listener](const HttpRequest&, HttpServer::Reply reply) {
    const absl::Status dead = listener->failure();
    reply({.status = dead.ok() ? 200 : 503,
           .body = dead.ok() ? "ok\n" : absl::StrCat(dead.message(), "\n")});
  });
  http->Handle("GET", "/readyz", [pool, listener](const HttpRequest&, HttpServer::Reply reply) {
    const bool ready = pool->ready() && listener->failure().ok();
    reply({.status = ready ? 200 : 503, .body = ready ? "ready\n" : "not ready\n"});
  });
  return http->Start(address);
}

// Connections are file descriptors. The soft limit is raised to the hard one, and the HTTP ports'
// connection caps (server.http_max_connections each) may take half of it at most: the other half
// stays for gRPC's connections, which gRPC 1.51 cannot bound (no channel argument does; its
// resource quota bounds memory and threads), the workers' channels and files. Should gRPC's
// connections use up the rest all the same, its listener stops for good, and the ListenerWatchdog
// finds it.
absl::Status ProvideFileDescriptors(const ServerSection& server) {
  int64_t before = 0;
  RANKD_ASSIGN_OR_RETURN(const int64_t limit, RaiseFileLimit(&before));
  if (limit != before) {
    spdlog::info("open files: soft limit raised from {} to {} (the hard limit)", before, limit);
  } else {
    spdlog::info("open files: limit {}", limit);
  }
  const int ports = !server.metrics_listen.empty() + !server.http_listen.empty();
  const int64_t held = int64_t{ports} * server.http_max_connections;
  if (held <= limit / 2) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "server.http_max_connections: ", ports, " HTTP port", ports == 1 ? "" : "s", " x ",
      server.http_max_connections, " connections may hold ", held,
      " file descriptors, more than half of the ", limit,
      " this process may open (RLIMIT_NOFILE, its hard limit): the rest is gRPC's; lower it, or "
      "raise the limit (ulimit -Hn, systemd LimitNOFILE=, docker --ulimit nofile=)"));
}

// A failed listen on `address`, with the process that holds its port when one does (a second
// server started on the first one's port).
absl::Status NameThePortHolder(absl::Status status, absl::string_view address) {
  int port = 0;
  const size_t colon = address.rfind(':');
  if (status.ok() || absl::StartsWith(address, "unix") || colon == absl::string_view::npos ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port == 0) {
    return status;
  }
  const std::string holder = DescribePortHolder(port);
  if (holder.empty()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (port ", port, " is held by ", holder, ")"));
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
  ForEachConnectedSocket([&](const ConnectedSocket& s) {
    int local_port = -1;
    if (s.local.ss_family == AF_INET) {
      local_port = ntohs(reinterpret_cast<const sockaddr_in*>(&s.local)->sin_port);
    } else if (s.local.ss_family == AF_INET6) {
      local_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&s.local)->sin6_port);
    }
    if (local_port == port && shutdown(s.fd, SHUT_RDWR) == 0) ++ended;
    return true;
  });
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

// The SIGTERM drain: NOT_SERVING first, calls still accepted for drain_delay_s (balancers take
// the server out meanwhile), then new calls refused and in-flight work given drain_timeout_s. A
// second stop request cuts either short (and fails the work still in flight).
void Drain(const ServeConfig& config, const ServeOptions& options, WorkerPool& pool) {
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(s));
  };
  bool cut_short = false;
  if (config.server.drain_delay_s > 0) {
    spdlog::info(
        "stopping: NOT_SERVING, calls still accepted for {} s (server.drain_delay_s) while "
        "balancers take this server out",
        config.server.drain_delay_s);
    pool.ReportNotReady();
    cut_short = options.wait_for_stop(seconds(config.server.drain_delay_s));
  }
  spdlog::info(
      "stopping: draining (NOT_SERVING, new calls get UNAVAILABLE, in-flight work has "
      "{} s)",
      config.server.drain_timeout_s);
  pool.StartDrain();
  const auto deadline = std::chrono::steady_clock::now() + seconds(config.server.drain_timeout_s);
  while (!cut_short && !pool.WaitIdle(std::chrono::milliseconds(50))) {
    if (std::chrono::steady_clock::now() >= deadline) {
      spdlog::warn("drain timeout: failing the work still in flight");
      break;
    }
    cut_short = options.wait_for_stop(std::chrono::milliseconds(0));
  }
  if (cut_short) spdlog::warn("second stop request: failing the work still in flight");
}

}  // namespace

absl::Status RunServer(const ServeConfig& config, const ServeOptions& options) {
  RANKD_RETURN_IF_ERROR(ProvideFileDescriptors(config.server));
  RANKD_ASSIGN_OR_RETURN(model::ModelConfig model_config,
                         model::ModelConfig::FromHfDir(config.model.engine.model_dir));
  ModelInfo model = ServedModel(config);
  model.vocab_size = model_config.vocab_size;
  model.hidden_size = model_config.hidden_size;
  model.max_position_embeddings = model_config.max_position_embeddings;
  RANKD_ASSIGN_OR_RETURN(std::vector<WorkerSpec> specs,
                         PlanWorkers(config.workers, config.model.engine.backend.kind == backend::kCudaBackend,
                                     CountVisibleGpus(), AvailableCpus()));

  MetricsRegistry registry;
  ServerMetrics metrics(&registry);
  ExportBuildInfo(&registry, config.model.engine.backend.kind,
                  config.model.engine.backend.precision);
  WorkerPool pool(config, specs, &metrics);
  // /metrics is served by `http` below, which stops before the pool goes.
  registry.AddCollector(ProcessMetrics([&pool] { return pool.WorkerPids(); }));
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
  // gRPC sets SO_REUSEPORT by default: a second server on the port would bind it too, and the
  // kernel would split the connections between them. Without it the second one's bind fails.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(TransportMessageLimit(config.limits));
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    return NameThePortHolder(absl::UnavailableError(absl::StrCat("server.listen: cannot listen on ",
                                                                 config.server.listen)),
                             config.server.listen);
  }
  // gRPC 1.51 can stop accepting for good (listener_watchdog.h): watched from here on.
  ListenerWatchdog listener(ProbeAddress(config.server.listen, grpc_port), {});
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
  http_options.finish_answer = HttpApiAnswerHeaders(config.server);
  HttpServer api(http_options);
  absl::Status http_started;
  if (!config.server.metrics_listen.empty()) {
    http_started = NameThePortHolder(
        StartHttp(&http, config.server.metrics_listen, &registry, &pool,
                  config.server.auth.protect_metrics ? keys.get() : nullptr, &listener),
        config.server.metrics_listen);
  }
  if (http_started.ok() && !config.server.http_listen.empty()) {
    RegisterHttpApi(&api, &service, keys.get(), &http_bodies);
    http_started =
        NameThePortHolder(api.Start(config.server.http_listen), config.server.http_listen);
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
  // their error: nothing to drain), or until the gRPC listener is found dead (then drains what
  // the open connections brought, and exits with why, for a supervisor to restart the process).
  absl::Status start_failure, listener_failure;
  auto trimmed_at = std::chrono::steady_clock::now();
  while (start_failure.ok() && listener_failure.ok() && !options.wait_for_stop(kStartFailurePoll)) {
    start_failure = pool.start_failure();
    listener_failure = listener.failure();
    if (std::chrono::steady_clock::now() - trimmed_at >= kFreeMemoryPoll) {
      ReturnFreeMemory();
      trimmed_at = std::chrono::steady_clock::now();
    }
  }
  if (!listener_failure.ok()) {
    spdlog::error(
        "{}: not alive and not ready (/healthz, /readyz 503, gRPC health NOT_SERVING); "
        "stopping, to be restarted",
        listener_failure.message());
    health->Shutdown();  // NOT_SERVING, for the clients still connected
  }
  listener.Stop();  // the stop below ends the listener: no more probes
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
  if (!listener_failure.ok()) return listener_failure;
  spdlog::info("stopped");
  return absl::OkStatus();
}

}  // namespace rankd::server
