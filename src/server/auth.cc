// ApiKeys: the key file and the constant-time comparison (rankd/server/auth.h).
#include "rankd/server/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace rankd::server {
namespace {

constexpr char kKey[] = "server.auth.api_keys_file";
constexpr absl::string_view kBearer = "Bearer ";

}  // namespace

absl::StatusOr<std::vector<ApiKeys::Digest>> ApiKeys::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKey, " ", path, ": cannot open: ", std::strerror(errno)));
  }
  std::vector<Digest> digests;
  std::string line;
  while (std::getline(in, line)) {
    const absl::string_view key = absl::StripAsciiWhitespace(line);
    if (key.empty() || key.front() == '#') continue;
    Digest d;
    SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), d.data());
    digests.push_back(d);
  }
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(kKey, " ", path, ": read error"));
  if (digests.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kKey, " ", path, ": holds no key (one per line; blank lines and # comments ignored)"));
  }
  return digests;
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& path) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys(path));
  if (absl::Status s = keys->Reload(); !s.ok()) return s;
  return keys;
}

absl::Status ApiKeys::Reload() {
  absl::StatusOr<std::vector<Digest>> digests = Read(path_);
  if (!digests.ok()) return digests.status();
  auto fresh = std::make_shared<const std::vector<Digest>>(std::move(*digests));
  std::lock_guard<std::mutex> lock(mu_);
  digests_ = std::move(fresh);
  return absl::OkStatus();
}

bool ApiKeys::Accepts(absl::string_view authorization) const {
  if (!absl::StartsWith(authorization, kBearer)) return false;
  const absl::string_view key = authorization.substr(kBearer.size());
  Digest presented;
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), presented.data());
  std::shared_ptr<const std::vector<Digest>> digests;
  {
    std::lock_guard<std::mutex> lock(mu_);
    digests = digests_;
  }
  // Every digest is compared, so the time taken does not say which key (if any) matched.
  bool match = false;
  for (const Digest& d : *digests) {
    match |= CRYPTO_memcmp(d.data(), presented.data(), d.size()) == 0;
  }
  return match;
}

size_t ApiKeys::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return digests_->size();
}

}  // namespace rankd::server
