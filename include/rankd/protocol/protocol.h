// The protocol floor: what the front end (src/server, rankd_server) and the workers (src/worker,
// rankd_worker) agree on, so that each depends on this and neither on the other. It owns:
//   - the worker service, rankd/internal/worker.proto (rankd.worker.v1: WorkItem, WorkResult,
//     Ping), generated into rankd_proto;
//   - the request limits both check (limits.h);
//   - what a worker is given to start (WorkerSetup: its model, engine and limits, nothing else of
//     the front end's config);
//   - the rules of the wire both sides read alike: the message size limit, a request's truncation
//     mode, and how an item index of a work item's list maps to the caller's request.
// It includes nothing of rankd/server or rankd/worker.
#ifndef RANKD_PROTOCOL_PROTOCOL_H_
#define RANKD_PROTOCOL_PROTOCOL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
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

// An error message that names an item by its index in some list of items ("items[3].text: ...")
// with that index replaced by `map(index)`: for a list that holds some of the caller's items,
// errors name items by their index in the caller's request. Other messages as they are.
std::string MapItemIndex(absl::string_view message, const std::function<int(int)>& map);

// MapItemIndex for a list that starts at item `offset` of the caller's request.
std::string ShiftItemIndex(absl::string_view message, int offset);

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
