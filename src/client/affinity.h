// Query affinity: the `x-rankd-affinity` request header, which rankd-client, rankd-bench load,
// the Python example and the docs' snippets send so that a balancer in front of many rankd
// servers sends every request for one query to the same server (consistent hashing with bounded
// load: docker/haproxy.cfg, docker/k8s/envoy.yaml), where its result cache and prefix cache hold
// that query's work. Library rankd_client_affinity.
//
// The value is what any client computes with its standard library: the lowercase hex of the first
// 8 bytes of SHA-256 over the query's UTF-8 text (ScoreRequest.query, the JSON API's "query"), or,
// for a prefix given as token ids (ScoreRequest.query_ids), over the ids in decimal separated by
// single spaces ("1 15043 3186"). Shell: printf %s "$query" | sha256sum | cut -c1-16.
#ifndef RANKD_CLIENT_AFFINITY_H_
#define RANKD_CLIENT_AFFINITY_H_

#include <string>

#include "absl/strings/string_view.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::client {

inline constexpr char kAffinityHeader[] = "x-rankd-affinity";

// The header's value for a query text: 16 lowercase hex digits.
std::string AffinityKey(absl::string_view query_text);
// The header's value for a request: of its query_ids when it has them, else of its query.
std::string AffinityKey(const v1::ScoreRequest& request);

}  // namespace rankd::client

#endif  // RANKD_CLIENT_AFFINITY_H_
