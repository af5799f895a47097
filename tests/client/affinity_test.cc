// The x-rankd-affinity value, pinned on a few queries: the same digits as
// `printf %s "$query" | sha256sum | cut -c1-16` and examples/python/rankd_affinity.py
// (affinity_test.py pins the same values), so that every client routes a query alike.
#include "affinity.h"

#include <gtest/gtest.h>

namespace rankd::client {
namespace {

TEST(AffinityTest, FirstEightBytesOfSha256InLowercaseHex) {
  EXPECT_EQ(AffinityKey("senior python engineer in berlin"), "b24e1fb9182dd497");
  EXPECT_EQ(AffinityKey(""), "e3b0c44298fc1c14");
  EXPECT_EQ(AffinityKey("caf\xc3\xa9"), "850f7dc43910ff89");  // "café": its UTF-8 bytes
}

TEST(AffinityTest, RequestsHashTheirQueryOrTheirQueryIds) {
  v1::ScoreRequest text;
  text.set_query("senior python engineer in berlin");
  text.add_items()->set_text("an item does not change it");
  EXPECT_EQ(AffinityKey(text), "b24e1fb9182dd497");
  v1::ScoreRequest ids;
  for (int id : {1, 15043, 3186}) ids.add_query_ids(id);
  EXPECT_EQ(AffinityKey(ids), "ec06b0e2d2742447");  // of "1 15043 3186"
  EXPECT_EQ(AffinityKey(ids), AffinityKey("1 15043 3186"));
}

}  // namespace
}  // namespace rankd::client
