#include "serve_command.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine_flags.h"
#include "rankd/backend/registry.h"
#include "rankd/cli/flag_set.h"
#include "rankd/common/logging.h"
#include "rankd/common/protobuf_log.h"
#include "rankd/common/status.h"
#include "rankd/engine/engine.h"
#include "rankd/model/identity.h"
#include "rankd/server/config/config.h"
#include "rankd/server/serve.h"
#include "rankd/server/pool/worker_supervisor.h"
#include "rankd/worker/worker.h"
#include "spdlog/spdlog.h"
#include "stop_signal.h"

namespace rankd::cli {
namespace {

int FlagError(absl::string_view command, const absl::Status& s) {
  std::fprintf(stderr, "rankd %s: %s\n", std::string(command).c_str(),
               std::string(s.message()).c_str());
  return 2;
}

absl::Status SetUpCommandLogging(const std::string& level, const std::string& format,
                                 const std::string& component) {
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-format: must be text or json (got '", format, "')"));
  }
  RANKD_RETURN_IF_ERROR(
      SetUpLogging(level, format == "json" ? LogFormat::kJson : LogFormat::kText, component));
  RouteProtobufLogs();
  return absl::OkStatus();
}

}  // namespace

// The value of --config in argv[first..argc), or "". Read before the flags are parsed: the
// file's values are the other flags' defaults (and what --help shows).
std::string FindConfigFlag(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--config=", 0) == 0) return arg.substr(9);
    if (arg == "--config" && i + 1 < argc) return argv[i + 1];
  }
  return "";
}

int RunServeCommand(int argc, char** argv, int first) {
  std::string config_path = FindConfigFlag(argc, argv, first);
  absl::StatusOr<server::ServeConfig> loaded =
      config_path.empty() ? server::DefaultServeConfig() : server::LoadServeConfigFile(config_path);
  if (!loaded.ok()) return FlagError("serve", loaded.status());
  server::ServeConfig config = std::move(*loaded);
  server::ModelSection& m = config.model;

  FlagSet flags(
      "rankd serve [--config FILE] [--model DIR] [--backend cpu|cuda] [--listen HOST:PORT]\n"
      "            [--metrics-listen HOST:PORT] [--http-listen HOST:PORT] [--workers N] [flags]\n"
      "Serves rankd.v1.Scorer (proto/rankd/v1/scorer.proto) over gRPC, and POST /v1/rerank,\n"
      "POST /v2/rerank and POST /rerank over HTTP, with a pool of worker processes. Without\n"
      "--config it uses the embedded default (configs/tiny-cpu.yaml: the bundled demo reranker,\n"
      "CPU backend, 2 workers); "
      "flags override the file (the defaults below are the file's values). SIGTERM drains. "
      "Settings: docs/config.md.");
  EngineFlags engine_flags(m.engine);
  engine_flags.options.backend.device =
      config.workers.gpus.size() == 1 ? config.workers.gpus[0] : 0;
  AddEngineFlags(flags, &engine_flags);
  std::string listen = config.server.listen, metrics_listen = config.server.metrics_listen,
              http_listen = config.server.http_listen;
  std::string log_level = config.logging.level, log_format = config.logging.format, ready_file;
  int workers = config.workers.count, queue_size = config.server.queue_size;
  server::TlsSection& tls = config.server.tls;
  server::AuthSection& auth = config.server.auth;
  bool print_default_config = false;
  flags.String("config", &config_path, "YAML config file (default: the embedded tiny-cpu.yaml)");
  flags.String("listen", &listen, "gRPC address HOST:PORT (server.listen)");
  flags.String("metrics-listen", &metrics_listen,
               "HTTP address of /metrics, /healthz, /readyz; empty: off (server.metrics_listen)");
  flags.String("http-listen", &http_listen,
               "HTTP address of the JSON API (POST /v1/rerank, /v2/rerank, /rerank, ...); empty: "
               "off (server.http_listen)");
  flags.Strings("served-model-name", &config.server.served_model_names,
                "a name the model is served under, repeatable; the first is what answers report "
                "(server.served_model_names; default: model.name)");
  flags.String("tls-cert", &tls.cert_file,
               "PEM certificate chain: TLS on the gRPC port (server.tls.cert_file)");
  flags.String("tls-key", &tls.key_file, "PEM private key of --tls-cert (server.tls.key_file)");
  flags.String("tls-client-ca", &tls.client_ca_file,
               "PEM CA bundle: mutual TLS, clients need a certificate it signed "
               "(server.tls.client_ca_file)");
  flags.String("api-keys-file", &auth.api_keys_file,
               "API keys, one per line: calls need 'authorization: Bearer KEY' "
               "(server.auth.api_keys_file; SIGHUP re-reads it)");
  flags.Int("workers", &workers, "worker processes (workers.count)");
  flags.Int("queue-size", &queue_size, "requests that may wait for a worker (server.queue_size)");
  flags.Double("drain-delay-s", &config.server.drain_delay_s,
               "SIGTERM: seconds of NOT_SERVING while calls are still accepted, before the drain "
               "(server.drain_delay_s)");
  flags.String("log-level", &log_level, "trace, debug, info, warn, error, off (logging.level)");
  flags.String("log-format", &log_format, "text or json (logging.format)");
  flags.String(
      "ready-file", &ready_file,
      "write {\"pid\", \"grpc_port\", \"metrics_port\", \"http_port\"} here once listening");
  flags.Bool("print-default-config", &print_default_config,
             "print the embedded default config and exit");
  if (absl::Status s = flags.Parse(argc, argv, first, nullptr); !s.ok()) {
    return absl::IsCancelled(s) ? 0 : FlagError("serve", s);
  }
  if (print_default_config) {
    std::fputs(std::string(server::EmbeddedDefaultConfigText()).c_str(), stdout);
    return 0;
  }
  m.engine = ToEngineOptions(engine_flags, flags);
  if (flags.WasSet("device")) {
    config.workers.all_gpus = false;
    config.workers.gpus = {engine_flags.options.backend.device};
  }
  config.server.listen = listen;
  config.server.metrics_listen = metrics_listen;
  config.server.http_listen = http_listen;
  config.workers.count = workers;
  config.server.queue_size = queue_size;
  config.logging.level = log_level;
  config.logging.format = log_format;
  if (absl::Status s = server::FinalizeServeConfig(&config); !s.ok()) {
    return FlagError("serve", s);
  }
  // A bad RANKD_CUDA_* value fails here, once, rather than in every worker start.
  if (absl::Status s = backend::ApplyBackendEnvironment(&config.model.engine.backend); !s.ok()) {
    return FlagError("serve", s);
  }
  if (absl::Status s = SetUpCommandLogging(config.logging.level, config.logging.format, "serve");
      !s.ok()) {
    return FlagError("serve", s);
  }
  // A model the workers cannot load fails here, once, rather than in every worker start.
  if (absl::Status s = engine::Engine::CheckModel(config.model.engine); !s.ok()) {
    spdlog::error("model {}: {}", config.model.name, s.message());
    return 1;
  }
  // What the workers must find in model.dir (they refuse another model: worker.cc).
  absl::StatusOr<std::string> identity = model::ModelIdentity(config.model.engine.model_dir);
  if (!identity.ok()) {
    spdlog::error("model {}: {}", config.model.name, identity.status().message());
    return 1;
  }
  if (!config.model.identity.empty() && config.model.identity != *identity) {
    spdlog::error("model.identity: {} holds model {}, not {}", config.model.engine.model_dir,
                  *identity, config.model.identity);
    return 1;
  }
  config.model.identity = *identity;
  spdlog::info("model {}: identity {}", config.model.name, config.model.identity);
  InstallStopSignalHandlers();
  InstallReloadSignalHandler();
  server::ServeOptions options;
  options.ready_file = ready_file;
  options.wait_for_stop = WaitForStopSignal;
  options.wait_for_reload = WaitForReloadSignal;
  if (absl::Status s = server::RunServer(config, options); !s.ok()) {
    spdlog::error("{}", s.message());
    return 1;
  }
  return 0;
}

int RunWorkerCommand(int argc, char** argv, int first) {
  FlagSet flags(
      "rankd worker --socket PATH --config FILE [--index N]\n"
      "One worker process of `rankd serve`, which starts it: an engine that serves the internal\n"
      "rankd.worker.v1.Worker protocol on a Unix domain socket. FILE is the front end's\n"
      "finalized config (written by serve into workers.socket_dir): model, engine options,\n"
      "limits and logging all come from it.");
  worker::WorkerOptions options;
  std::string config_path;
  flags.String("socket", &options.socket_path, "Unix domain socket to serve on");
  flags.String("config", &config_path, "the config file serve wrote for its workers");
  flags.Int("index", &options.index, "worker index in the pool (for logs)");
  if (absl::Status s = flags.Parse(argc, argv, first, nullptr); !s.ok()) {
    return absl::IsCancelled(s) ? 0 : FlagError("worker", s);
  }
  if (options.socket_path.empty()) {
    return FlagError("worker", absl::InvalidArgumentError("--socket is required"));
  }
  if (config_path.empty()) {
    return FlagError("worker", absl::InvalidArgumentError("--config is required"));
  }
  absl::StatusOr<server::ServeConfig> config = server::LoadServeConfigFile(config_path);
  if (config.ok()) {
    if (absl::Status s = server::FinalizeServeConfig(&*config); !s.ok()) config = s;
  }
  if (!config.ok()) return FlagError("worker", config.status());
  options.setup = server::WorkerSetupOf(*config);
  // The RANKD_CUDA_* switches, read once here (the worker inherits serve's environment).
  if (absl::Status s = backend::ApplyBackendEnvironment(&options.setup.engine.backend); !s.ok()) {
    return FlagError("worker", s);
  }
  const server::LoggingSection& log = config->logging;
  if (absl::Status s =
          SetUpCommandLogging(log.level, log.format, absl::StrCat("worker-", options.index));
      !s.ok()) {
    return FlagError("worker", s);
  }
  InstallStopSignalHandlers();
  options.wait_for_stop = WaitForStopSignal;
  if (absl::Status s = worker::RunWorker(options); !s.ok()) {
    spdlog::error("{}", s.message());
    // For the front end's exit message, should this worker never come up (worker_supervisor.h).
    std::ofstream(server::WorkerErrorPath(options.socket_path)) << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace rankd::cli
