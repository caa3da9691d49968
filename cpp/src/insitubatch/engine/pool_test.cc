#include "insitubatch/engine/pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

namespace insitubatch::engine {
namespace {

const auto kNever = [] { return false; };

std::shared_ptr<Slot> Admit(ChunkPool& pool, OwnerId owner, int64_t chunk, uint64_t bytes = 100,
                            Acquired expect = Acquired::kAdmitted, uint32_t tiles = 1) {
  std::shared_ptr<Slot> slot;
  auto r = pool.Acquire(owner, {0, chunk}, bytes, tiles, false, kNever, kNever, &slot);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) {
    EXPECT_EQ(*r, expect);
    if (*r == Acquired::kAdmitted) {
      auto prepared = pool.Prepare(slot, bytes, bytes, true);
      EXPECT_TRUE(prepared.ok() && !prepared->revived);
    }
  }
  return slot;
}

// Admits each of `chunks`, fills and unpins it: READY and evictable, in that LRU order.
void AdmitEvictable(ChunkPool& pool, OwnerId owner, std::initializer_list<int64_t> chunks) {
  for (int64_t c : chunks) {
    auto s = Admit(pool, owner, c);
    pool.TileDone(s, Status::Ok());
    pool.Unpin(owner, {0, c});
  }
}

TEST(ChunkPoolTest, AdmitFillHit) {
  ChunkPool pool(0);
  OwnerId a = pool.RegisterOwner();
  auto slot = Admit(pool, a, 3);
  EXPECT_EQ(slot->state, SlotState::kFilling);
  pool.TileDone(slot, Status::Ok());
  EXPECT_EQ(slot->state, SlotState::kReady);
  Admit(pool, a, 3, 100, Acquired::kHit);
  EXPECT_EQ(slot->total_pins, 2);
  auto ready = pool.WaitReady({0, 3}, kNever);
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->get(), slot.get());
}

TEST(ChunkPoolTest, EvictsLeastRecentlyUsedUnpinnedOnly) {
  ChunkPool pool(200);  // room for two 100-byte slots
  OwnerId a = pool.RegisterOwner();
  auto s0 = Admit(pool, a, 0);
  auto s1 = Admit(pool, a, 1);
  pool.TileDone(s0, Status::Ok());
  pool.TileDone(s1, Status::Ok());
  pool.Unpin(a, {0, 1});  // 1 unpinned first, then 0: LRU order 1, 0
  pool.Unpin(a, {0, 0});
  Admit(pool, a, 2);  // evicts chunk 1
  EXPECT_EQ(pool.counters().evictions, 1u);
  Admit(pool, a, 0, 100, Acquired::kHit);  // chunk 0 survived
  // Everything pinned now: a third admission parks; cancelled gives up.
  std::shared_ptr<Slot> slot;
  auto r = pool.Acquire(
      a, {0, 9}, 100, 1, false, [] { return true; }, kNever, &slot);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  r = pool.Acquire(
      a, {0, 9}, 100, 1, false, kNever, [] { return true; }, &slot);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(ChunkPoolTest, ParkedAdmissionResumesOnRelease) {
  ChunkPool pool(100);
  OwnerId a = pool.RegisterOwner();
  auto s0 = Admit(pool, a, 0);
  pool.TileDone(s0, Status::Ok());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    pool.Unpin(a, {0, 0});
  });
  Admit(pool, a, 1);  // waits for the release, then evicts chunk 0
  releaser.join();
  EXPECT_EQ(pool.counters().resident_slots, 1u);
}

TEST(ChunkPoolTest, EvictUnpinnedKeepsPinnedSlots) {
  ChunkPool pool(0);
  OwnerId a = pool.RegisterOwner();
  auto s0 = Admit(pool, a, 0);
  auto s1 = Admit(pool, a, 1);
  pool.TileDone(s0, Status::Ok());
  pool.TileDone(s1, Status::Ok());
  pool.Unpin(a, {0, 0});
  EXPECT_EQ(pool.EvictUnpinned(), 1u);
  EXPECT_EQ(pool.counters().resident_slots, 1u);
  Admit(pool, a, 1, 100, Acquired::kHit);
}

TEST(ChunkPoolTest, RefcountedPinsNeedMatchingUnpins) {
  ChunkPool pool(100);
  OwnerId a = pool.RegisterOwner();
  auto s0 = Admit(pool, a, 0);
  pool.TileDone(s0, Status::Ok());
  Admit(pool, a, 0, 100, Acquired::kHit);
  pool.Unpin(a, {0, 0});
  EXPECT_EQ(pool.CountPinned(), 1u);
  pool.Unpin(a, {0, 0});
  EXPECT_EQ(pool.CountPinned(), 0u);
}

TEST(ChunkPoolTest, OwnersDoNotReleaseEachOther) {
  ChunkPool pool(0);
  OwnerId a = pool.RegisterOwner();
  OwnerId b = pool.RegisterOwner();
  auto s0 = Admit(pool, a, 0);
  pool.TileDone(s0, Status::Ok());
  Admit(pool, b, 0, 100, Acquired::kHit);
  pool.ReleaseOwner(a);
  EXPECT_EQ(s0->total_pins, 1);
  pool.Unpin(a, {0, 0});  // a holds nothing anymore: no effect
  EXPECT_EQ(s0->total_pins, 1);
  pool.ReleaseOwner(b);
  EXPECT_EQ(pool.CountPinned(), 0u);
  EXPECT_EQ(pool.CountSlots(SlotState::kReady), 1u);  // READY stays resident: the cache
}

TEST(ChunkPoolTest, FailedSlotsWakeWaitersAndAreRefetched) {
  ChunkPool pool(0);
  OwnerId a = pool.RegisterOwner();
  auto s0 = Admit(pool, a, 0, 100, Acquired::kAdmitted, 2);
  pool.TileDone(s0, DataLoss("bad frame"));
  pool.TileDone(s0, Status::Ok());
  auto r = pool.WaitReady({0, 0}, kNever);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "bad frame");
  pool.ReleaseOwner(a);
  EXPECT_EQ(pool.CountSlots(SlotState::kFailed), 0u);  // not poisoning the next pass
  OwnerId b = pool.RegisterOwner();
  Admit(pool, b, 0, 100, Acquired::kAdmitted, 2);
}

TEST(ChunkPoolTest, ChunkLargerThanBudgetFailsClearly) {
  ChunkPool pool(50);
  std::shared_ptr<Slot> slot;
  auto r = pool.Acquire(pool.RegisterOwner(), {0, 0}, 100, 1, false, kNever, kNever, &slot);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST(ChunkPoolTest, FillingSlotNobodyPinsIsAbandonedAndItsReadsCancelled) {
  ChunkPool pool(0);
  OwnerId a = pool.RegisterOwner();
  OwnerId b = pool.RegisterOwner();
  auto alone = Admit(pool, a, 0);
  auto shared = Admit(pool, a, 1);
  Admit(pool, b, 1, 100, Acquired::kInFlight);
  pool.ReleaseOwner(a);
  EXPECT_TRUE(alone->cancel.cancelled());    // nobody needs it: its reads stop
  EXPECT_FALSE(shared->cancel.cancelled());  // b still waits for it
  EXPECT_EQ(pool.counters().resident_slots, 1u);
  pool.TileDone(alone, Cancelled("cancelled"));  // the late read is harmless
  pool.TileDone(shared, Status::Ok());
  EXPECT_TRUE(pool.WaitReady({0, 1}, kNever).ok());
  // A released owner cannot pin again (a scheduler racing its pass's close).
  std::shared_ptr<Slot> slot;
  auto late = pool.Acquire(a, {0, 5}, 100, 1, false, kNever, kNever, &slot);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kCancelled);
  pool.AbandonFilling();
  EXPECT_EQ(pool.CountSlots(SlotState::kFilling), 0u);
}

TEST(ChunkPoolTest, AnOwnersQuotaParksItRunningAhead) {
  ChunkPool pool(1000);
  OwnerId a = pool.RegisterOwner(/*quota_bytes=*/200);
  OwnerId b = pool.RegisterOwner(200);
  auto s0 = Admit(pool, a, 0);
  Admit(pool, a, 1);
  std::shared_ptr<Slot> slot;
  // Room in the budget, none in a's quota: a parks (here: gives up as stalled).
  auto over = pool.Acquire(
      a, {0, 2}, 100, 1, false, kNever, [] { return true; }, &slot);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  Admit(pool, b, 2);  // b's quota is its own
  pool.TileDone(s0, Status::Ok());
  pool.Unpin(a, {0, 0});
  Admit(pool, a, 3);  // a released one: room again
  // Pinning a slot already resident does not count twice for one owner.
  Admit(pool, a, 1, 100, Acquired::kInFlight);
  pool.GrowBudget(2000);
  EXPECT_EQ(pool.budget_bytes(), 2000u);
  pool.GrowBudget(10);  // never lowers
  EXPECT_EQ(pool.budget_bytes(), 2000u);
}

TEST(ChunkPoolTest, NanFilledSlotIsReadAgainOnceNobodyHoldsIt) {
  ChunkPool pool(0);
  OwnerId a = pool.RegisterOwner();
  auto s0 = Admit(pool, a, 0);
  const BadChunk bad{"v", 0, {0}, "zstd: corrupt frame"};
  pool.TileDone(s0, Status::Ok(), &bad);
  ASSERT_EQ(s0->bad.size(), 1u);
  Admit(pool, a, 0, 100, Acquired::kHit);  // while pinned it is shared, NaNs and all
  pool.Unpin(a, {0, 0}, 2);
  Admit(pool, a, 0, 100, Acquired::kAdmitted);  // unpinned: read again, not served
}

TEST(ChunkPoolTest, NextUseEvictsTheChunkNeededFarthestAhead) {
  struct Oracle final : NextUse {
    uint64_t Distance(SlotKey key) const override {
      return key.chunk == 1 ? NextUse::kNever : static_cast<uint64_t>(10 - key.chunk);
    }
    uint64_t Version() const override { return 0; }
  } oracle;
  ChunkPool pool(300);
  pool.SetNextUse(&oracle);
  OwnerId a = pool.RegisterOwner();
  AdmitEvictable(pool, a, {0, 1, 2});
  Admit(pool, a, 3);  // LRU would drop chunk 0; chunk 1 is never needed again
  Admit(pool, a, 0, 100, Acquired::kHit);
  Admit(pool, a, 4);  // of 0 (pinned), 2 (distance 8) and 3 (pinned): 2 goes
  EXPECT_EQ(pool.WaitReady({0, 2}, kNever).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.counters().evictions, 2u);
}

// The distances the pool keeps are asked for again once the plans say they moved on.
TEST(ChunkPoolTest, NextUseDistancesAreAskedAgainWhenTheirVersionChanges) {
  struct Plans final : NextUse {
    uint64_t Distance(SlotKey key) const override {
      ++asked;
      return key.chunk == farthest ? 100 : 1;
    }
    uint64_t Version() const override { return version; }
    int64_t farthest = 0;
    uint64_t version = 0;
    mutable int asked = 0;
  } plans;
  ChunkPool pool(300);
  pool.SetNextUse(&plans);
  OwnerId a = pool.RegisterOwner();
  AdmitEvictable(pool, a, {0, 1, 2});
  plans.farthest = 1;
  ++plans.version;
  AdmitEvictable(pool, a, {3});  // chunk 1 is needed farthest ahead now
  EXPECT_EQ(pool.WaitReady({0, 1}, kNever).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(plans.asked, 3);
  AdmitEvictable(pool, a, {4});  // the same version: only chunk 3, new to the list, is asked
  EXPECT_EQ(plans.asked, 4);
  plans.farthest = 3;  // kept at distance 1 until the version moves
  ++plans.version;
  Admit(pool, a, 5);  // asked again: chunk 3 goes, not chunk 2, the oldest of equals
  EXPECT_EQ(plans.asked, 7);
  EXPECT_EQ(pool.WaitReady({0, 3}, kNever).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(pool.WaitReady({0, 2}, kNever).ok());
  EXPECT_EQ(pool.counters().evictions, 3u);
}

// 64 tiles of one slot delivered from 32 threads (TSan checks the publication edge).
TEST(ChunkPoolTest, ConcurrentTileDelivery) {
  for (int round = 0; round < 8; ++round) {
    ChunkPool pool(0);
    OwnerId a = pool.RegisterOwner();
    auto slot = Admit(pool, a, 0, 64 * 64, Acquired::kAdmitted, 64);
    std::vector<std::thread> threads;
    for (int t = 0; t < 32; ++t) {
      threads.emplace_back([&, t] {
        for (int tile = t; tile < 64; tile += 32) {
          std::memset(slot->data.data() + tile * 64, tile, 64);
          pool.TileDone(slot, Status::Ok());
        }
      });
    }
    auto ready = pool.WaitReady({0, 0}, kNever);
    ASSERT_TRUE(ready.ok());
    for (int tile = 0; tile < 64; ++tile) {
      ASSERT_EQ(static_cast<int>((*ready)->data.data()[tile * 64]), tile);
    }
    for (auto& t : threads) t.join();
  }
}

}  // namespace
}  // namespace insitubatch::engine
