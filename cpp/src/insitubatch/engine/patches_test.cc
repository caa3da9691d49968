#include "insitubatch/engine/patches.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>

#include "insitubatch/engine/gather.h"
#include "insitubatch/engine/plan.h"

namespace insitubatch::engine {
namespace {

// Fills `slot` as an int32 2-D `layout` whose tile (ty, tx) holds the field's physical tile
// (ys[ty], xs[tx]) of a field of `extent` with element (s, y, x) = value(s, y, x); the edge
// tiles' padding is -1.
template <typename Value>
void FillTiles(Slot& slot, const SlotLayout& layout, int64_t spc, const std::vector<uint64_t>& ys,
               const std::vector<uint64_t>& xs, const std::vector<uint64_t>& extent, Value value) {
  slot.key = {0, 0};
  slot.data = Buffer::Allocate(layout.bytes()).value();
  auto* data = reinterpret_cast<int32_t*>(slot.data.data());
  std::fill(data, data + layout.bytes() / 4, -1);
  const uint64_t th = layout.tile_shape[0], tw = layout.tile_shape[1];
  for (uint64_t ty = 0; ty < ys.size(); ++ty) {
    for (uint64_t tx = 0; tx < xs.size(); ++tx) {
      int32_t* tile = data + (ty * xs.size() + tx) * layout.tile_bytes / 4;
      for (int64_t s = 0; s < spc; ++s) {
        for (uint64_t y = 0; y < th; ++y) {
          for (uint64_t x = 0; x < tw; ++x) {
            const uint64_t fy = ys[ty] * th + y, fx = xs[tx] * tw + x;
            if (fy < extent[0] && fx < extent[1]) tile[(s * th + y) * tw + x] = value(s, fy, fx);
          }
        }
      }
    }
  }
}

TEST(PatchGridTest, ModeAndEdgesParseTheirNamesAndRefuseOthersByOption) {
  for (auto m : {PatchGrid::Mode::kGrid, PatchGrid::Mode::kRandom}) EXPECT_EQ(*ParsePatchMode(PatchModeName(m)), m);
  for (auto e : {PatchGrid::Edges::kInside, PatchGrid::Edges::kCover, PatchGrid::Edges::kPad}) {
    EXPECT_EQ(*ParsePatchEdges(PatchEdgesName(e)), e);
  }
  const auto mode = ParsePatchMode("grids");
  ASSERT_FALSE(mode.ok());
  EXPECT_EQ(mode.status().message(), "patch_mode must be 'grid' or 'random', got 'grids'");
  const auto edges = ParsePatchEdges("wrap");
  ASSERT_FALSE(edges.ok());
  EXPECT_NE(edges.status().message().find("patch_edges must be one of 'inside', 'cover', 'pad'"), std::string::npos);
}

TEST(PatchGridTest, GridEnumeratesEveryLatticePositionOnce) {
  PatchGrid g;
  g.extent = {10, 7};
  g.size = {4, 3};
  g.stride = {3, 2};  // rows 0, 3, 6; columns 0, 2, 4
  ASSERT_TRUE(g.Validate().ok());
  ASSERT_EQ(g.PerSample(), 9u);
  std::set<std::pair<int64_t, int64_t>> seen;
  for (uint64_t p = 0; p < g.PerSample(); ++p) {
    int64_t o[2];
    g.Origin(5, p, 0, o);
    EXPECT_LE(o[0] + 4, 10);
    EXPECT_LE(o[1] + 3, 7);
    seen.insert({o[0], o[1]});
  }
  EXPECT_EQ(seen.size(), 9u);
  EXPECT_TRUE(seen.count({6, 4}));
}

TEST(PatchGridTest, RandomOriginsArePureFunctionsOfSeedEpochAnchorAndPatch) {
  PatchGrid g;
  g.mode = PatchGrid::Mode::kRandom;
  g.extent = {100, 50};
  g.size = {10, 50};
  g.per_sample = 4;
  g.seed = 7;
  ASSERT_TRUE(g.Validate().ok());
  int64_t a[2], b[2], c[2];
  g.Origin(3, 1, 2, a);
  g.Origin(3, 1, 2, b);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], 0);  // the whole axis: one choice
  int differ = 0;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    g.Origin(3, 1, epoch, c);
    EXPECT_GE(c[0], 0);
    EXPECT_LE(c[0], 90);
    differ += c[0] != a[0];
  }
  EXPECT_GE(differ, 5);
}

TEST(PatchGridTest, RejectsPatchesLargerThanTheField) {
  PatchGrid g;
  g.extent = {8};
  g.size = {9};
  g.stride = {1};
  EXPECT_FALSE(g.Validate().ok());
  g.size = {8};
  g.stride = {0};
  EXPECT_FALSE(g.Validate().ok());
  g.size = {9};
  g.stride = {1};
  g.edges = PatchGrid::Edges::kPad;  // padded: a patch may exceed the extent
  EXPECT_TRUE(g.Validate().ok());
  g.mode = PatchGrid::Mode::kRandom;
  g.edges = PatchGrid::Edges::kCover;
  EXPECT_FALSE(g.Validate().ok());
}

TEST(PatchGridTest, PadLatticeHasEveryStrideMultipleBelowTheExtent) {
  PatchGrid g;
  g.edges = PatchGrid::Edges::kPad;
  g.extent = {10, 7, 3};
  g.size = {4, 3, 5};
  g.stride = {4, 3, 2};  // rows 0, 4, 8; columns 0, 3, 6; the third axis 0, 2 (patch 5 > extent 3)
  ASSERT_TRUE(g.Validate().ok());
  EXPECT_EQ(g.Positions(0), 3u);
  EXPECT_EQ(g.Positions(1), 3u);
  EXPECT_EQ(g.Positions(2), 2u);
  ASSERT_EQ(g.PerSample(), 18u);
  std::set<std::vector<int64_t>> seen;
  for (uint64_t p = 0; p < g.PerSample(); ++p) {
    std::vector<int64_t> o(3);
    g.Origin(1, p, 0, o);
    seen.insert(o);
  }
  EXPECT_EQ(seen.size(), 18u);
  EXPECT_TRUE(seen.count({8, 6, 2}));
  g.stride = {1, 1, 1};  // every origin of the axis
  EXPECT_EQ(g.PerSample(), 10u * 7u * 3u);
  EXPECT_EQ(g.LatticeOrigin(0, 9), 9u);
}

TEST(PatchGridTest, RandomPadDrawsOriginsOverTheWholeAxis) {
  PatchGrid g;
  g.mode = PatchGrid::Mode::kRandom;
  g.edges = PatchGrid::Edges::kPad;
  g.extent = {6, 4};
  g.size = {4, 9};
  g.per_sample = 64;
  g.seed = 3;
  ASSERT_TRUE(g.Validate().ok());
  std::set<int64_t> ys, xs;
  for (uint64_t p = 0; p < g.per_sample; ++p) {
    int64_t o[2];
    g.Origin(2, p, 1, o);
    ys.insert(o[0]);
    xs.insert(o[1]);
  }
  EXPECT_EQ(ys, (std::set<int64_t>{0, 1, 2, 3, 4, 5}));  // past extent - size = 2 too
  EXPECT_EQ(xs, (std::set<int64_t>{0, 1, 2, 3}));
}

// A slot of 2 samples over a 5 x 7 int32 field stored in 2 x 3 tiles (3 x 3 tiles, the
// edge ones padded), and the windows gather cuts from it.
struct FieldSlot {
  static constexpr int64_t kSpc = 2;
  static constexpr uint64_t kHeight = 5, kWidth = 7;
  static int32_t Value(int64_t s, uint64_t y, uint64_t x) { return static_cast<int32_t>(s * 1000 + y * 10 + x); }

  SlotLayout layout;
  Slot slot;

  FieldSlot() {
    layout.field_shape = {kHeight, kWidth};
    layout.tile_shape = {2, 3};
    layout.grid = {3, 3};
    layout.tiles = 9;
    layout.dtype = zarr::DataType{zarr::DataTypeId::kInt32};
    layout.tile_bytes = kSpc * 2 * 3 * 4;
    FillTiles(slot, layout, kSpc, {0, 1, 2}, {0, 1, 2}, {kHeight, kWidth}, Value);
  }

  // Every wy x wx window of both samples with its origin in [0, y_end) x [0, x_end),
  // gathered with `label`: the rows' anchors, origins (y, x pairs) and values.
  struct Windows {
    std::vector<int64_t> anchors, starts;
    std::vector<int32_t> out;
  };
  Windows Gather(const Label& label, uint64_t wy, uint64_t wx, uint64_t y_end, uint64_t x_end) const {
    Windows w;
    for (int64_t s = 0; s < kSpc; ++s) {
      for (uint64_t y = 0; y < y_end; ++y) {
        for (uint64_t x = 0; x < x_end; ++x) {
          w.anchors.push_back(s);
          w.starts.push_back(static_cast<int64_t>(y));
          w.starts.push_back(static_cast<int64_t>(x));
        }
      }
    }
    const uint64_t window[2] = {wy, wx};
    w.out.assign(w.anchors.size() * wy * wx, -2);
    auto slot_for = [&](SlotKey) -> const Slot& { return slot; };
    GatherWindows(layout, kSpc, label, w.anchors, window, w.starts, slot_for,
                  reinterpret_cast<std::byte*>(w.out.data()));
    return w;
  }
};

// Every window inside the field equals the same box of the full field.
TEST(GatherWindowsTest, EveryWindowEqualsTheFieldBox) {
  const FieldSlot f;
  for (uint64_t wy : {1, 2, 3, 5}) {
    for (uint64_t wx : {1, 3, 4, 7}) {
      const auto w =
          f.Gather(Label{"v", 0, 0, {}, {}}, wy, wx, FieldSlot::kHeight - wy + 1, FieldSlot::kWidth - wx + 1);
      for (size_t r = 0; r < w.anchors.size(); ++r) {
        for (uint64_t y = 0; y < wy; ++y) {
          for (uint64_t x = 0; x < wx; ++x) {
            ASSERT_EQ(w.out[(r * wy + y) * wx + x],
                      FieldSlot::Value(w.anchors[r], static_cast<uint64_t>(w.starts[2 * r]) + y,
                                       static_cast<uint64_t>(w.starts[2 * r + 1]) + x))
                << wy << "x" << wx << " row " << r;
          }
        }
      }
    }
  }
}

// With a pad element, a window may run past the field's end: every element past it is the
// pad, every element inside the field's value (windows larger than the field included).
TEST(GatherWindowsTest, PadsWhatLiesPastTheFieldEnd) {
  const FieldSlot f;
  Label label{"v", 0, 0, {}, {}};
  const int32_t pad = -7;
  label.pad.resize(4);
  std::memcpy(label.pad.data(), &pad, 4);
  for (uint64_t wy : {1, 3, 5, 6}) {
    for (uint64_t wx : {2, 7, 9}) {
      const auto w = f.Gather(label, wy, wx, FieldSlot::kHeight, FieldSlot::kWidth);
      for (size_t r = 0; r < w.anchors.size(); ++r) {
        for (uint64_t y = 0; y < wy; ++y) {
          for (uint64_t x = 0; x < wx; ++x) {
            const uint64_t fy = static_cast<uint64_t>(w.starts[2 * r]) + y,
                           fx = static_cast<uint64_t>(w.starts[2 * r + 1]) + x;
            const bool inside = fy < FieldSlot::kHeight && fx < FieldSlot::kWidth;
            ASSERT_EQ(w.out[(r * wy + y) * wx + x], inside ? FieldSlot::Value(w.anchors[r], fy, fx) : pad)
                << wy << "x" << wx << " row " << r << " at " << fy << "," << fx;
          }
        }
      }
    }
  }
}

// A 10 x 7 int32 field of `spc` samples stored in 4 x 3 tiles (3 x 3 tiles): what the crop
// tests cut from.
SlotLayout Stored10x7(int64_t spc) {
  SlotLayout stored;
  stored.field_shape = {10, 7};
  stored.tile_shape = {4, 3};
  stored.grid = {3, 3};
  stored.tiles = 9;
  stored.dtype = zarr::DataType{zarr::DataTypeId::kInt32};
  stored.tile_bytes = spc * 4 * 3 * 4;
  return stored;
}

// A crop that wraps across the x axis's end: the slot holds only the tiles it touches, in
// the crop's order, and gather (whole crop, and windows inside it) reads the crop's values.
TEST(CropLayoutTest, WrappedCropGathersTheSelectedColumnsInOrder) {
  const int64_t spc = 2;
  const SlotLayout stored = Stored10x7(spc);
  FieldCrop crop{{2, 5}, {9, 2}};  // y [2, 9); x [5, 7) then [0, 2)
  auto cropped = CropLayout(stored, crop);
  ASSERT_TRUE(cropped.ok()) << cropped.status().ToString();
  const SlotLayout& layout = cropped->layout;
  EXPECT_EQ(layout.field_shape, (std::vector<uint64_t>{7, 4}));
  EXPECT_EQ(cropped->tile_ids[0], (std::vector<uint64_t>{0, 1, 2}));
  EXPECT_EQ(cropped->tile_ids[1], (std::vector<uint64_t>{1, 2, 0}));
  EXPECT_EQ(layout.tiles, 9u);
  auto value = [](int64_t s, uint64_t y, uint64_t x) { return static_cast<int32_t>(s * 1000 + y * 10 + x); };
  Slot slot;
  FillTiles(slot, layout, spc, cropped->tile_ids[0], cropped->tile_ids[1], {10, 7}, value);
  auto slot_for = [&](SlotKey) -> const Slot& { return slot; };
  const uint64_t columns[4] = {5, 6, 0, 1};
  const std::vector<int64_t> anchors{0, 1};
  std::vector<int32_t> whole(2 * 7 * 4, -2);
  GatherLabel(layout, spc, Label{"v", 0, 0, {}, {}}, anchors, slot_for, reinterpret_cast<std::byte*>(whole.data()));
  for (int64_t s = 0; s < 2; ++s) {
    for (uint64_t y = 0; y < 7; ++y) {
      for (uint64_t x = 0; x < 4; ++x) ASSERT_EQ(whole[(s * 7 + y) * 4 + x], value(s, 2 + y, columns[x]));
    }
  }
  // A 3 x 2 window at (4, 1) of the crop: crop columns 1..2, array columns 6, 0.
  const std::vector<int64_t> starts{4, 1, 4, 1};
  const uint64_t window[2] = {3, 2};
  std::vector<int32_t> patch(2 * 3 * 2, -2);
  GatherWindows(layout, spc, Label{"v", 0, 0, {}, {}}, anchors, window, starts, slot_for,
                reinterpret_cast<std::byte*>(patch.data()));
  for (int64_t s = 0; s < 2; ++s) {
    for (uint64_t y = 0; y < 3; ++y) {
      for (uint64_t x = 0; x < 2; ++x) ASSERT_EQ(patch[(s * 3 + y) * 2 + x], value(s, 6 + y, columns[1 + x]));
    }
  }
}

// Padding past a crop's end: the crop is the field, so a window at crop row 5 of 7, crop
// column 2 of 4, reads only the crop's values and pads the rest (array rows 9.. and the
// columns after the crop's last one are never read).
TEST(CropLayoutTest, PadsPastTheCropsEndWithoutReadingOutsideIt) {
  const int64_t spc = 2;
  const SlotLayout stored = Stored10x7(spc);
  auto cropped = CropLayout(stored, FieldCrop{{2, 5}, {9, 2}});  // y [2, 9); x 5, 6, 0, 1
  ASSERT_TRUE(cropped.ok()) << cropped.status().ToString();
  auto value = [](int64_t s, uint64_t y, uint64_t x) { return static_cast<int32_t>(s * 1000 + y * 10 + x); };
  Slot slot;
  FillTiles(slot, cropped->layout, spc, cropped->tile_ids[0], cropped->tile_ids[1], {10, 7}, value);
  auto slot_for = [&](SlotKey) -> const Slot& { return slot; };
  Label label{"v", 0, 0, {}, {}};
  const int32_t pad = 77;
  label.pad.resize(4);
  std::memcpy(label.pad.data(), &pad, 4);
  const uint64_t columns[4] = {5, 6, 0, 1};
  const std::vector<int64_t> anchors{0, 1}, starts{5, 2, 5, 2};
  const uint64_t window[2] = {4, 4};
  std::vector<int32_t> patch(2 * 4 * 4, -2);
  GatherWindows(cropped->layout, spc, label, anchors, window, starts, slot_for,
                reinterpret_cast<std::byte*>(patch.data()));
  for (int64_t s = 0; s < 2; ++s) {
    for (uint64_t y = 0; y < 4; ++y) {
      for (uint64_t x = 0; x < 4; ++x) {
        const bool inside = 5 + y < 7 && 2 + x < 4;
        ASSERT_EQ(patch[(s * 4 + y) * 4 + x], inside ? value(s, 2 + 5 + y, columns[2 + x]) : pad) << y << "," << x;
      }
    }
  }
}

TEST(CropLayoutTest, RejectsRangesOutsideTheField) {
  SlotLayout stored;
  stored.field_shape = {10};
  stored.tile_shape = {4};
  stored.grid = {3};
  stored.tiles = 3;
  EXPECT_FALSE(CropLayout(stored, {{11}, {3}}).ok());
  EXPECT_FALSE(CropLayout(stored, {{2}, {12}}).ok());
  EXPECT_FALSE(CropLayout(stored, {{1, 2}, {3}}).ok());
  auto whole = CropLayout(stored, {{0}, {0}});  // start == stop: the whole axis
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->layout.field_shape[0], 10u);
}

}  // namespace
}  // namespace insitubatch::engine
