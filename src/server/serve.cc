#include "rankd/server/serve.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "httplib.h"
#include "rankd/common/logging.h"
#include "rankd/common/status.h"
#include "rankd/model/config.h"
#include "rankd/server/metrics.h"
#include "rankd/server/process.h"
#include "rankd/server/scorer_service.h"
#include "rankd/server/worker_plan.h"
#include "rankd/server/worker_pool.h"
#include "spdlog/spdlog.h"

namespace rankd::server {
namespace {

constexpr char kScorerServiceName[] = "rankd.v1.Scorer";
// How often the serving loop looks whether the workers failed to start for good.
constexpr std::chrono::milliseconds kStartFailurePoll(100);

// "host:port", "[v6]:port" or ":port" (all interfaces).
absl::Status SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), port) ||
      *port < 0 || *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server.metrics_listen: '", address, "' is not HOST:PORT"));
  }
  *host = address.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  if (host->empty()) *host = "0.0.0.0";
  return absl::OkStatus();
}

// The HTTP side: /metrics (Prometheus), /healthz (alive), /readyz (ready to score).
class MetricsServer {
 public:
  absl::Status Start(const std::string& address, const MetricsRegistry* registry,
                     const WorkerPool* pool) {
    std::string host;
    int port = 0;
    RANKD_RETURN_IF_ERROR(SplitHostPort(address, &host, &port));
    // One request per connection: scrapes are rare, and stopping must not wait for idle
    // keep-alive connections.
    server_.set_keep_alive_max_count(1);
    server_.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
      res.set_content(registry->Render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server_.Get("/readyz", [pool](const httplib::Request&, httplib::Response& res) {
      const bool ready = pool->ready();
      res.status = ready ? 200 : 503;
      res.set_content(ready ? "ready\n" : "not ready\n", "text/plain");
    });
    if (port == 0) {
      port_ = server_.bind_to_any_port(host);
    } else {
      port_ = server_.bind_to_port(host, port) ? port : -1;
    }
    if (port_ <= 0) {
      return absl::UnavailableError(
          absl::StrCat("server.metrics_listen: cannot listen on ", address));
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    return absl::OkStatus();
  }

  void Stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }
  ~MetricsServer() { Stop(); }

  int port() const { return port_; }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

absl::Status WriteReadyFile(const std::string& path, int grpc_port, int metrics_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"pid\": " << getpid() << ", \"grpc_port\": " << grpc_port
        << ", \"metrics_port\": " << metrics_port << "}\n";
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
  ScorerService service(config, model, &pool, &metrics);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort(config.server.listen, grpc::InsecureServerCredentials(), &grpc_port);
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

  MetricsServer http;
  if (!config.server.metrics_listen.empty()) {
    if (absl::Status s = http.Start(config.server.metrics_listen, &registry, &pool); !s.ok()) {
      server->Shutdown();
      return s;
    }
  }
  if (absl::Status s = pool.Start(); !s.ok()) {
    server->Shutdown();
    return s;
  }
  spdlog::info("serving model {} ({}, backend {}, {} workers) on {} (gRPC port {}){}",
               config.model.name, config.model.engine.model_dir, config.model.engine.backend.kind,
               specs.size(), config.server.listen, grpc_port,
               config.server.metrics_listen.empty()
                   ? std::string()
                   : absl::StrCat(", metrics on port ", http.port()));
  if (!options.ready_file.empty()) {
    if (absl::Status s = WriteReadyFile(options.ready_file, grpc_port, http.port()); !s.ok()) {
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
  pool.Shutdown();
  pool.SetReadinessCallback(nullptr);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  http.Stop();
  if (!options.ready_file.empty()) std::remove(options.ready_file.c_str());
  if (!start_failure.ok()) return start_failure;
  spdlog::info("stopped");
  return absl::OkStatus();
}

}  // namespace rankd::server
