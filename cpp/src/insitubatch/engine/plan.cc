#include "insitubatch/engine/plan.h"

#include <algorithm>
#include <limits>

namespace insitubatch::engine {
namespace {

void SortUnique(std::vector<SlotKey>& keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
}

// Each patched label's axes name patch axes at most once, and a patch axis's extent is
// the label's field extent there.
Status CheckPatchedLabels(const std::vector<Label>& labels, const std::vector<ArraySource>& sources,
                          const PatchGrid& patches) {
  for (const Label& l : labels) {
    if (l.patch_axes.empty()) continue;
    if (!patches.active()) return InvalidArgument("label '" + l.name + "' has patch axes but the pass has no patches");
    const std::vector<uint64_t>& field = sources[l.source].resident.field_shape;
    if (l.patch_axes.size() != field.size()) {
      return InvalidArgument("label '" + l.name + "': " + std::to_string(l.patch_axes.size()) +
                             " patch axes for a field of " + std::to_string(field.size()) + " axes");
    }
    const size_t itemsize = sources[l.source].resident.itemsize();
    if (patches.pads() ? l.pad.size() != itemsize : !l.pad.empty()) {
      return InvalidArgument("label '" + l.name + "': a pad element of " + std::to_string(l.pad.size()) +
                             " bytes; patch_edges=" + std::string(PatchEdgesName(patches.edges)) + " needs " +
                             (patches.pads() ? std::to_string(itemsize) : std::string("none")));
    }
    std::vector<bool> used(patches.axes(), false);
    for (size_t i = 0; i < field.size(); ++i) {
      const int32_t a = l.patch_axes[i];
      if (a < 0) continue;
      if (static_cast<size_t>(a) >= patches.axes() || used[a]) {
        return InvalidArgument("label '" + l.name + "': patch axis " + std::to_string(a) + " is unknown or repeated");
      }
      used[a] = true;
      if (patches.extent[a] != field[i]) {
        return InvalidArgument("label '" + l.name + "': its field axis " + std::to_string(i) + " has extent " +
                               std::to_string(field[i]) + ", the patch axis " + std::to_string(patches.extent[a]));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<uint64_t> RowShape(const ArraySource& source, const Label& label, const PatchGrid& patches) {
  std::vector<uint64_t> shape = source.resident.field_shape;
  for (size_t i = 0; i < label.patch_axes.size() && i < shape.size(); ++i) {
    if (label.patch_axes[i] >= 0) shape[i] = patches.size[static_cast<size_t>(label.patch_axes[i])];
  }
  return shape;
}

uint64_t RowBytes(const ArraySource& source, const Label& label, const PatchGrid& patches) {
  uint64_t bytes = source.resident.itemsize();
  for (uint64_t w : RowShape(source, label, patches)) bytes *= w;
  return bytes;
}

Result<PassPlan> BuildPlan(EpochOrder order, int64_t ref_spc, int64_t batch_size, const std::vector<Label>& labels,
                           const std::vector<ArraySource>& sources, const PatchGrid& patches) {
  if (batch_size < 1) return InvalidArgument("batch_size must be >= 1");
  if (ref_spc < 1) return InvalidArgument("sample_chunk_size must be >= 1");
  if (labels.empty()) return InvalidArgument("a pass needs at least one variable");
  for (const Label& l : labels) {
    if (l.source >= sources.size()) return InvalidArgument("label '" + l.name + "': bad source");
  }
  INSITU_RETURN_IF_ERROR(patches.Validate());
  INSITU_RETURN_IF_ERROR(CheckPatchedLabels(labels, sources, patches));
  const auto per_anchor = static_cast<int64_t>(patches.PerSample());
  if (ref_spc % per_anchor != 0) {
    return InvalidArgument("the order's rows per chunk (" + std::to_string(ref_spc) + ") must be a multiple of the " +
                           std::to_string(per_anchor) + " patches per sample");
  }
  // Engine::Create checked that every source shares this length.
  const int64_t n_samples = sources[labels[0].source].n_samples;
  std::vector<int64_t> offsets;
  for (const Label& l : labels) offsets.push_back(l.offset);
  const AnchorRange valid = ValidAnchorRange(offsets, n_samples);
  KeepAnchorsIn(order, ref_spc, valid.lo * per_anchor, valid.hi * per_anchor);

  PassPlan plan;
  plan.ref_spc = ref_spc;
  plan.per_anchor = per_anchor;
  plan.batch_size = batch_size;
  const size_t rows = order.rows();
  const size_t blocks = order.blocks();
  plan.block_reads.resize(blocks);

  auto key_of = [&](size_t row, const Label& l) {
    const ArraySource& s = sources[l.source];
    const int64_t sample = order.anchor(row, ref_spc) / per_anchor + l.offset;
    return SlotKey{l.source, sample / s.spc};
  };

  const auto batch = static_cast<size_t>(batch_size);
  // Per block, its keys sorted, each with its position in the admission order
  // (block_admitted_before[b] admissions come before the block's first).
  std::vector<std::vector<std::pair<SlotKey, size_t>>> position(blocks);
  std::vector<size_t> block_admitted_before(blocks + 1, 0);
  for (size_t b = 0; b < blocks; ++b) {
    // (first batch that gathers from it, key); rows of one anchor chunk form runs, so
    // consecutive duplicates are skipped cheaply and the sort-unique makes the set exact.
    std::vector<std::pair<size_t, SlotKey>> firsts;
    for (auto r = static_cast<size_t>(order.block_start[b]); r < static_cast<size_t>(order.block_start[b + 1]); ++r) {
      for (const Label& l : labels) {
        SlotKey k = key_of(r, l);
        if (firsts.empty() || !(firsts.back().second == k)) firsts.emplace_back(r / batch, k);
      }
    }
    // Stable: among a key's entries the first kept is its earliest use.
    std::stable_sort(firsts.begin(), firsts.end(), [](const auto& x, const auto& y) { return x.second < y.second; });
    firsts.erase(
        std::unique(firsts.begin(), firsts.end(), [](const auto& x, const auto& y) { return x.second == y.second; }),
        firsts.end());
    std::sort(firsts.begin(), firsts.end());  // first use, then key
    auto& reads = plan.block_reads[b];
    reads.reserve(firsts.size());
    for (const auto& [first_batch, key] : firsts) {
      position[b].emplace_back(key, block_admitted_before[b] + reads.size());
      reads.push_back(key);
    }
    std::sort(position[b].begin(), position[b].end());
    block_admitted_before[b + 1] = block_admitted_before[b] + reads.size();
  }
  auto block_of_row = [&](size_t r) {
    auto it = std::upper_bound(order.block_start.begin(), order.block_start.end(), static_cast<int64_t>(r));
    return static_cast<size_t>(it - order.block_start.begin()) - 1;
  };
  auto admissions_through = [&](size_t b, SlotKey key) {
    auto it = std::lower_bound(position[b].begin(), position[b].end(), std::make_pair(key, size_t{0}));
    return it->second + 1;  // every row's key is in its block's read set
  };

  const size_t batches = (rows + batch - 1) / batch;
  plan.batch_needs.resize(batches);
  plan.batch_admissions.resize(batches);
  plan.release_after_batch.resize(batches);
  size_t admitted = 0;
  for (size_t k = 0; k < batches; ++k) {
    const size_t begin = k * batch;
    const size_t end = std::min(rows, begin + batch);
    auto& needs = plan.batch_needs[k];
    size_t b = block_of_row(begin);
    for (size_t r = begin; r < end; ++r) {
      while (static_cast<size_t>(order.block_start[b + 1]) <= r) ++b;
      for (const Label& l : labels) {
        const SlotKey key = key_of(r, l);
        needs.push_back(key);
        // The admission in the row's own block: an earlier block's pin of the same chunk
        // may be released before this batch gathers.
        admitted = std::max(admitted, admissions_through(b, key));
      }
    }
    SortUnique(needs);
    plan.batch_admissions[k] = admitted;
  }
  // Block b drains after the batch holding its last row; an empty block (all rows dropped
  // as window edges) drains as soon as the batches before it are done.
  for (size_t b = 0; b < blocks; ++b) {
    const auto end = static_cast<size_t>(order.block_start[b + 1]);
    size_t k = 0;
    if (end > 0) k = (end - 1) / static_cast<size_t>(batch_size);
    if (batches == 0) continue;
    plan.release_after_batch[std::min(k, batches - 1)].push_back(b);
  }
  plan.order = std::move(order);
  return plan;
}

std::vector<std::pair<SlotKey, uint32_t>> ChunkBlockPairs(const PassPlan& plan) {
  size_t n = 0;
  uint32_t sources = 0;
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = std::numeric_limits<int64_t>::min();
  for (const auto& reads : plan.block_reads) {
    n += reads.size();
    for (const SlotKey& key : reads) {
      sources = std::max(sources, key.source + 1);
      lo = std::min(lo, key.chunk);
      hi = std::max(hi, key.chunk);
    }
  }
  std::vector<std::pair<SlotKey, uint32_t>> out;
  if (n == 0) return out;
  // Chunk ids are dense on their grid, and the pairs come block by block (each chunk's
  // blocks in ascending order), so a stable counting sort by key orders them by key, then
  // block, in one pass: std::sort took ~0.1 s of a million-chunk epoch's start. A sparse
  // key range (a few chunks of a vast grid) sorts as before.
  const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  const uint64_t dense = 4 * static_cast<uint64_t>(n) + 1024;
  if (span > dense / sources || n >= std::numeric_limits<uint32_t>::max()) {
    out.reserve(n);
    for (size_t b = 0; b < plan.blocks(); ++b) {
      for (const SlotKey& key : plan.block_reads[b]) out.emplace_back(key, static_cast<uint32_t>(b));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  auto bucket = [&](const SlotKey& key) {
    return key.source * span + (static_cast<uint64_t>(key.chunk) - static_cast<uint64_t>(lo));
  };
  std::vector<uint32_t> start(sources * span + 1, 0);
  for (const auto& reads : plan.block_reads) {
    for (const SlotKey& key : reads) ++start[bucket(key) + 1];
  }
  for (size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  out.resize(n);
  for (size_t b = 0; b < plan.blocks(); ++b) {
    for (const SlotKey& key : plan.block_reads[b]) out[start[bucket(key)]++] = {key, static_cast<uint32_t>(b)};
  }
  return out;
}

}  // namespace insitubatch::engine
