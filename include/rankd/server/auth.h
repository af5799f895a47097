// API keys of `rankd serve` (server.auth.api_keys_file), and the one reader of the credentials a
// call presents, used by both transports: the gRPC port (credentials.h's key processor) and HTTP
// (the JSON API and /metrics). Only SHA-256 digests of the keys are kept, and a presented key is
// compared with every one in constant time, so neither memory dumps of the set nor timing give a
// key away; no key is logged, and no error quotes one.
//
// What a call presents (RFC 6750 section 2.1): exactly one `authorization` value (gRPC metadata,
// HTTP header), `Bearer` in any case, one or more spaces, then the key, and nothing after it.
// Two values are refused whatever they hold (no transport picks one). HTTP/1.1 drops the blanks
// around a header value before rankd sees it (RFC 9110 section 5.5: they are not part of it);
// gRPC metadata is HTTP/2, where a value that ends in a blank is malformed (RFC 9113 section
// 8.2.1): refused.
//
// The keys file (docs/config.md, server.auth.api_keys_file): UTF-8 text, one key per line; a line
// that is blank or starts with # is ignored; blanks around a key are trimmed (so CRLF files read as
// LF files); a UTF-8 byte-order mark at the start of the file is skipped. A key is at least
// kMinKeyLength characters, all of RFC 6750's b64token (letters, digits, - . _ ~ + /, then =
// padding: what `Bearer KEY` can carry). Any other line (a comment after a key, a blank inside
// one, a short key) refuses the whole file, naming the line (not its text).
//
// Threading: Check and Reload may be called from any thread, concurrently.
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
#include "absl/types/span.h"

namespace rankd::server {

// The key of credentials `Bearer KEY` (RFC 6750 section 2.1), or INVALID_ARGUMENT saying what is
// wrong with them (never quoting them).
absl::StatusOr<absl::string_view> BearerKey(absl::string_view credentials);

class ApiKeys {
 public:
  // 16 characters of b64token carry at least 96 bits when drawn at random (`openssl rand -hex 24`
  // makes 48); shorter keys are guessable or typed by hand.
  static constexpr size_t kMinKeyLength = 16;

  // Reads `path` (the format above). Errors name server.auth.api_keys_file and, for a bad line,
  // its number: unreadable, a line that is not a key, or no key at all.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path);

  // Reads the file again; on error the keys in use stay and the error is returned.
  absl::Status Reload();

  // `authorization`: every authorization value the call carries, as its transport received them.
  // OK when there is exactly one, `Bearer KEY` with KEY one of the keys; else UNAUTHENTICATED
  // saying why (no key, several values, malformed, not accepted), for the caller's answer.
  absl::Status Check(absl::Span<const absl::string_view> authorization) const;

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
