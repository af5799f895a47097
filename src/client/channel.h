// How rankd-client and rankd-bench load reach a `rankd serve` that has TLS or API keys: the
// flags (--tls-ca, --tls-cert, --tls-key, --api-key / RANKD_API_KEY) and the one function that
// makes their channels. Library rankd_client_channel.
#ifndef RANKD_CLIENT_CHANNEL_H_
#define RANKD_CLIENT_CHANNEL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "rankd/cli/flag_set.h"

namespace rankd::client {

struct ChannelSecurity {
  std::string tls_ca;    // PEM CA bundle to verify the server with; set: TLS
  std::string tls_cert;  // PEM client certificate (mutual TLS), with tls_key
  std::string tls_key;
  // Sent as `authorization: Bearer KEY` on every call; empty: $RANKD_API_KEY, if set.
  std::string api_key;
};

// Adds the four flags (--api-key left empty falls back to $RANKD_API_KEY in CreateChannel, so
// that --help does not print the key).
void AddChannelSecurityFlags(cli::FlagSet& flags, ChannelSecurity* security);

// A channel to `target`: TLS when tls_ca is set (errors name the flag of a file that cannot be
// read), the API key (or $RANKD_API_KEY) added to every call's metadata.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& target,
                                                             const ChannelSecurity& security,
                                                             const grpc::ChannelArguments& args);

}  // namespace rankd::client

#endif  // RANKD_CLIENT_CHANNEL_H_
