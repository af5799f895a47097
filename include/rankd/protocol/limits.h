// Limits: what one Score request may hold (YAML section `limits` of the serve config,
// docs/config.md). The front end checks a request against them before anything is queued, and
// each worker checks and cuts its work items against the same values (rankd/worker/worker.h's
// PrepareWorkItem): they are part of the contract between the two (protocol.h), not of either.
#ifndef RANKD_PROTOCOL_LIMITS_H_
#define RANKD_PROTOCOL_LIMITS_H_

#include <cstdint>

namespace rankd::protocol {

struct Limits {
  int max_items = 1000;                  // items per request
  int max_query_tokens = 512;            // prefix tokens (template and BOS included)
  int max_item_tokens = 512;             // tokens (or embedding rows) per item
  int64_t max_request_tokens = 262144;   // item tokens per request (per chunk for ScoreStream)
  int64_t max_message_bytes = 16 << 20;  // serialized ScoreRequest
  // Bytes of one echoed id: each item's id and the request_id; at least kMinIdBytes.
  int64_t max_id_bytes = 1024;
  static constexpr int64_t kMinIdBytes = 128;
  // Bytes one call's answer may take (AnswerBytes, its ids included), reserved at admission.
  int64_t max_answer_bytes = int64_t{4} << 20;
  // Text bytes of one item and of the query, checked by the front end before anything is queued
  // (TRUNCATE_END: not refused, the worker tokenizes that many bytes at most). 0: derived from the
  // token limit, kMaxBytesPerToken bytes per token (ItemByteLimit / QueryByteLimit).
  int64_t max_item_bytes = 0;
  int64_t max_query_bytes = 0;
  // The bytes per token that no real tokenizer's tokens exceed on average over text of hundreds
  // of tokens: natural text runs 3-6 bytes per token (CJK 2-4, code 3-4), so 32 is 5x above the
  // densest; only degenerate text (long runs of one character that a vocabulary merges into long
  // tokens) can need more, and an operator who must take it sets the byte limits explicitly.
  static constexpr int64_t kMaxBytesPerToken = 32;
  int64_t ItemByteLimit() const {
    return max_item_bytes > 0 ? max_item_bytes : kMaxBytesPerToken * max_item_tokens;
  }
  int64_t QueryByteLimit() const {
    return max_query_bytes > 0 ? max_query_bytes : kMaxBytesPerToken * max_query_tokens;
  }
  // limits.truncate: kEnd makes TRUNCATE_END the default of requests that leave `truncate` at
  // TRUNCATE_NONE (protocol.h's TruncatesAtEnd decides a request's mode).
  enum class Truncate { kNone, kEnd };
  Truncate truncate = Truncate::kNone;

  bool operator==(const Limits&) const = default;
};

}  // namespace rankd::protocol

#endif  // RANKD_PROTOCOL_LIMITS_H_
