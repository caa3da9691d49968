#include "insitubatch/engine/sizing.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <limits>

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

// A label of `shape` / `chunks` (sample axis 0) gathered as stored.
SizedLabel Plain(std::string path, std::vector<uint64_t> shape, std::vector<uint64_t> chunks,
                 zarr::DataType dtype = kFloat32, int64_t offset = 0) {
  std::vector<uint64_t> field(shape.begin() + 1, shape.end());
  return {std::move(path), {std::move(shape), std::move(chunks), 0, dtype}, offset, std::move(field), dtype, false};
}

MemoryConfig SeedConfig() {
  MemoryConfig c;
  c.batch_size = 32;
  c.block_chunks = 16;
  c.ref_spc = 16;
  c.max_inflight = 32;
  c.prefetch_depth = 2;
  c.n_train_chunks = 32;
  c.split_chunks = 40;
  return c;
}

// The seed example's report, term by term: residency is the floor, reads in flight are
// max_inflight stored chunks, the queue is (prefetch_depth + 1) batches.
TEST(MemoryModelTest, SeedExampleTerms) {
  const uint64_t chunk = 66'447'360;  // 16 x 721 x 1440 float32
  auto terms = SizeMemory({Plain("t2m", {6000, 721, 1440}, {16, 721, 1440})}, SeedConfig(), 100ull << 30);
  ASSERT_TRUE(terms.ok()) << terms.status().ToString();
  ASSERT_EQ(terms->labels.size(), 1u);
  const LabelTerms& t = terms->labels[0];
  EXPECT_EQ(t.stored_chunk_bytes, chunk);
  EXPECT_EQ(t.stored_chunks, 1u);
  EXPECT_EQ(t.slot_bytes, chunk);
  EXPECT_EQ(t.logical_chunk_bytes, chunk);
  EXPECT_EQ(t.gather_run_bytes, 721u * 1440 * 4);
  EXPECT_EQ(t.output_sample_bytes, 721u * 1440 * 4);
  EXPECT_EQ(terms->working_set_bytes, 2 * 16 * chunk);
  EXPECT_EQ(terms->budget_bytes, terms->working_set_bytes);
  EXPECT_TRUE(terms->budget_is_automatic);
  EXPECT_EQ(terms->residency_bytes, 2 * 16 * chunk);
  EXPECT_EQ(terms->inflight_bytes, 32 * chunk);
  EXPECT_EQ(terms->queued_batches, 3u);
  EXPECT_EQ(terms->queue_bytes, 3u * 32 * 721 * 1440 * 4);
  EXPECT_EQ(terms->scratch_bytes, 0u);
  const uint64_t accounted = 2 * 16 * chunk + 32 * chunk + 3u * 32 * 721 * 1440 * 4;
  EXPECT_EQ(terms->accounted_bytes, accounted);
  EXPECT_EQ(terms->estimated_peak_bytes, accounted + accounted / 4);
  EXPECT_EQ(terms->disk_bytes, 0u);  // no cache_dir
  EXPECT_EQ(terms->floor_ram_bytes, accounted);
  EXPECT_EQ(terms->machine_bytes, 100ull << 30);
}

// An explicit budget replaces the floor and is multiplied by the concurrent iterations; the
// RAM the construction check tests stays one iteration at the floor. The queue never counts
// fewer than two batches, and a batch transform's thread holds two more.
TEST(MemoryModelTest, BudgetIterationsAndQueue) {
  const uint64_t chunk = 16u * 10 * 10 * 4;
  MemoryConfig c = SeedConfig();
  c.budget = 1ull << 30;
  c.iterations = 3;
  auto terms = SizeMemory({Plain("v", {100, 10, 10}, {16, 10, 10})}, c, 1);
  ASSERT_TRUE(terms.ok());
  EXPECT_FALSE(terms->budget_is_automatic);
  EXPECT_EQ(terms->residency_bytes, 3ull << 30);
  EXPECT_EQ(terms->floor_ram_bytes, terms->working_set_bytes + 32 * chunk + 3u * 32 * 400);
  c.budget = terms->working_set_bytes;  // an explicit budget equal to the floor reads as automatic
  c.prefetch_depth = 0;
  c.batch_transforms = true;
  terms = SizeMemory({Plain("v", {100, 10, 10}, {16, 10, 10})}, c, 1);
  ASSERT_TRUE(terms.ok());
  EXPECT_TRUE(terms->budget_is_automatic);
  EXPECT_EQ(terms->queued_batches, 1u + 1 + kBatchTransformBatchesAhead);
  EXPECT_EQ(terms->queue_bytes, 4u * 32 * 400);
  c.iterations = 0;
  const auto refused = SizeMemory({Plain("v", {100, 10, 10}, {16, 10, 10})}, c, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), "iterations must be >= 1, got 0");
}

// A chunk transform: the slot is charged the larger of the stored tiles and its output, the
// queue counts the output field, and each transformed array gets one assembly of scratch,
// however many labels alias it. Reads in flight are the widest stored chunk.
TEST(MemoryModelTest, ChunkTransformTerms) {
  const zarr::DataType f16{zarr::DataTypeId::kFloat16};
  SizedLabel a = Plain("t2m", {100, 64, 64}, {4, 32, 32});
  a.out_field = {128, 128};
  a.out_dtype = f16;
  a.transformed = true;
  SizedLabel alias = a;
  alias.offset = 4;
  const SizedLabel other = Plain("z", {100, 8}, {4, 8}, zarr::DataType{zarr::DataTypeId::kFloat64});
  MemoryConfig c = SeedConfig();
  c.ref_spc = 4;
  auto terms = SizeMemory({a, alias, other}, c, 1);
  ASSERT_TRUE(terms.ok());
  EXPECT_EQ(terms->labels[0].stored_chunk_bytes, 4u * 32 * 32 * 4);
  EXPECT_EQ(terms->labels[0].stored_chunks, 4u);
  EXPECT_EQ(terms->labels[0].slot_bytes, 4u * 128 * 128 * 2);
  EXPECT_EQ(terms->labels[0].gather_run_bytes, 128u * 128 * 2);
  EXPECT_EQ(terms->labels[2].slot_bytes, 4u * 8 * 8);
  EXPECT_EQ(terms->scratch_bytes, 4u * 4 * 32 * 32 * 4);  // one assembly for t2m
  EXPECT_EQ(terms->inflight_bytes, 32u * 4 * 32 * 32 * 4);
  EXPECT_EQ(terms->queue_bytes, 3u * 32 * (2 * 128 * 128 * 2 + 8 * 8));
  // A transform that shrinks the field is charged the stored tiles it decodes from.
  a.out_field = {8, 8};
  terms = SizeMemory({a}, c, 1);
  ASSERT_TRUE(terms.ok());
  EXPECT_EQ(terms->labels[0].slot_bytes, 4u * 4 * 32 * 32 * 4);
  EXPECT_EQ(terms->labels[0].logical_chunk_bytes, 4u * 8 * 8 * 2);
}

// With a cache_dir every chunk of every split becomes a file of a page of header and the
// slot, each array once per anchor chunk it covers; its slots are file pages, so the RAM
// the check tests leaves the residency out.
TEST(MemoryModelTest, CacheDirDiskAndRam) {
  MemoryConfig c = SeedConfig();
  c.ref_spc = 8;
  c.split_chunks = 10;
  c.cache_dir = true;
  const SizedLabel fine = Plain("fine", {80, 4}, {2, 4});  // 4 of its chunks per anchor chunk
  const SizedLabel coarse = Plain("coarse", {80, 4}, {16, 4}, zarr::DataType{zarr::DataTypeId::kUInt8});
  SizedLabel window = fine;
  window.offset = 1;  // an alias: its files are fine's
  auto terms = SizeMemory({fine, coarse, window}, c, 1);
  ASSERT_TRUE(terms.ok());
  EXPECT_EQ(kSlotFileHeaderBytes, 4096u);
  EXPECT_EQ(terms->disk_bytes, ((4096u + 2 * 4 * 4) * 4 + (4096u + 16 * 4)) * 10);
  EXPECT_EQ(terms->floor_ram_bytes, terms->inflight_bytes + terms->queue_bytes);
  // ref_spc 0 takes the labels' smallest sample chunk as the anchor grid.
  c.ref_spc = 0;
  terms = SizeMemory({coarse, fine}, c, 1);
  ASSERT_TRUE(terms.ok());
  EXPECT_EQ(terms->ref_spc, 2);
  EXPECT_EQ(terms->disk_bytes, ((4096u + 16 * 4) + (4096u + 2 * 4 * 4)) * 10);
}

// Figures past 2^64 bytes saturate, so the machine check refuses them instead of seeing a
// wrapped, small sum.
TEST(MemoryModelTest, HugeFiguresSaturate) {
  MemoryConfig c = SeedConfig();
  c.batch_size = int64_t{1} << 31;
  c.cache_dir = true;
  c.split_chunks = uint64_t{1} << 40;
  auto terms = SizeMemory({Plain("v", {4, uint64_t{1} << 38}, {2, uint64_t{1} << 38})}, c, 1);
  ASSERT_TRUE(terms.ok());
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(terms->queue_bytes, max);  // 3 x 2^31 x 2^40 bytes
  EXPECT_EQ(terms->accounted_bytes, max);
  EXPECT_EQ(terms->estimated_peak_bytes, max);
  EXPECT_EQ(terms->floor_ram_bytes, max);
  EXPECT_EQ(terms->disk_bytes, max);
}

TEST(MemoryModelTest, MachineFractions) {
  EXPECT_EQ(AutoBudgetCeilingBytes(64ull << 30), 32ull << 30);
  EXPECT_EQ(PinBudgetBytes(64ull << 30), 8ull << 30);
  auto terms = SizeMemory({Plain("v", {10, 2}, {5, 2})}, SeedConfig());
  ASSERT_TRUE(terms.ok());
  EXPECT_EQ(terms->machine_bytes, MachineMemoryBytes());
}

}  // namespace
}  // namespace insitubatch::engine
