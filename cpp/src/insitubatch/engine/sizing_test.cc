#include "insitubatch/engine/sizing.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace insitubatch::engine {
namespace {

const zarr::DataType kFloat32{zarr::DataTypeId::kFloat32};

TEST(SizingTest, SeedExampleSlotAndFloor) {
  // 6000 x 721 x 1440 float32 in chunks of 16 whole fields: one 63.4 MiB tile per slot.
  auto stored = StoredLayout({{6000, 721, 1440}, {16, 721, 1440}, 0, kFloat32});
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->tiles, 1u);
  EXPECT_EQ(SlotCharge(*stored, *stored), 66'447'360u);
  EXPECT_EQ(GatherRunBytes(*stored), 721u * 1440 * 4);
  const uint64_t floor = WorkingSetFloor({{"t2m", 66'447'360, 16, 0}}, {16, 16, true, 32, false});
  EXPECT_EQ(floor, 2u * 16 * 66'447'360);
  EXPECT_EQ(WorkingSetFloor({{"t2m", 66'447'360, 16, 0}}, {16, 16, true, 32, true}),
            3u * 16 * 66'447'360);  // re-read spill holds three blocks
}

TEST(SizingTest, EdgeTilesAreChargedWholeAndRunsStopAtTheFirstSplitAxis) {
  auto stored = StoredLayout({{10, 721, 1440}, {5, 180, 1440}, 0, kFloat32});
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->tiles, 5u);  // ceil(721 / 180)
  EXPECT_EQ(stored->bytes(), 5u * 5 * 180 * 1440 * 4);
  EXPECT_EQ(GatherRunBytes(*stored), 180u * 1440 * 4);  // whole tile rows: 180 x 1440 contiguous
  const SlotLayout cast = TransformedLayout(5, {721, 1440}, zarr::DataType{zarr::DataTypeId::kFloat64});
  EXPECT_EQ(SlotCharge(*stored, cast), 5u * 721 * 1440 * 8);
  EXPECT_EQ(GatherRunBytes(cast), 721u * 1440 * 8);
  EXPECT_FALSE(StoredLayout({{10, 4}, {5, 4}, 2, kFloat32}).ok());
}

TEST(SizingTest, WindowsAndMixedChunking) {
  // A window y = x shifted by 3 on chunks of 4: y touches two chunks per anchor chunk;
  // shuffled, the floor holds the train split plus the window's reach, the array once.
  const std::vector<FloorLabel> window = {{"t", 100, 4, 0}, {"t", 100, 4, 3}};
  EXPECT_EQ(WorkingSetFloor(window, {2, 4, false, 50, false}), 2u * 2 * 300);
  EXPECT_EQ(WorkingSetFloor(window, {2, 4, true, 50, false}), (50u + 1) * 100);
  // Mixed sample chunking: a window of 2 x 2 x 4 anchor samples over chunks of 8 and 2.
  const std::vector<FloorLabel> mixed = {{"a", 10, 8, 0}, {"b", 20, 2, 0}};
  EXPECT_EQ(WorkingSetFloor(mixed, {2, 4, false, 0, false}), (2u + 1) * 10 + (8u + 1) * 20);
}

TEST(SizingTest, BlockChunksAnchorsAndRows) {
  EXPECT_EQ(ResolveBlockChunks(16, 64, 1, 1000), 64);
  EXPECT_EQ(ResolveBlockChunks(16, 64, 1, 20), 20);
  EXPECT_EQ(ResolveBlockChunks(1, 1, 8, 5), 1);
  const AnchorRange r = ValidAnchorRange({-2, 0, 5}, 20);
  EXPECT_EQ(r.lo, 2);
  EXPECT_EQ(r.hi, 15);
  const AnchorRange empty = ValidAnchorRange({0, 25}, 20);
  EXPECT_EQ(empty.lo, empty.hi);
  EXPECT_EQ(PassRows({0, 1, 3, 4}, 4, 18, r), 2u + 4 + 3);  // [2,4) + [4,8) + [12,15)
}

// A container's cgroup limit caps physical RAM (v2 "max" and v1's huge "no limit" number
// leave it); an unknown RAM size is 1 TiB. The live figure is never above physical RAM.
TEST(SizingTest, MachineMemoryIsTheLowerOfRamAndTheCgroupLimit) {
  const uint64_t gib = uint64_t{1} << 30;
  EXPECT_EQ(MachineMemoryBytes(64 * gib, {}), 64 * gib);
  EXPECT_EQ(MachineMemoryBytes(64 * gib, {"8589934592"}), 8 * gib);
  EXPECT_EQ(MachineMemoryBytes(64 * gib, {"max"}), 64 * gib);
  EXPECT_EQ(MachineMemoryBytes(64 * gib, {"9223372036854771712"}), 64 * gib);
  EXPECT_EQ(MachineMemoryBytes(64 * gib, {"", "4294967296"}), 4 * gib);
  EXPECT_EQ(MachineMemoryBytes(64 * gib, {"99999999999999999999999", "12abc"}), 64 * gib);
  EXPECT_EQ(MachineMemoryBytes(0, {}), uint64_t{1} << 40);
  const uint64_t live = MachineMemoryBytes();
  EXPECT_GT(live, 0u);
  EXPECT_LE(live,
            MachineMemoryBytes(
                static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)), {}));
}

}  // namespace
}  // namespace insitubatch::engine
