// A worker process (`rankd worker`): one engine, serving rankd.worker.v1.Worker on a Unix domain
// socket for the front end (`rankd serve`). Work items wait in the worker's queue (interactive
// before batch priority, each in arrival order); the engine thread takes as many as fit one engine
// step (step_scheduler.h; token budget: model.max_batch_tokens, so that its forward passes are
// full) and scores them together (Engine::ScoreMany), answering each as soon as its last forward
// pass is done. Pings are answered on gRPC's threads, so they measure whether the process is alive
// and responsive, not whether it is busy.
#ifndef RANKD_WORKER_WORKER_H_
#define RANKD_WORKER_WORKER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "rankd/engine/engine.h"
#include "rankd/internal/worker.pb.h"
#include "rankd/protocol/protocol.h"

namespace rankd::worker {

// What `rankd worker` is started with: its socket and index on the command line, and what it
// needs of the front end's finalized config (the file its --config names): the model, its engine
// and the limits (protocol.h).
struct WorkerOptions {
  std::string socket_path;
  int index = 0;
  protocol::WorkerSetup setup;
  // Waits up to `timeout` for a request to stop (SIGTERM / SIGINT); true when one came.
  std::function<bool(std::chrono::milliseconds timeout)> wait_for_stop;
};

// Prepares a work item once, into the request the engine scores as given: the prefix from
// query_ids or the templated query, and every item of the range packed into one batch (token ids,
// a text's ids as tokenized, embedding rows), each copied once from the request. The front end
// validated the request (rankd/server/call/validation.h: ids against the vocabulary, embedding
// values and sizes, and every limit of what it could count); this checks what only tokenization
// shows, against the same limits: a text query's tokens (max_query_tokens), a text's tokens
// (max_item_tokens; a text that encodes to none), the request's tokens with its texts'
// (max_request_tokens), and the model's context for the items whose length beside the prefix the
// front end could not know. Errors name the field and the limit, with item indices of the whole
// request (as data too: FieldError). With TRUNCATE_END (protocol.h's TruncatesAtEnd) it cuts
// instead of refusing, the one place that does for every kind: the prefix to max_query_tokens,
// each item to max_item_tokens and to what the model's context leaves after the prefix (text by
// Engine::CutQuery / CutTextItem, which keep the template's tail; query_ids, token ids and
// embedding rows to their first ones); each text is tokenized once. max_request_tokens counts the
// items as cut.
absl::StatusOr<engine::PreparedRequest> PrepareWorkItem(const engine::Engine& engine,
                                                        const rankd::worker::v1::WorkItem& work,
                                                        const protocol::Limits& limits);

// OK when the model directory (setup.engine.model_dir, model.dir) still holds
// setup.model_identity (model::ModelIdentity), the model the front end started with; else
// FAILED_PRECONDITION naming both: a worker that would load another model refuses to serve (it
// exits with the error, and stays down while the directory holds it).
absl::Status CheckModelIdentity(const protocol::WorkerSetup& setup);

// The engine a worker builds from `setup`: setup.engine on device 0 (a worker sees only its own
// GPU, through CUDA_VISIBLE_DEVICES).
engine::EngineOptions WorkerEngineOptions(const protocol::WorkerSetup& setup);

// Loads and warms up the engine, then serves on options.socket_path until wait_for_stop says so
// (or the parent process is gone). Work queued at that point is answered UNAVAILABLE.
absl::Status RunWorker(const WorkerOptions& options);

}  // namespace rankd::worker

#endif  // RANKD_WORKER_WORKER_H_
