// The protocol floor: what the front end (src/server, rankd_server) and the workers (src/worker,
// rankd_worker) agree on, so that each depends on this and neither on the other. It owns:
//   - the worker service, rankd/internal/worker.proto (rankd.worker.v1: WorkItem, WorkResult,
//     Ping), generated into rankd_proto;
//   - the request limits both check (limits.h);
//   - what a worker is given to start (WorkerSetup: its model, engine and limits, nothing else of
//     the front end's config);
//   - the rules of the wire both sides read alike: the message size limit, a request's truncation
//     mode, and a worker's errors with their field and item as data (FieldError, in gRPC's error
//     details), so that the front end renames a work item's item to the caller's without reading
//     the message.
// It includes nothing of rankd/server or rankd/worker.
#ifndef RANKD_PROTOCOL_PROTOCOL_H_
#define RANKD_PROTOCOL_PROTOCOL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "rankd/engine/options.h"
#include "rankd/protocol/limits.h"
#include "rankd/v1/scorer.pb.h"

namespace rankd::protocol {

// What a worker process needs of the front end's config, and all it gets: the model it serves
// and the engine it builds for it, and the limits it checks its work items against.
struct WorkerSetup {
  std::string model_name;  // the served name (Ping answers it)
  // model::ModelIdentity the front end started with ("sha256:" and 16 hex digits): a worker
  // refuses to serve a directory that holds another model (rankd/worker/worker.h).
  std::string model_identity;
  engine::EngineOptions engine;  // the worker sets its device
  Limits limits;

  bool operator==(const WorkerSetup&) const = default;
};

// A worker's error as the Worker service answers it: code and message, and its FieldError
// (rankd/common/field_error.h), if any, in the error details.
grpc::Status ToWorkerStatus(const absl::Status& status);
// The worker's answer on the front end: the status with its FieldError attached again.
absl::Status FromWorkerStatus(const grpc::Status& status);

// The largest message rankd's gRPC servers accept, the front end's (limits.max_message_bytes) and
// the workers' (--max-message-bytes, the same value): well above the limit, so that a request
// somewhat over it is answered INVALID_ARGUMENT naming the limit (gRPC itself answers
// RESOURCE_EXHAUSTED above this), and so that a valid request wrapped in a work item fits.
int TransportMessageLimit(int64_t max_message_bytes);

// Whether `request` is cut to its limits (TRUNCATE_END) or refused when over them: TRUNCATE_END
// when it asks for it or limits.truncate is end. The front end's validation and result cache key
// and the worker's cut all read the mode here.
bool TruncatesAtEnd(const rankd::v1::ScoreRequest& request, const Limits& limits);

}  // namespace rankd::protocol

#endif  // RANKD_PROTOCOL_PROTOCOL_H_
