// The gRPC room (src/server/grpc): rankd.v1.Scorer as served on server.listen.
//   scorer_service.h    Score and ScoreStream (ScoreCall: validated, cached, dispatched)
//   tokenize_service.h  Tokenize, on the front end's own TextEncoder
//   credentials.h       the port's TLS and API keys (server.tls, server.auth)
//   listener_watchdog.h whether the port still accepts connections
// serve.cc registers these with the health and reflection services. May include: call, config,
// pool, metrics, auth, protocol; never http.
#ifndef RANKD_SERVER_GRPC_GRPC_H_
#define RANKD_SERVER_GRPC_GRPC_H_

#include "rankd/server/grpc/credentials.h"
#include "rankd/server/grpc/listener_watchdog.h"
#include "rankd/server/grpc/scorer_service.h"
#include "rankd/server/grpc/tokenize_service.h"

#endif  // RANKD_SERVER_GRPC_GRPC_H_
