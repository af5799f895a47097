// rankd-client's adapter from a parsed request line (rankd/cli/request_line.h) to the
// rankd.v1.ScoreRequest it sends.
#ifndef RANKD_CLIENT_REQUEST_PROTO_H_
#define RANKD_CLIENT_REQUEST_PROTO_H_

#include "rankd/cli/request_line.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::client {

// Every field of the line, field for field; embedding rows become Embedding.rows.
v1::ScoreRequest ToProtoRequest(const cli::RequestLine& line);

}  // namespace rankd::client

#endif  // RANKD_CLIENT_REQUEST_PROTO_H_
