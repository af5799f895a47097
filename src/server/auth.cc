// ApiKeys: the key file, the credentials a call presents and the constant-time comparison
// (rankd/server/auth.h).
#include "rankd/server/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace rankd::server {
namespace {

constexpr char kKey[] = "server.auth.api_keys_file";
constexpr absl::string_view kScheme = "Bearer";
constexpr absl::string_view kByteOrderMark = "\xEF\xBB\xBF";
constexpr absl::string_view kHowToSend = "send one 'authorization: Bearer KEY'";

// RFC 6750's b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
bool IsB64Token(absl::string_view s) {
  size_t i = 0;
  constexpr absl::string_view kPunctuation = "-._~+/";
  while (i < s.size() &&
         (absl::ascii_isalnum(s[i]) || kPunctuation.find(s[i]) != absl::string_view::npos)) {
    ++i;
  }
  if (i == 0) return false;
  while (i < s.size() && s[i] == '=') ++i;
  return i == s.size();
}

}  // namespace

absl::StatusOr<absl::string_view> BearerKey(absl::string_view credentials) {
  if (credentials.size() < kScheme.size() ||
      !absl::EqualsIgnoreCase(credentials.substr(0, kScheme.size()), kScheme)) {
    return absl::InvalidArgumentError("the scheme is not Bearer");
  }
  absl::string_view key = credentials.substr(kScheme.size());
  if (!absl::ConsumePrefix(&key, " ")) {
    return absl::InvalidArgumentError("no space after Bearer");
  }
  while (absl::ConsumePrefix(&key, " ")) {
  }
  if (!IsB64Token(key)) {
    return absl::InvalidArgumentError(
        "the key is empty, or holds or is followed by a character a key cannot hold (letters, "
        "digits, - . _ ~ + / and = padding)");
  }
  return key;
}

absl::StatusOr<std::vector<ApiKeys::Digest>> ApiKeys::Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKey, " ", path, ": cannot open: ", std::strerror(errno)));
  }
  std::vector<Digest> digests;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = line;
    if (number == 1) absl::ConsumePrefix(&text, kByteOrderMark);
    const absl::string_view key = absl::StripAsciiWhitespace(text);
    if (key.empty() || key.front() == '#') continue;
    // The line's text is never quoted: it may be a key with a typo in it.
    if (!IsB64Token(key)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kKey, " ", path, ": line ", number,
          " is not a key: a key is one word of letters, digits, - . _ ~ + / (and = padding), "
          "alone on its line (comments go on lines of their own, starting with #)"));
    }
    if (key.size() < kMinKeyLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(kKey, " ", path, ": line ", number, ": a key of ", key.size(),
                       " characters; keys need at least ", kMinKeyLength));
    }
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

absl::Status ApiKeys::Check(absl::Span<const absl::string_view> authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("no API key: ", kHowToSend));
  }
  if (authorization.size() > 1) {
    return absl::UnauthenticatedError(
        absl::StrCat(authorization.size(), " authorization values: ", kHowToSend));
  }
  absl::StatusOr<absl::string_view> key = BearerKey(authorization[0]);
  if (!key.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("malformed authorization (", key.status().message(), "): ", kHowToSend));
  }
  Digest presented;
  SHA256(reinterpret_cast<const unsigned char*>(key->data()), key->size(), presented.data());
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
  if (!match) return absl::UnauthenticatedError("API key not accepted");
  return absl::OkStatus();
}

size_t ApiKeys::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return digests_->size();
}

}  // namespace rankd::server
