// The call room (src/server/call): what happens to one Score call on the front end before and
// after a worker sees it, each in one place:
//   validation.h     the request checked once, against the limits and the served model
//   result_cache.h   (query, item) -> score: hits answered without a worker
//   depth_controller.h  how many candidates get scored (depth 0), to hold a p99 target
//   answer_budget.h  the bytes the answers in progress may hold, reserved at admission
// The call itself (ScoreCall: validate, look up, dispatch to the pool, answer) is driven by the
// gRPC service (grpc/scorer_service.h), which the HTTP routes call too. May include: config,
// metrics, protocol; never grpc, http or pool.
#ifndef RANKD_SERVER_CALL_CALL_H_
#define RANKD_SERVER_CALL_CALL_H_

#include "rankd/server/call/answer_budget.h"
#include "rankd/server/call/depth_controller.h"
#include "rankd/server/call/result_cache.h"
#include "rankd/server/call/validation.h"

#endif  // RANKD_SERVER_CALL_CALL_H_
