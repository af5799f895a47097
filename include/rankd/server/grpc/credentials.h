// The gRPC port's credentials from server.tls and server.auth: plaintext or TLS (mutual TLS with
// server.tls.client_ca_file), the certificate files re-read every server.tls.refresh_interval_s
// (gRPC's file watcher: new connections get the new certificate, open ones keep theirs), and,
// with API keys, a metadata processor that answers UNAUTHENTICATED before a call reaches any
// service unless it carries `authorization: Bearer KEY` (grpc.health.v1.Health stays open).
//
// The processor is installed on gRPC's core credentials (insecure or TLS) directly: the C++
// AuthMetadataProcessor cannot be set on InsecureServerCredentials(), and server interceptors
// cannot refuse a call with a status of their own.
#ifndef RANKD_SERVER_CREDENTIALS_H_
#define RANKD_SERVER_CREDENTIALS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "rankd/server/auth.h"
#include "rankd/server/config/config.h"

namespace rankd::server {

// Checks the TLS files first (readable PEM, the key matches the certificate, the CA bundle
// holds a certificate): errors name the key, e.g. "server.tls.key_file PATH: does not match
// server.tls.cert_file PATH". `keys` null: no key required. The credentials keep `keys`.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSection& server, std::shared_ptr<const ApiKeys> keys);

}  // namespace rankd::server

#endif  // RANKD_SERVER_CREDENTIALS_H_
