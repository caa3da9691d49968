#include "insitubatch/engine/plan.h"

#include <algorithm>

namespace insitubatch::engine {
namespace {

void SortUnique(std::vector<SlotKey>& keys) {
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
}

}  // namespace

Result<PassPlan> BuildPlan(EpochOrder order, int64_t ref_spc, int64_t batch_size, const std::vector<Label>& labels,
                           const std::vector<ArraySource>& sources) {
  if (batch_size < 1) return InvalidArgument("batch_size must be >= 1");
  if (ref_spc < 1) return InvalidArgument("sample_chunk_size must be >= 1");
  if (labels.empty()) return InvalidArgument("a pass needs at least one variable");
  for (const Label& l : labels) {
    if (l.source >= sources.size()) return InvalidArgument("label '" + l.name + "': bad source");
  }
  // Engine::Create checked that every source shares this length.
  const int64_t n_samples = sources[labels[0].source].n_samples;
  std::vector<int64_t> offsets;
  for (const Label& l : labels) offsets.push_back(l.offset);
  const AnchorRange valid = ValidAnchorRange(offsets, n_samples);
  KeepAnchorsIn(order, ref_spc, valid.lo, valid.hi);

  PassPlan plan;
  plan.ref_spc = ref_spc;
  plan.batch_size = batch_size;
  const size_t rows = order.rows();
  const size_t blocks = order.blocks();
  plan.block_reads.resize(blocks);

  auto key_of = [&](size_t row, const Label& l) {
    const ArraySource& s = sources[l.source];
    const int64_t sample = order.anchor(row, ref_spc) + l.offset;
    return SlotKey{l.source, sample / s.spc};
  };

  std::vector<size_t> block_of_row(rows);
  for (size_t b = 0; b < blocks; ++b) {
    auto& reads = plan.block_reads[b];
    // Rows of one anchor chunk form runs; consecutive duplicates are skipped cheaply and
    // the final sort-unique makes the set exact.
    for (auto r = static_cast<size_t>(order.block_start[b]); r < static_cast<size_t>(order.block_start[b + 1]); ++r) {
      block_of_row[r] = b;
      for (const Label& l : labels) {
        SlotKey k = key_of(r, l);
        if (reads.empty() || !(reads.back() == k)) reads.push_back(k);
      }
    }
    SortUnique(reads);
  }

  const size_t batches = (rows + static_cast<size_t>(batch_size) - 1) / static_cast<size_t>(batch_size);
  plan.batch_needs.resize(batches);
  plan.batch_last_block.resize(batches);
  plan.release_after_batch.resize(batches);
  for (size_t k = 0; k < batches; ++k) {
    const size_t begin = k * static_cast<size_t>(batch_size);
    const size_t end = std::min(rows, begin + static_cast<size_t>(batch_size));
    auto& needs = plan.batch_needs[k];
    for (size_t r = begin; r < end; ++r) {
      for (const Label& l : labels) needs.push_back(key_of(r, l));
    }
    SortUnique(needs);
    plan.batch_last_block[k] = block_of_row[end - 1];
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

}  // namespace insitubatch::engine
