// AffinityKey: the x-rankd-affinity header's value (affinity.h).
#include "affinity.h"

#include <openssl/sha.h>

#include <array>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"

namespace rankd::client {

std::string AffinityKey(absl::string_view query_text) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> digest;
  SHA256(reinterpret_cast<const unsigned char*>(query_text.data()), query_text.size(),
         digest.data());
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest.data()), 8));
}

std::string AffinityKey(const v1::ScoreRequest& request) {
  if (request.query_ids_size() > 0) return AffinityKey(absl::StrJoin(request.query_ids(), " "));
  return AffinityKey(request.query());
}

}  // namespace rankd::client
