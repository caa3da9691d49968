#include "insitubatch/engine/sizing.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>

namespace insitubatch::engine {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The report's sums saturate: a configuration past 2^64 bytes is refused by the machine
// check, never wrapped round to a small figure that passes it.
constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();
uint64_t Mul(uint64_t a, uint64_t b) {
  uint64_t out;
  return __builtin_mul_overflow(a, b, &out) ? kSaturated : out;
}
uint64_t Add(uint64_t a, uint64_t b) {
  uint64_t out;
  return __builtin_add_overflow(a, b, &out) ? kSaturated : out;
}

}  // namespace

uint64_t SlotLayout::sample_bytes() const {
  uint64_t n = itemsize();
  for (uint64_t extent : field_shape) n *= extent;
  return n;
}

Result<SlotLayout> StoredLayout(const ArrayShape& array) {
  const int ndim = static_cast<int>(array.shape.size());
  if (array.chunks.size() != array.shape.size()) {
    return InvalidArgument("chunks and shape differ in rank");
  }
  if (array.sample_axis < 0 || array.sample_axis >= ndim) {
    return InvalidArgument("sample_axis " + std::to_string(array.sample_axis) + " out of range for a " +
                           std::to_string(ndim) + "-D array");
  }
  SlotLayout stored;
  stored.dtype = array.dtype;
  stored.tile_bytes = array.dtype.itemsize();
  for (int axis = 0; axis < ndim; ++axis) {
    const uint64_t chunk = array.chunks[axis];
    if (chunk == 0) return InvalidArgument("a chunk extent is 0");
    stored.tile_bytes *= chunk;
    if (axis == array.sample_axis) continue;
    const uint64_t extent = array.shape[axis];
    stored.field_shape.push_back(extent);
    stored.tile_shape.push_back(chunk);
    stored.grid.push_back(extent == 0 ? 0 : CeilDiv(extent, chunk));
    stored.tiles *= stored.grid.back();
  }
  return stored;
}

Result<CroppedLayout> CropLayout(const SlotLayout& stored, const FieldCrop& crop) {
  const size_t nd = stored.field_shape.size();
  if (crop.start.size() != nd || crop.stop.size() != nd) {
    return InvalidArgument("crop: " + std::to_string(crop.start.size()) + " ranges for a field of " +
                           std::to_string(nd) + " axes");
  }
  CroppedLayout out;
  out.layout = stored;
  out.layout.tiles = 1;
  out.layout.pieces.assign(nd, {});
  out.tile_ids.assign(nd, {});
  for (size_t i = 0; i < nd; ++i) {
    const uint64_t extent = stored.field_shape[i];
    const uint64_t ts = stored.tile_shape[i];
    const uint64_t start = crop.start[i], stop = crop.stop[i];
    if (start > extent || stop > extent) {
      return InvalidArgument("crop [" + std::to_string(start) + ", " + std::to_string(stop) + ") on field axis " +
                             std::to_string(i) + " is outside [0, " + std::to_string(extent) + "]");
    }
    // The crop's segments in array coordinates: one, or two when it wraps.
    std::vector<std::pair<uint64_t, uint64_t>> segments;
    if (stop > start) {
      segments.emplace_back(start, stop);
    } else {
      segments.emplace_back(start, extent);
      if (stop > 0) segments.emplace_back(0, stop);
    }
    uint64_t at = 0;
    for (const auto& [lo, hi] : segments) {
      if (hi <= lo) continue;
      const uint64_t first = lo / ts, last = (hi - 1) / ts;
      out.layout.pieces[i].push_back({at, out.tile_ids[i].size() * ts + (lo - first * ts), hi - lo});
      for (uint64_t t = first; t <= last; ++t) out.tile_ids[i].push_back(t);
      at += hi - lo;
    }
    if (at == 0 && extent != 0) {
      return InvalidArgument("crop [" + std::to_string(start) + ", " + std::to_string(stop) + ") on field axis " +
                             std::to_string(i) + " keeps nothing");
    }
    out.layout.field_shape[i] = at;
    out.layout.grid[i] = out.tile_ids[i].size();
    out.layout.tiles *= out.layout.grid[i];
  }
  return out;
}

SlotLayout TransformedLayout(int64_t spc, std::vector<uint64_t> field, zarr::DataType dtype) {
  SlotLayout out;
  out.field_shape = std::move(field);
  out.tile_shape = out.field_shape;
  out.grid.assign(out.field_shape.size(), 1);
  out.tiles = 1;
  out.dtype = dtype;
  out.tile_bytes = static_cast<uint64_t>(spc) * out.sample_bytes();
  return out;
}

uint64_t GatherRunBytes(const SlotLayout& resident) {
  uint64_t run = resident.itemsize();
  for (size_t i = resident.field_shape.size(); i-- > 0;) {
    const uint64_t extent = resident.field_shape[i];
    const uint64_t tile = resident.tile_shape[i];
    run *= std::min(tile, extent);
    if (tile != extent) break;
  }
  return run;
}

uint64_t WorkingSetFloor(const std::vector<FloorLabel>& labels, const FloorConfig& config) {
  if (labels.empty()) return 0;
  const int64_t ref_spc = std::max<int64_t>(1, config.ref_spc);
  const uint64_t block_chunks = static_cast<uint64_t>(std::max<int64_t>(0, config.block_chunks));
  const uint64_t n_train = static_cast<uint64_t>(std::max<int64_t>(0, config.n_train_chunks));
  const uint64_t blocks = config.reread_spill ? 3 : 2;
  const bool uniform = std::all_of(labels.begin(), labels.end(), [&](const FloorLabel& l) { return l.spc == ref_spc; });
  if (uniform) {
    uint64_t per_anchor = 0;
    int64_t min_offset = labels[0].offset;
    int64_t max_offset = labels[0].offset;
    for (const FloorLabel& l : labels) {
      // An offset off the chunk grid makes every anchor chunk touch two of the label's.
      per_anchor += (l.offset % ref_spc == 0 ? 1 : 2) * l.slot_bytes;
      min_offset = std::min(min_offset, l.offset);
      max_offset = std::max(max_offset, l.offset);
    }
    uint64_t floor = blocks * block_chunks * per_anchor;
    const bool windowed = std::any_of(labels.begin(), labels.end(), [](const FloorLabel& l) { return l.offset != 0; });
    if (windowed && config.shuffle && !config.reread_spill) {
      std::map<std::string, uint64_t> per_path;  // labels aliasing one array share its slots
      for (const FloorLabel& l : labels) per_path[l.path] = std::max(per_path[l.path], l.slot_bytes);
      uint64_t paths = 0;
      for (const auto& [path, bytes] : per_path) paths += bytes;
      const uint64_t reach = CeilDiv(static_cast<uint64_t>(max_offset - min_offset), static_cast<uint64_t>(ref_spc));
      floor = std::max(floor, (n_train + reach) * paths);
    }
    return floor;
  }
  const uint64_t window = blocks * block_chunks * static_cast<uint64_t>(ref_spc);
  uint64_t floor = 0;
  for (const FloorLabel& l : labels) {
    floor += (CeilDiv(window, static_cast<uint64_t>(l.spc)) + 1) * l.slot_bytes;
  }
  if (config.shuffle && !config.reread_spill) {
    const uint64_t train = n_train * static_cast<uint64_t>(ref_spc);
    uint64_t whole = 0;
    for (const FloorLabel& l : labels) {
      whole += (CeilDiv(train, static_cast<uint64_t>(l.spc)) + 1) * l.slot_bytes;
    }
    floor = std::max(floor, whole);
  }
  return floor;
}

int64_t ResolveBlockChunks(int64_t requested, int64_t batch_size, int64_t ref_spc, int64_t n_chunks) {
  const int64_t spc = std::max<int64_t>(1, ref_spc);
  const int64_t need = (batch_size + spc - 1) / spc;
  return std::max<int64_t>({1, requested, std::min(need, n_chunks)});
}

AnchorRange ValidAnchorRange(const std::vector<int64_t>& offsets, int64_t n_samples) {
  if (offsets.empty()) return {0, n_samples};
  const auto [min_it, max_it] = std::minmax_element(offsets.begin(), offsets.end());
  const int64_t lo = std::max<int64_t>(0, -*min_it);
  const int64_t hi = std::max(lo, n_samples - std::max<int64_t>(0, *max_it));
  return {lo, hi};
}

uint64_t MachineMemoryBytes(uint64_t physical, const std::vector<std::string>& cgroup_limits) {
  uint64_t total = physical != 0 ? physical : uint64_t{1} << 40;
  for (const std::string& text : cgroup_limits) {
    // A limit is a plain decimal number of bytes; "max", empty or anything else is none.
    if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos) continue;
    total = std::min<uint64_t>(total, std::stoull(text));
  }
  return total;
}

uint64_t MachineMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  const uint64_t physical =
      pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
  std::vector<std::string> limits;
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream file(path);
    std::string text;
    if (file && std::getline(file, text)) limits.push_back(text);
  }
  return MachineMemoryBytes(physical, limits);
}

Result<MemoryTerms> SizeMemory(const std::vector<SizedLabel>& labels, const MemoryConfig& config) {
  return SizeMemory(labels, config, MachineMemoryBytes());
}

Result<MemoryTerms> SizeMemory(const std::vector<SizedLabel>& labels, const MemoryConfig& config,
                               uint64_t machine_bytes) {
  if (config.iterations < 1) {
    return InvalidArgument("iterations must be >= 1, got " + std::to_string(config.iterations));
  }
  MemoryTerms out;
  out.machine_bytes = machine_bytes;
  std::vector<SlotLayout> stored;
  std::vector<int64_t> spcs;
  for (const SizedLabel& label : labels) {
    INSITU_ASSIGN_OR_RETURN(SlotLayout layout, StoredLayout(label.array));
    if (label.crop.active()) {
      INSITU_ASSIGN_OR_RETURN(CroppedLayout cropped, CropLayout(layout, label.crop));
      layout = std::move(cropped.layout);
    }
    const int64_t spc = static_cast<int64_t>(label.array.chunks[label.array.sample_axis]);
    const SlotLayout output = TransformedLayout(spc, label.out_field, label.out_dtype);
    const SlotLayout& resident = label.transformed ? output : layout;
    const uint64_t n_samples = label.array.shape[label.array.sample_axis];
    LabelTerms t;
    t.stored_chunk_bytes = layout.tile_bytes;
    t.stored_chunks = layout.tiles;
    t.slot_bytes = SlotCharge(layout, resident);
    t.output_sample_bytes = output.sample_bytes();
    if (!label.row_field.empty()) {
      t.output_sample_bytes = label.out_dtype.itemsize();
      for (uint64_t e : label.row_field) t.output_sample_bytes = Mul(t.output_sample_bytes, e);
    }
    t.logical_chunk_bytes = Mul(std::min<uint64_t>(static_cast<uint64_t>(spc), n_samples), output.sample_bytes());
    t.gather_run_bytes = GatherRunBytes(resident);
    out.labels.push_back(t);
    stored.push_back(std::move(layout));
    spcs.push_back(spc);
  }
  out.ref_spc = config.ref_spc > 0 ? config.ref_spc : (spcs.empty() ? 1 : *std::min_element(spcs.begin(), spcs.end()));

  std::vector<FloorLabel> floor_labels;
  for (size_t i = 0; i < labels.size(); ++i) {
    floor_labels.push_back({labels[i].path, out.labels[i].slot_bytes, spcs[i], labels[i].offset});
  }
  out.working_set_bytes = WorkingSetFloor(
      floor_labels, {config.block_chunks, out.ref_spc, config.shuffle, config.n_train_chunks, config.reread_spill});
  out.budget_bytes = config.budget.value_or(out.working_set_bytes);
  out.budget_is_automatic = out.budget_bytes == out.working_set_bytes;
  out.residency_bytes = Mul(out.budget_bytes, static_cast<uint64_t>(config.iterations));

  uint64_t widest = 0;
  uint64_t batch_bytes = 0;
  for (const LabelTerms& t : out.labels) {
    widest = std::max(widest, t.stored_chunk_bytes);
    batch_bytes =
        Add(batch_bytes, Mul(static_cast<uint64_t>(std::max<int64_t>(0, config.batch_size)), t.output_sample_bytes));
  }
  out.inflight_bytes = Mul(static_cast<uint64_t>(std::max<int64_t>(0, config.max_inflight)), widest);
  out.queued_batches = static_cast<uint64_t>(std::max<int64_t>(1, config.prefetch_depth)) + 1 +
                       (config.batch_transforms ? kBatchTransformBatchesAhead : 0);
  out.queue_bytes = Mul(out.queued_batches, batch_bytes);
  // One assembly per transformed array, however many labels alias it.
  std::map<std::string, uint64_t> scratch;
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].transformed) scratch[labels[i].path] = stored[i].bytes();
  }
  for (const auto& [path, bytes] : scratch) out.scratch_bytes = Add(out.scratch_bytes, bytes);
  out.accounted_bytes = Add(Add(out.residency_bytes, out.inflight_bytes), Add(out.queue_bytes, out.scratch_bytes));
  const double estimated = static_cast<double>(out.accounted_bytes) * kAllocatorRetention;
  out.estimated_peak_bytes = estimated >= 0x1p64 ? kSaturated : static_cast<uint64_t>(estimated);
  out.floor_ram_bytes = Add(Add(config.cache_dir ? 0 : out.working_set_bytes, out.inflight_bytes),
                            Add(out.queue_bytes, out.scratch_bytes));

  if (config.cache_dir) {
    // Every chunk a split reads becomes a file: its slot after a page of header, each array
    // counted once per chunk of the anchor grid it covers.
    std::set<std::string> seen;
    uint64_t per_chunk = 0;
    for (size_t i = 0; i < labels.size(); ++i) {
      if (!seen.insert(labels[i].path).second) continue;
      const uint64_t resident = labels[i].transformed ? out.labels[i].slot_bytes : stored[i].bytes();
      const uint64_t covered =
          std::max<uint64_t>(1, CeilDiv(static_cast<uint64_t>(out.ref_spc), static_cast<uint64_t>(spcs[i])));
      per_chunk = Add(per_chunk, Mul(Add(kSlotFileHeaderBytes, resident), covered));
    }
    out.disk_bytes = Mul(per_chunk, config.split_chunks);
  }
  return out;
}

}  // namespace insitubatch::engine
