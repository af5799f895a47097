// The channels of rankd-client and rankd-bench load (channel.h).
#include "channel.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace rankd::client {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", path, ": cannot read"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Adds `authorization: Bearer KEY` to a call's initial metadata. (Call credentials would not
// do: gRPC sends them only over TLS, and keys also serve plaintext servers behind a proxy.)
class ApiKeyInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(std::string header) : header_(std::move(header)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    }
    methods->Proceed();
  }

 private:
  // A copy: a call may outlive its channel, and with it the factory.
  const std::string header_;
};

class ApiKeyInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(const std::string& key) : header_("Bearer " + key) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new ApiKeyInterceptor(header_);
  }

 private:
  const std::string header_;
};

}  // namespace

void AddChannelSecurityFlags(cli::FlagSet& flags, ChannelSecurity* security) {
  flags.String("tls-ca", &security->tls_ca, "PEM CA bundle: TLS, the server verified with it");
  flags.String("tls-cert", &security->tls_cert, "PEM client certificate (mutual TLS)");
  flags.String("tls-key", &security->tls_key, "PEM private key of --tls-cert");
  flags.String("api-key", &security->api_key,
               "API key sent as 'authorization: Bearer KEY' (default: $RANKD_API_KEY)");
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& target,
                                                             const ChannelSecurity& security,
                                                             const grpc::ChannelArguments& args) {
  if (security.tls_cert.empty() != security.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!security.tls_cert.empty() && security.tls_ca.empty()) {
    return absl::InvalidArgumentError("--tls-cert needs --tls-ca (mutual TLS is TLS)");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!security.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    absl::StatusOr<std::string> ca = ReadPem("tls-ca", security.tls_ca);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = std::move(*ca);
    if (!security.tls_cert.empty()) {
      absl::StatusOr<std::string> cert = ReadPem("tls-cert", security.tls_cert);
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPem("tls-key", security.tls_key);
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = std::move(*cert);
      ssl.pem_private_key = std::move(*key);
    }
    credentials = grpc::SslCredentials(ssl);
  }
  std::string api_key = security.api_key;
  if (const char* env = std::getenv("RANKD_API_KEY"); api_key.empty() && env != nullptr) {
    api_key = env;
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!api_key.empty()) {
    interceptors.push_back(std::make_unique<ApiKeyInterceptorFactory>(api_key));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, credentials, args,
                                                                 std::move(interceptors));
}

}  // namespace rankd::client
