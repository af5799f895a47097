// Work: what a worker call carries of the caller's request.
#include "rankd/server/worker_pool.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rankd/worker/protocol.h"

namespace rankd::server {
namespace {

rankd::v1::ScoreRequest Request(int items) {
  rankd::v1::ScoreRequest r;
  r.set_query("who wrote it");
  r.set_apply_sigmoid(true);
  r.set_priority(rankd::v1::PRIORITY_BATCH);
  r.set_request_id("req-1");
  r.set_depth(items - 1);
  for (int i = 0; i < items; ++i) r.add_items()->set_text(absl::StrCat("item ", i));
  return r;
}

void NoDone(const grpc::Status&, Work&) {}

TEST(WorkTest, WholeRequestPointsAtTheCallersRequest) {
  const rankd::v1::ScoreRequest request = Request(10);
  {
    Work work(&request, 0, 9, true, WallTime::max(), Work::Carry::kWholeRequest, NoDone);
    EXPECT_EQ(&work.worker_item().request(), &request);
    EXPECT_EQ(work.worker_item().begin(), 0);
    EXPECT_EQ(work.worker_item().end(), 9);
    EXPECT_EQ(work.begin(), 0);
    EXPECT_EQ(work.end(), 9);
    EXPECT_EQ(work.num_items(), 9);
  }
  EXPECT_EQ(request.items_size(), 10);  // detached, not freed
}

TEST(WorkTest, OwnItemsCarriesOnlyItsItemsAndWhatTheWorkerReads) {
  rankd::v1::ScoreRequest request = Request(10);
  request.clear_query();
  request.add_query_ids(1);
  request.add_query_ids(7);
  {
    Work work(&request, 3, 6, false, WallTime::max(), Work::Carry::kOwnItems, NoDone);
    const rankd::worker::v1::WorkItem& sent = work.worker_item();
    EXPECT_EQ(sent.begin(), 0);
    EXPECT_EQ(sent.end(), 3);
    ASSERT_EQ(sent.request().items_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(&sent.request().items(i), &request.items(3 + i));  // pointed at, not copied
    }
    EXPECT_EQ(sent.request().query_ids_size(), 2);
    EXPECT_EQ(sent.request().query_ids(1), 7);
    EXPECT_TRUE(sent.request().apply_sigmoid());
    EXPECT_EQ(sent.request().priority(), rankd::v1::PRIORITY_BATCH);
    EXPECT_EQ(work.begin(), 3);
    EXPECT_EQ(work.end(), 6);
    EXPECT_EQ(work.num_items(), 3);
    // What goes over the socket parses back to the same items.
    rankd::worker::v1::WorkItem parsed;
    ASSERT_TRUE(parsed.ParseFromString(sent.SerializeAsString()));
    ASSERT_EQ(parsed.request().items_size(), 3);
    EXPECT_EQ(parsed.request().items(2).text(), "item 5");
  }
  // The caller's items are detached again, not freed.
  ASSERT_EQ(request.items_size(), 10);
  EXPECT_EQ(request.items(4).text(), "item 4");
}

TEST(WorkTest, OwnItemsCopiesTheQuery) {
  const rankd::v1::ScoreRequest request = Request(4);
  Work work(&request, 0, 2, true, WallTime::max(), Work::Carry::kOwnItems, NoDone);
  EXPECT_EQ(work.worker_item().request().query(), "who wrote it");
  EXPECT_EQ(work.worker_item().request().items_size(), 2);
}

TEST(ShiftItemIndexTest, MovesTheLeadingItemIndexOnly) {
  using rankd::worker::ShiftItemIndex;
  EXPECT_EQ(ShiftItemIndex("items[1].text: 200 tokens", 9), "items[10].text: 200 tokens");
  EXPECT_EQ(ShiftItemIndex("items[0]: no content", 3), "items[3]: no content");
  EXPECT_EQ(ShiftItemIndex("items[1].text: 200 tokens", 0), "items[1].text: 200 tokens");
  EXPECT_EQ(ShiftItemIndex("items: 5000 tokens", 9), "items: 5000 tokens");
  EXPECT_EQ(ShiftItemIndex("query: see items[1]", 9), "query: see items[1]");
  EXPECT_EQ(ShiftItemIndex("items[x]: odd", 9), "items[x]: odd");
}

}  // namespace
}  // namespace rankd::server
