// The gRPC port's credentials: TLS files, the core credentials, the API key processor
// (rankd/server/grpc/credentials.h).
#include "rankd/server/grpc/credentials.h"

#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rankd/common/status.h"

namespace rankd::server {
namespace {

// Calls of these services need no key: probes must reach them.
constexpr absl::string_view kOpenPathPrefix = "/grpc.health.v1.Health/";

absl::string_view View(const grpc_slice& s) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)),
                           GRPC_SLICE_LENGTH(s));
}

struct BioCloser {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Closer {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyCloser {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioCloser>;
using Cert = std::unique_ptr<X509, X509Closer>;
using Key = std::unique_ptr<EVP_PKEY, KeyCloser>;

absl::StatusOr<Bio> OpenPem(const std::string& key, const std::string& path) {
  errno = 0;
  Bio bio(BIO_new_file(path.c_str(), "r"));
  if (bio == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(key, " ", path, ": cannot read (",
                                                   std::strerror(errno ? errno : ENOENT), ")"));
  }
  return bio;
}

absl::StatusOr<Cert> ReadCert(const std::string& key, const std::string& path) {
  RANKD_ASSIGN_OR_RETURN(Bio bio, OpenPem(key, path));
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(key, " ", path, ": holds no PEM certificate"));
  }
  return cert;
}

// The start-up checks of server.tls (gRPC's watcher would only log a bad file and fail every
// handshake).
absl::Status CheckTlsFiles(const TlsSection& tls) {
  RANKD_ASSIGN_OR_RETURN(Cert cert, ReadCert("server.tls.cert_file", tls.cert_file));
  RANKD_ASSIGN_OR_RETURN(Bio bio, OpenPem("server.tls.key_file", tls.key_file));
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("server.tls.key_file ", tls.key_file,
                                                   ": holds no PEM private key (unencrypted)"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("server.tls.key_file ", tls.key_file,
                                                   ": does not match server.tls.cert_file ",
                                                   tls.cert_file));
  }
  if (!tls.client_ca_file.empty()) {
    RANKD_RETURN_IF_ERROR(ReadCert("server.tls.client_ca_file", tls.client_ca_file).status());
  }
  return absl::OkStatus();
}

// The API key check on every call's initial metadata, inside gRPC before any service. `state`:
// a heap-held shared_ptr<const ApiKeys>. Answers at once (no blocking work).
void ProcessAuthMetadata(void* state, grpc_auth_context*, const grpc_metadata* md, size_t num_md,
                         grpc_process_auth_metadata_done_cb done, void* user_data) {
  const ApiKeys& keys = **static_cast<std::shared_ptr<const ApiKeys>*>(state);
  absl::string_view path;
  std::vector<absl::string_view> authorization;
  for (size_t i = 0; i < num_md; ++i) {
    const absl::string_view name = View(md[i].key);
    if (name == ":path") path = View(md[i].value);
    if (name == "authorization") authorization.push_back(View(md[i].value));
  }
  const absl::Status checked = keys.Check(authorization);
  if (checked.ok()) {
    // Consumed: the key goes no further than this check (the one value: Check took no other).
    const grpc_metadata* consumed = nullptr;
    for (size_t i = 0; i < num_md && consumed == nullptr; ++i) {
      if (View(md[i].key) == "authorization") consumed = &md[i];
    }
    done(user_data, consumed, 1, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else if (absl::StartsWith(path, kOpenPathPrefix)) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    const std::string message(checked.message());
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED, message.c_str());
  }
}

void DestroyAuthState(void* state) { delete static_cast<std::shared_ptr<const ApiKeys>*>(state); }

// grpc::ServerCredentials over core credentials that rankd configured itself.
class CoreServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit CoreServerCredentials(grpc_server_credentials* core) : core_(core) {}
  ~CoreServerCredentials() override { grpc_server_credentials_release(core_); }

  // The key processor is set on the core credentials at construction (MakeServerCredentials);
  // a C++ AuthMetadataProcessor has no place here.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), core_);
  }

  grpc_server_credentials* const core_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSection& server, std::shared_ptr<const ApiKeys> keys) {
  const TlsSection& tls = server.tls;
  grpc_server_credentials* core = nullptr;
  if (tls.cert_file.empty()) {
    core = grpc_insecure_server_credentials_create();
  } else {
    RANKD_RETURN_IF_ERROR(CheckTlsFiles(tls));
    const bool mutual = !tls.client_ca_file.empty();
    grpc_tls_certificate_provider* provider = grpc_tls_certificate_provider_file_watcher_create(
        tls.key_file.c_str(), tls.cert_file.c_str(), mutual ? tls.client_ca_file.c_str() : nullptr,
        static_cast<unsigned>(tls.refresh_interval_s));
    grpc_tls_credentials_options* options = grpc_tls_credentials_options_create();
    grpc_tls_credentials_options_set_certificate_provider(options, provider);  // takes a ref
    grpc_tls_certificate_provider_release(provider);
    grpc_tls_credentials_options_watch_identity_key_cert_pairs(options);
    if (mutual) {
      grpc_tls_credentials_options_watch_root_certs(options);
      grpc_tls_credentials_options_set_cert_request_type(
          options, GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    }
    core = grpc_tls_server_credentials_create(options);  // owns `options`
  }
  if (keys != nullptr) {
    grpc_server_credentials_set_auth_metadata_processor(
        core, {ProcessAuthMetadata, DestroyAuthState,
               new std::shared_ptr<const ApiKeys>(std::move(keys))});
  }
  return std::make_shared<CoreServerCredentials>(core);
}

}  // namespace rankd::server
