// ToProtoRequest: a parsed request line as a rankd.v1.ScoreRequest.
#include "request_proto.h"

namespace rankd::client {

v1::ScoreRequest ToProtoRequest(const cli::RequestLine& line) {
  v1::ScoreRequest req;
  req.set_query(line.query);
  if (line.query_ids)
    req.mutable_query_ids()->Assign(line.query_ids->begin(), line.query_ids->end());
  for (const cli::RequestItem& item : line.items) {
    v1::Item* out = req.add_items();
    switch (item.kind) {
      case cli::RequestItem::Kind::kText:
        out->set_text(item.text);
        break;
      case cli::RequestItem::Kind::kTokenIds:
        out->mutable_token_ids()->mutable_ids()->Assign(item.token_ids.begin(),
                                                        item.token_ids.end());
        break;
      case cli::RequestItem::Kind::kEmbedding:
        out->mutable_embedding()->set_rows(item.embedding_rows);
        out->mutable_embedding()->mutable_values()->Assign(item.embedding.begin(),
                                                           item.embedding.end());
        break;
    }
    out->set_id(item.id);
  }
  req.set_model(line.model);
  req.set_apply_sigmoid(line.apply_sigmoid);
  req.set_priority(static_cast<v1::Priority>(line.priority));
  req.set_request_id(line.request_id);
  req.set_depth(line.depth);
  req.set_skip_cache(line.skip_cache);
  req.set_truncate(static_cast<v1::Truncate>(line.truncate));
  return req;
}

}  // namespace rankd::client
