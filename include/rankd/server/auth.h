// API keys of `rankd serve` (server.auth.api_keys_file): the one check of an `authorization:
// Bearer KEY` value, used by the gRPC port (credentials.h's key processor) and by /metrics.
// Only SHA-256 digests of the keys are kept, and a presented key is compared with every one in
// constant time, so neither memory dumps of the set nor timing give a key away; no key is logged.
//
// Threading: Accepts and Reload may be called from any thread, concurrently.
#ifndef RANKD_SERVER_AUTH_H_
#define RANKD_SERVER_AUTH_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rankd::server {

class ApiKeys {
 public:
  // Reads `path`: one key per line, surrounding blanks trimmed, blank lines and lines starting
  // with # ignored. Errors name server.auth.api_keys_file: unreadable, or no key in it.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path);

  // Reads the file again; on error the keys in use stay and the error is returned.
  absl::Status Reload();

  // True when `authorization` is "Bearer KEY" with KEY one of the keys.
  bool Accepts(absl::string_view authorization) const;

  size_t size() const;

 private:
  using Digest = std::array<uint8_t, 32>;  // SHA-256 of a key
  explicit ApiKeys(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<std::vector<Digest>> Read(const std::string& path);

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const std::vector<Digest>> digests_;  // guarded by mu_ (the pointer)
};

}  // namespace rankd::server

#endif  // RANKD_SERVER_AUTH_H_
