// The pool room (src/server/pool): the worker processes as the front end sees them.
//   worker_pool.h        admission (deadline, queue wait, answer budget), traffic shaping,
//                        dispatch to the least-loaded worker, retry when a worker dies
//   cost_estimator.h     deadline admission's estimate of a work item's cost
//   worker_supervisor.h  spawn, ping, reap, restart, stop (and the launcher, `rankd worker`)
//   worker_plan.h        which workers to start (GPUs, CPUs), their command line
// It speaks to the workers in the protocol (rankd/protocol/protocol.h) only. May include: config,
// metrics, process, protocol; never call, grpc or http.
#ifndef RANKD_SERVER_POOL_POOL_H_
#define RANKD_SERVER_POOL_POOL_H_

#include "rankd/server/pool/cost_estimator.h"
#include "rankd/server/pool/worker_plan.h"
#include "rankd/server/pool/worker_pool.h"
#include "rankd/server/pool/worker_supervisor.h"

#endif  // RANKD_SERVER_POOL_POOL_H_
