// The engine's reads: every tile of an admitted slot is queued under the one max_inflight
// budget, read from the store, decoded into the slot on the decode pool, transformed, and
// published. A read holds its slot and the LoadStats of the pass that admitted it, never
// the pass itself, so it may outlive that pass; the slot's CancelFlag ends it early when
// nobody needs the slot any more.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <optional>

#include "insitubatch/engine/engine.h"
#include "insitubatch/engine/gather.h"
#include "insitubatch/util/clock.h"
#include "insitubatch/util/crc32c.h"

namespace insitubatch::engine {
namespace {

// Writes the NaN-or-fill tile used by on_bad_chunk="nan".
void FillBadTile(const zarr::Array& array, std::span<std::byte> tile) {
  const zarr::DataType dtype = array.metadata().dtype;
  if (!dtype.is_float() && !dtype.is_complex()) {
    array.FillChunk(tile);
    return;
  }
  const size_t component = dtype.component_size();
  std::byte nan[8];
  if (component == 8) {
    const double v = std::numeric_limits<double>::quiet_NaN();
    std::memcpy(nan, &v, 8);
  } else if (component == 4) {
    const float v = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(nan, &v, 4);
  } else {
    const uint16_t v = 0x7e00;  // float16 quiet NaN
    std::memcpy(nan, &v, 2);
  }
  for (size_t i = 0; i + component <= tile.size(); i += component) {
    std::memcpy(tile.data() + i, nan, component);
  }
}

// Physical chunk (C order, sample axis `axis`) -> sample-first tile.
void MoveSampleAxisToFront(const std::byte* src, std::byte* dst, const std::vector<uint64_t>& chunk_shape, int axis,
                           size_t itemsize) {
  uint64_t pre = 1;
  uint64_t post = itemsize;
  for (int i = 0; i < axis; ++i) pre *= chunk_shape[i];
  for (size_t i = axis + 1; i < chunk_shape.size(); ++i) post *= chunk_shape[i];
  const uint64_t spc = chunk_shape[axis];
  const int64_t dst_strides[3] = {static_cast<int64_t>(pre * post), static_cast<int64_t>(post), 1};
  const int64_t src_strides[3] = {static_cast<int64_t>(post), static_cast<int64_t>(spc * post), 1};
  const uint64_t extents[3] = {spc, pre, post};
  CopyBox(dst, dst_strides, src, src_strides, extents, 3, 1);
}

// A bad chunk: its bytes did not decode (corrupt, truncated, or refused as larger than any
// encoding of it): DataLoss, and nothing else. A missing permission, an I/O error after
// its retries, a full disk or a cancelled pass is not the chunk's fault, and is raised
// whatever on_bad_chunk says.
bool IsBadChunk(const Status& status) { return status.code() == StatusCode::kDataLoss; }

// What a read says of its object's generation, as the slot records it: "" for an absent
// chunk; nullopt when the store could not tell, or gave something no log line or request
// header may carry (not short printable ASCII: an untrusted server's bytes).
std::optional<std::string> TileGeneration(const ReadResult& bytes) {
  if (!bytes.found) return std::string();
  const std::string& g = bytes.generation;
  if (g.empty() || g.size() > 512) return std::nullopt;
  for (char c : g) {
    if (c < 0x20 || c > 0x7e) return std::nullopt;
  }
  return g;
}

// Bytes that did not decode may have been damaged on the way (a proxy cutting a body
// that still carried a consistent Content-Length): such a chunk is read once more before
// it is declared corrupt.
bool WorthReadingAgain(const Status& status) { return IsBadChunk(status); }

}  // namespace

Engine::Loading Engine::Load(const std::shared_ptr<Slot>& slot, std::shared_ptr<LoadStats> stats, bool first_touch) {
  const ArraySource& source = sources_[slot->key.source];
  // Without a chunk transform (or with one fused into decode) the tiles decode straight
  // into the slot's final memory; otherwise into scratch the transform reads.
  const bool resident = source.transform == nullptr || source.transform_in_decode;
  Result<ChunkPool::Prepared> prepared = pool_.Prepare(slot, source.resident.bytes(), source.stored.bytes(), resident);
  if (!prepared.ok()) return Loading::kRead;    // the slot failed with the backing's error
  if (prepared->revived && !prepared->check) {  // written since the machine booted: its bytes are as written
    if (slot->revalidation != nullptr) {        // served once conditional reads find the source unchanged
      StartRevalidation(slot, stats, first_touch);
      IssueReads();
      return Loading::kRevival;
    }
    CountRevival(*stats, true, first_touch);
    pool_.Revived(slot);
    return Loading::kRevival;
  }
  if (prepared->revived) {
    // Revived from the cache directory: its bytes are checked on a decode thread (the check
    // reads every byte, from disk if need be; several at once, off the scheduler's thread).
    // Counted as outstanding work: the engine outlives the check.
    {
      std::lock_guard lock(reads_mutex_);
      ++outstanding_;
    }
    Engine* self = this;
    decode_pool_->Submit([self, slot, crc = *prepared->check, stats = std::move(stats), first_touch] {
      self->CheckRevival(slot, crc, stats, first_touch);
      {
        std::lock_guard lock(self->reads_mutex_);
        --self->outstanding_;
      }
      self->ReadRoomFreed();
    });
    return Loading::kRevival;
  }
  QueueTileReads(slot, stats);
  IssueReads();
  return Loading::kRead;
}

void Engine::QueueTileReads(const std::shared_ptr<Slot>& slot, const std::shared_ptr<LoadStats>& stats,
                            bool conditional) {
  const ArraySource& source = sources_[slot->key.source];
  // What each tile's read sees, recorded with the slot's entry by a backing that keeps one.
  if (pool_.backing()->completes()) slot->generations.assign(source.stored.tiles, std::nullopt);
  // Until the pool first evicts, no slot memory has been recycled: each slot's is new (a
  // revalidating slot has none yet).
  const bool fresh = !conditional && pool_.counters().evictions == 0;
  const int64_t queued = stats->trace ? stats->trace->Now() : 0;
  std::lock_guard lock(reads_mutex_);
  const uint64_t admitted = admissions_++;
  for (uint64_t tile = 0; tile < source.stored.tiles; ++tile) {
    queued_reads_.push_back(TileRead{slot, tile, stats, 1, admitted, fresh, queued, conditional});
    ++outstanding_;
  }
}

void Engine::CountRevival(LoadStats& stats, bool served, bool first_touch) {
  // Counted before the slot is published: the batch it completes may reach the consumer at
  // once, and the pass's stats read then must include it.
  std::lock_guard lock(stats.mutex);
  stats.revived += served ? 1 : 0;
  stats.revived_hits += served && first_touch ? 1 : 0;
  stats.revive_rejected += served ? 0 : 1;
  stats.rejected_rereads += !served && !first_touch ? 1 : 0;
}

void Engine::CheckRevival(const std::shared_ptr<Slot>& slot, uint32_t crc32c, const std::shared_ptr<LoadStats>& stats,
                          bool first_touch) {
  if (slot->cancel.cancelled()) {  // abandoned: nobody will read it
    pool_.Publish(slot, Cancelled("the chunk was abandoned"), Buffer());
    return;
  }
  const bool intact = Crc32c(slot->data.span()) == crc32c;
  if (intact && slot->revalidation != nullptr) {
    // The bytes are those written; whether their source still is, conditional reads tell.
    StartRevalidation(slot, stats, first_touch);
    return;
  }
  CountRevival(*stats, intact, first_touch);
  if (intact) {
    pool_.Revived(slot);
    return;
  }
  // Not the bytes that were written (a power loss's zeros, an old page): a miss after all.
  const ArraySource& source = sources_[slot->key.source];
  const bool resident = source.transform == nullptr || source.transform_in_decode;
  if (pool_.Unrevived(slot, source.stored.bytes(), resident).ok()) QueueTileReads(slot, stats);
}

void Engine::IssueReads() {
  for (;;) {
    TileRead read;
    uint32_t inflight = 0;
    std::chrono::steady_clock::time_point issued;
    bool wake = false;  // the queue drained (a scheduler paces on it) or nothing is left
    bool fast = false;  // reads answer fast enough to be made on a decode thread
    {
      std::lock_guard lock(reads_mutex_);
      // Reads of abandoned slots are dropped unread: nobody will look at the slot.
      while (!queued_reads_.empty() && queued_reads_.front().slot->cancel.cancelled()) {
        queued_reads_.pop_front();
        --outstanding_;
        wake = true;
      }
      if (queued_reads_.empty() || !MayIssueLocked()) {
        if (wake) reads_cv_.notify_all();
        return;
      }
      read = std::move(queued_reads_.front());
      queued_reads_.pop_front();
      inflight = ++inflight_;
      issued = std::chrono::steady_clock::now();
      at_store_since_.insert(issued);
      fast = ReadsAreFastLocked();
      if (queued_reads_.empty()) reads_cv_.notify_all();
    }
    {
      std::lock_guard lock(read.stats->mutex);
      read.stats->inflight_peak = std::max<uint64_t>(read.stats->inflight_peak, inflight);
      read.stats->decode_queue_peak = std::max<uint64_t>(read.stats->decode_queue_peak, decode_pool_->queued());
    }
    TracePassNow(read.stats->trace.get(), PassEvent::kReadsInFlight, 0, 0, inflight);
    StartRead(std::move(read), issued, fast);
  }
}

bool Engine::MayIssueLocked() const {
  // Arrived bytes wait for a decoder; past one a thread, more reads only compete with the
  // decodes for the cores, unless each read waits on a network for longer than a decode.
  // (A local disk whose reads slow under that very competition would read ahead further and
  // slow them more: the first batch of a page-cached store took 1.4x as long.)
  return inflight_ < config_.max_inflight && at_store_since_.size() < ReadsToKeepAtStoreLocked() &&
         (arrived_.size() < decode_pool_->size() || (remote_ && !ReadsAreFastLocked()));
}

uint32_t Engine::ReadsToKeepAtStoreLocked() const {
  // A read still unanswered counts with its age, so a store that slows down (or one read
  // that hangs) raises the estimate before it answers.
  double latency = read_latency_s_;
  if (!at_store_since_.empty()) latency = std::max(latency, SecondsSince(*at_store_since_.begin()));
  return ReadsForLatencyLocked(latency);
}

uint32_t Engine::ReadsForLatencyLocked(double latency) const {
  const auto threads = static_cast<double>(decode_pool_->size());
  double needed;
  if (decode_wall_s_ <= 0) {
    // Nothing decoded yet: a store that answers within kUnansweredSeconds is a local disk,
    // whose reads would only take the cores from the decoders (even the first batch's);
    // a slower one gets every read at once, and so does one across a network from the
    // start (waiting kUnansweredSeconds to find that out delayed the first batch by as much).
    needed = remote_ || latency > kUnansweredSeconds ? config_.max_inflight : threads + 1;
  } else {
    // While one read is at the store the decode threads get through threads x latency /
    // decode time tiles: that many (and one more) keep them fed. A local store answers
    // within a fraction of a decode, so its reads go one or two at a time instead of all
    // max_inflight sharing the cores with the decoders and arriving late together.
    needed = threads * std::max(latency, 0.0) / decode_wall_s_ + 1;
  }
  return static_cast<uint32_t>(std::clamp(std::ceil(needed), 1.0, static_cast<double>(config_.max_inflight)));
}

void Engine::SizeReadAhead(OwnerId owner) {
  const uint64_t floor = config_.pass_floor_bytes;
  if (floor == 0) return;  // no per-pass quota: only the budget bounds the reads ahead
  uint32_t wanted = 0;
  // Until the first batch is out, what lands beyond its chunks takes the link and the
  // cores from them.
  const uint64_t most = first_batch_out_.load() || config_.first_batch_read_ahead_bytes == 0
                            ? std::numeric_limits<uint64_t>::max()
                            : config_.first_batch_read_ahead_bytes;
  {
    std::lock_guard lock(reads_mutex_);
    if (read_latency_s_ < 0 || decode_wall_s_ <= 0) {  // sized (again) once measured
      if (std::find(unsized_read_ahead_.begin(), unsized_read_ahead_.end(), owner) == unsized_read_ahead_.end()) {
        unsized_read_ahead_.push_back(owner);
      }
      if (!remote_) return;
      // A store across a network gets every read at once until measured
      // (ReadsForLatencyLocked), so its pass may pin them now: waiting for the first
      // answer held the first round trip's reads at the floor's two blocks.
      wanted = config_.max_inflight;
    } else {
      // A local disk's reads never need it (and its cache must stay within the floor).
      if (!remote_ && read_latency_s_ <= kUnansweredSeconds) return;
      wanted = ReadsForLatencyLocked(read_latency_s_);
    }
  }
  // Beyond the floor as a whole: its blocks hold decoded chunks waiting to be served, which
  // are no reads in flight (counting the floor's second block as read-ahead held a round
  // trip's reads back whenever a burst of answers filled it).
  const uint64_t extra = std::min(uint64_t{wanted} * widest_tile_bytes_, most);
  const uint64_t passes = std::max<uint64_t>(1, live_passes_.load());
  if (config_.auto_budget) pool_.GrowBudget(std::min(config_.max_auto_budget_bytes, (floor + extra) * passes));
  const uint64_t budget = pool_.budget_bytes();
  const uint64_t spare = budget == 0 ? extra : (budget > floor * passes ? (budget - floor * passes) / passes : 0);
  pool_.GrowQuota(owner, floor + std::min(extra, spare));
}

void Engine::FirstBatchOut(OwnerId owner) {
  first_batch_out_ = true;
  SizeReadAhead(owner);
}

void Engine::ForgetReadAhead(OwnerId owner) {
  std::lock_guard lock(reads_mutex_);
  std::erase(unsized_read_ahead_, owner);
}

void Engine::ObserveLocked(double& average, double sample) {
  constexpr double kWeight = 0.2;  // recent reads and decodes count most
  average = average < 0 ? sample : average + kWeight * (sample - average);
}

void Engine::ExpectBlockReads(const std::vector<SlotKey>& block) {
  std::map<uint32_t, std::vector<std::string>> keys;  // per source
  for (const SlotKey& key : block) {
    const ArraySource& source = sources_[key.source];
    if (!source.array->store()->wants_expected_reads() || pool_.Holds(key)) continue;
    for (uint64_t tile = 0; tile < source.stored.tiles; ++tile) {
      keys[key.source].push_back(source.array->ChunkKey(source.PhysicalCoords(key.chunk, tile)));
    }
  }
  for (auto& [source, list] : keys) sources_[source].array->store()->ExpectReads(list);
}

bool Engine::ReadsAreFastLocked() const {
  if (read_latency_s_ < 0) return true;  // nothing answered yet: the first reads are tried here
  // A read within kInlineReadFloorSeconds is a memory copy whatever the decode costs.
  const double limit = decode_wall_s_ > 0
                           ? std::clamp(decode_wall_s_ * kInlineReadShare, kInlineReadFloorSeconds, kInlineReadSeconds)
                           : kInlineReadSeconds;
  return read_latency_s_ <= limit;
}

void Engine::StartRead(TileRead read, std::chrono::steady_clock::time_point t0, bool fast) {
  const ArraySource& source = sources_[read.slot->key.source];
  const std::string key = source.array->ChunkKey(source.PhysicalCoords(read.slot->key.chunk, read.tile));
  // The slot's flag, kept alive by the slot (which the read holds).
  CancelRef cancel(read.slot, &read.slot->cancel);
  // Callbacks hold a raw pointer to the engine: it waits for every outstanding read
  // before it is destroyed, so its last reference is never dropped on an IO or decode
  // thread (whose pool the destructor would then try to join from inside).
  Engine* self = this;
  auto holder = std::make_shared<TileRead>(std::move(read));
  const std::shared_ptr<Store>& store = source.array->store();
  ByteRange range = source.array->ChunkReadRange();  // an oversized object is refused unread
  if (holder->conditional) range.if_none_match = holder->slot->revalidation->expected[holder->tile];
  if (fast && store->reads_inline()) {
    tokens_.QueuedForDecoder();  // a wait for a decoder, not the store, until it starts
    // A read from the page cache takes a fraction of a decode: the decode thread that will
    // decode the bytes reads them, sparing an IO thread's wake-up and a hand-off per chunk.
    // Its time counts from when the pread starts, so a read queued behind decodes does not
    // look like a slow store; a store that turns slow goes back to the IO threads.
    decode_pool_->Submit([self, holder, t0, store, key, range, cancel = std::move(cancel)] {
      self->tokens_.ReadingOnDecoder();
      const auto started = std::chrono::steady_clock::now();
      Result<ReadResult> bytes =
          IsCancelled(cancel)
              ? Result<ReadResult>(Cancelled("reading " + store->Describe(key) + range.Describe() + ": cancelled"))
              : store->ReadInline(key, range);
      self->ReadAnswered(std::move(*holder), t0, SecondsSince(started), std::move(bytes));
      self->DecodeNext();
    });
    return;
  }
  tokens_.Asked();
  store->ReadAsync(
      key, range,
      [self, holder, t0](Result<ReadResult> bytes) mutable {
        self->ReadAnswered(std::move(*holder), t0, SecondsSince(t0), std::move(bytes));
        // IO threads never decode: the bytes wait, ordered by first use, for the next free
        // decode thread (one task per arrival, each decoding the earliest waiting).
        self->decode_pool_->Submit([self] { self->DecodeNext(); });
      },
      std::move(cancel));
}

void Engine::ReadAnswered(TileRead read, std::chrono::steady_clock::time_point issued, double waited,
                          Result<ReadResult> bytes) {
  tokens_.Answered();
  if (TraceRecorder* trace = read.stats->trace.get()) {
    // At the store for its last `waited` seconds; queued before that (for a token, or for
    // the decode thread that reads it).
    const SlotKey& key = read.slot->key;
    const uint64_t stored = bytes.ok() && bytes->found ? bytes->data.size() : 0;
    const uint64_t tile = read.tile | uint64_t{static_cast<uint32_t>(read.attempt)} << 32 | uint64_t{!bytes.ok()} << 40;
    const int64_t now = trace->Now();
    const int64_t at_store = std::max(trace->At(issued), now - static_cast<int64_t>(waited * 1e9));
    TracePass(trace, PassEvent::kRead, read.queued_ns, now, key.source, key.chunk, stored, tile,
              std::clamp(at_store, read.queued_ns, now));
  }
  auto arrived = std::make_shared<ArrivedRead>(ArrivedRead{std::move(read), std::move(bytes), waited});
  std::lock_guard lock(reads_mutex_);
  at_store_since_.erase(at_store_since_.find(issued));
  ObserveLocked(read_latency_s_, waited);
  arrived_.push(std::move(arrived));
  // Room at the store: a waiting scheduler starts the next read (never an IO thread).
  if (issuers_waiting_ > 0 && !queued_reads_.empty() && MayIssueLocked()) reads_cv_.notify_all();
}

// A tile whose stored chunk splits into parts (a shard's inner chunks): decode threads
// claim parts one at a time, each writing straight into its region of the tile, and the
// thread that completes the last part finishes the tile. A helper that starts after every
// part was claimed touches nothing but `next` and `count`.
struct Engine::PartedTile {
  TileRead read;
  uint64_t count = 0;
  Buffer stored;  // the chunk's bytes, which `parts` views
  std::unique_ptr<const zarr::ChunkParts> parts;
  std::span<std::byte> out;                      // the tile, or `physical`
  Buffer physical;                               // sample axis not first: decoded here, then moved
  std::optional<zarr::DecodeProgress> progress;  // a chunk transform fused into decode
  TileDecoded decoded;                           // status and cpu_s under `mutex`
  std::atomic<uint64_t> next{0};                 // the next part to claim
  std::atomic<uint64_t> left{0};                 // parts not yet done
  std::atomic<bool> stop{false};                 // a part failed or the slot was abandoned
  std::atomic<uint32_t> busy{0};
  std::atomic<uint32_t> busy_peak{0};
  std::mutex mutex;
};

Engine::GatherClaim::GatherClaim(Engine& engine)
    : engine_(engine), threads_(static_cast<uint32_t>(engine.gather_threads())) {
  std::lock_guard lock(engine_.cores_mutex_);
  engine_.gathering_ += threads_;
}

Engine::GatherClaim::~GatherClaim() {
  {
    std::lock_guard lock(engine_.cores_mutex_);
    engine_.gathering_ -= threads_;
  }
  engine_.cores_cv_.notify_all();
}

void Engine::DecodeNext() {
  {
    std::unique_lock lock(cores_mutex_);
    cores_cv_.wait(lock, [this] { return gathering_ == 0 || decoding_ == 0 || decoding_ + gathering_ < cores_; });
    ++decoding_;
  }
  std::shared_ptr<ArrivedRead> next;
  {
    std::lock_guard lock(reads_mutex_);
    next = arrived_.top();
    arrived_.pop();
  }
  ReadRoomFreed();  // one fewer waits for a decoder: the next read may start meanwhile
  DecodeTile(std::move(next->read), std::move(next->bytes), next->fetch_wait_s);
  {
    std::lock_guard lock(cores_mutex_);
    --decoding_;
  }
  cores_cv_.notify_one();
}

void Engine::DecodeTile(TileRead read, Result<ReadResult> bytes, double fetch_wait_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  const std::shared_ptr<Slot>& slot = read.slot;
  const ArraySource& source = sources_[slot->key.source];
  const zarr::Array& array = *source.array;
  const std::vector<uint64_t> coords = source.PhysicalCoords(slot->key.chunk, read.tile);
  const uint64_t tile_bytes = source.stored.tile_bytes;
  if (bytes.ok() && !slot->generations.empty()) slot->generations[read.tile] = TileGeneration(*bytes);
  TileDecoded decoded;
  decoded.started = t0;
  decoded.fetch_wait_s = fetch_wait_s;
  if (read.conditional) {  // a revived slot's tile: decoded only if its source changed
    // An object there but unreadable as a chunk (DataLoss: larger than any encoding of it,
    // say) is not the one cached: the slot is read as changed, and the error is the tile's.
    ReadResult unreadable;
    unreadable.found = true;
    const TileCheck check = bytes.ok()                   ? CheckTile(read, *bytes, &decoded.status)
                            : IsBadChunk(bytes.status()) ? CheckTile(read, unreadable, &decoded.status)
                                                         : TileCheck::kFailed;
    if (check == TileCheck::kRequeued) return;
    if (check != TileCheck::kDecode) {
      // kSkip: nothing to report (the slot is unchanged so far, or failed already).
      if (check == TileCheck::kFailed && decoded.status.ok()) {
        decoded.status = bytes.status().WithContext(zarr::DescribeChunk(array.path(), coords));
      }
      if (bytes.ok()) {
        decoded.retry = std::move(bytes->retry);
        decoded.stored_bytes = bytes->data.size();
      }
      decoded.cpu_s = ThreadCpuSeconds() - cpu0;
      FinishTile(std::move(read), std::move(decoded));
      return;
    }
  }
  std::span<std::byte> dst(slot->data.data() + read.tile * tile_bytes, tile_bytes);
  if (read.fresh) PopulatePages(dst.data(), dst.size());
  Status& status = decoded.status;
  std::shared_ptr<PartedTile> parted;  // set when the chunk decodes in parts
  if (!bytes.ok()) {
    status = bytes.status().WithContext(zarr::DescribeChunk(array.path(), coords));
  } else if (!bytes->found) {
    decoded.retry = std::move(bytes->retry);
    array.FillChunk(dst);
  } else
    try {
      decoded.retry = std::move(bytes->retry);
      decoded.stored_bytes = bytes->data.size();
      // A chunk that splits into parts (a shard: its index is read here, once) is decoded
      // by up to one decode thread per part.
      Result<std::unique_ptr<const zarr::ChunkParts>> parts = std::unique_ptr<const zarr::ChunkParts>();
      if (decode_pool_->size() > 1) parts = array.SplitChunk(bytes->data.span(), coords);
      Result<Buffer> physical = Buffer();  // where a chunk decodes when its sample axis is not first
      if (source.sample_axis != 0 && !source.transform_in_decode) physical = pool_.TakeBuffer(tile_bytes);
      if (!parts.ok() || !physical.ok()) {
        status = !parts.ok() ? parts.status() : physical.status();
      } else if (*parts != nullptr && (*parts)->count() > 1) {
        parted = std::make_shared<PartedTile>();
        parted->count = (*parts)->count();
        parted->left = parted->count;
        parted->parts = std::move(parts).value();
        parted->stored = std::move(bytes->data);
        parted->physical = std::move(physical).value();
        parted->out = parted->physical.empty() ? dst : parted->physical.span();
        if (source.transform_in_decode) {
          const size_t itemsize = source.stored.itemsize();
          const ChunkTransform* transform = source.transform.get();
          parted->progress =
              zarr::DecodeProgress{itemsize, [transform, dst, itemsize](size_t offset, size_t length) {
                                     transform->ApplyToRun(dst.subspan(offset, length), offset / itemsize);
                                   }};
          decoded.transformed = true;
        }
      } else if (source.transform_in_decode) {
        const size_t itemsize = source.stored.itemsize();
        const zarr::DecodeProgress progress{itemsize, [&](size_t offset, size_t length) {
                                              source.transform->ApplyToRun(dst.subspan(offset, length),
                                                                           offset / itemsize);
                                            }};
        status = array.DecodeChunk(bytes->data.span(), coords, dst, &progress);
        decoded.transformed = status.ok();
      } else if (physical->empty()) {
        status = array.DecodeChunk(bytes->data.span(), coords, dst);
      } else {
        status = array.DecodeChunk(bytes->data.span(), coords, physical->span());
        if (status.ok()) {
          MoveSampleAxisToFront(physical->data(), dst.data(), array.metadata().chunk_shape, source.sample_axis,
                                source.stored.itemsize());
        }
      }
      bytes->data = Buffer();          // the stored bytes are no longer needed
    } catch (const std::bad_alloc&) {  // the read must still end: never let it out
      status = ResourceExhausted("out of memory decoding " + zarr::DescribeChunk(array.path(), coords));
      parted.reset();
    }
  decoded.cpu_s = ThreadCpuSeconds() - cpu0;
  if (TraceRecorder* trace = read.stats->trace.get()) {
    TracePass(trace, PassEvent::kDecode, trace->At(t0), trace->Now(), slot->key.source, slot->key.chunk,
              decoded.stored_bytes, read.tile);
  }
  if (parted == nullptr) {
    FinishTile(std::move(read), std::move(decoded));
    return;
  }
  parted->decoded = std::move(decoded);  // the index's cost so far
  parted->read = std::move(read);
  Engine* self = this;
  const uint64_t helpers = std::min<uint64_t>(parted->count, decode_pool_->size()) - 1;
  for (uint64_t h = 0; h < helpers; ++h) decode_pool_->Submit([self, parted] { self->DecodeParts(parted); });
  DecodeParts(parted);
}

void Engine::DecodeParts(const std::shared_ptr<PartedTile>& tile) {
  PartedTile& t = *tile;
  uint64_t part = t.next.fetch_add(1, std::memory_order_relaxed);
  if (part >= t.count) return;  // every part was claimed (perhaps the tile is finished)
  const uint32_t busy = t.busy.fetch_add(1, std::memory_order_relaxed) + 1;
  for (uint32_t peak = t.busy_peak.load(std::memory_order_relaxed);
       busy > peak && !t.busy_peak.compare_exchange_weak(peak, busy, std::memory_order_relaxed);) {
  }
  double cpu = ThreadCpuSeconds();
  bool last = false;
  // Used only before this thread's last part is counted done (the tile may go after that).
  TraceRecorder* trace = t.read.stats->trace.get();
  for (; part < t.count; part = t.next.fetch_add(1, std::memory_order_relaxed)) {
    const int64_t part_start = trace != nullptr ? trace->Now() : 0;
    Status status;
    if (t.read.slot->cancel.cancelled()) {
      status = Cancelled("the chunk was abandoned");
    } else if (!t.stop.load(std::memory_order_relaxed)) {
      try {
        status = t.parts->DecodePart(part, t.out, t.progress ? &*t.progress : nullptr);
      } catch (const std::bad_alloc&) {
        status = ResourceExhausted("out of memory decoding part " + std::to_string(part) + " of a chunk");
      }
    }
    const double now = ThreadCpuSeconds();
    {
      std::lock_guard lock(t.mutex);
      t.decoded.cpu_s += now - cpu;
      if (!status.ok()) {
        if (t.decoded.status.ok()) t.decoded.status = std::move(status);
        t.stop = true;  // the tile has failed: the other parts need not decode
      }
    }
    cpu = now;
    if (trace != nullptr) {
      TracePass(trace, PassEvent::kDecodePart, part_start, trace->Now(), t.read.slot->key.source,
                t.read.slot->key.chunk, part, t.read.tile);
    }
    // acq_rel: the thread that completes the last part sees every other part's writes.
    if (t.left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      last = true;
      break;
    }
  }
  t.busy.fetch_sub(1, std::memory_order_relaxed);
  if (!last) return;
  TileDecoded decoded;
  {
    std::lock_guard lock(t.mutex);
    decoded = std::move(t.decoded);
  }
  decoded.decoders = t.busy_peak.load(std::memory_order_relaxed);
  if (!decoded.status.ok()) decoded.transformed = false;
  const double cpu0 = ThreadCpuSeconds();
  if (decoded.status.ok() && !t.physical.empty()) {
    const ArraySource& source = sources_[t.read.slot->key.source];
    const uint64_t tile_bytes = source.stored.tile_bytes;
    MoveSampleAxisToFront(t.physical.data(), t.read.slot->data.data() + t.read.tile * tile_bytes,
                          source.array->metadata().chunk_shape, source.sample_axis, source.stored.itemsize());
  }
  decoded.cpu_s += ThreadCpuSeconds() - cpu0;
  t.parts.reset();  // before the bytes it views
  t.stored = Buffer();
  t.physical = Buffer();
  FinishTile(std::move(t.read), std::move(decoded));
}

void Engine::FinishTile(TileRead read, TileDecoded decoded) {
  const double cpu0 = ThreadCpuSeconds();
  const std::shared_ptr<Slot>& slot = read.slot;
  const ArraySource& source = sources_[slot->key.source];
  const zarr::Array& array = *source.array;
  const uint64_t tile_bytes = source.stored.tile_bytes;
  Status& status = decoded.status;
  const bool cancelled = slot->cancel.cancelled() || status.code() == StatusCode::kCancelled;
  LoadStats& stats = *read.stats;
  const std::shared_ptr<TraceRecorder> trace = stats.trace;  // outlives `read` below
  const SlotKey key = slot->key;
  if (decoded.retry.retries != 0) {
    TracePassNow(trace.get(), PassEvent::kRetry, key.source, key.chunk, decoded.retry.retries,
                 static_cast<uint64_t>(decoded.retry.backoff_s * 1e9));
  }
  auto account = [&] {
    std::lock_guard lock(stats.mutex);
    stats.fetch_wait_s += decoded.fetch_wait_s;
    stats.decode_s += decoded.cpu_s + (ThreadCpuSeconds() - cpu0);
    ++stats.tiles_read;
    stats.bytes_read += decoded.stored_bytes;
    stats.chunk_decoders_peak = std::max<uint64_t>(stats.chunk_decoders_peak, decoded.decoders);
    stats.retry.retries += decoded.retry.retries;
    stats.retry.backoff_s += decoded.retry.backoff_s;
    if (!decoded.retry.last_error.empty()) stats.retry.last_error = std::move(decoded.retry.last_error);
  };
  if (!status.ok() && !cancelled && read.attempt == 1 && WorthReadingAgain(status)) {
    account();
    {
      std::lock_guard lock(stats.mutex);
      ++stats.retry.corrupt_rereads;
      stats.retry.last_error = status.message();
    }
    read.attempt = 2;
    TracePassNow(trace.get(), PassEvent::kReread, key.source, key.chunk, 0, read.tile);
    if (trace) read.queued_ns = trace->Now();
    uint32_t inflight = 0;
    {
      std::lock_guard lock(reads_mutex_);
      inflight = --inflight_;  // the token goes back; the read waits for one at the head of the queue
      queued_reads_.push_front(std::move(read));
    }
    TracePassNow(trace.get(), PassEvent::kReadsInFlight, 0, 0, inflight);
    tokens_.Returned();
    ReadRoomFreed();
    return;
  }
  std::optional<BadChunk> bad;
  if (!status.ok() && !cancelled && config_.on_bad_chunk == OnBadChunk::kNan && IsBadChunk(status)) {
    FillBadTile(array, std::span<std::byte>(slot->data.data() + read.tile * tile_bytes, tile_bytes));
    std::vector<uint64_t> inner = source.PhysicalCoords(slot->key.chunk, read.tile);
    inner.erase(inner.begin() + source.sample_axis);
    bad = BadChunk{array.path(), slot->key.chunk, std::move(inner), status.message()};
    status = Status::Ok();
    TracePassNow(trace.get(), PassEvent::kBadChunk, key.source, key.chunk, 0, read.tile);
  }
  account();
  if (pool_.TileDone(slot, status, bad ? &*bad : nullptr)) {
    if (FinishRevalidation(slot, stats)) {
      // served from the cache directory: its source is unchanged
    } else if (source.transform) {
      TransformSlot(slot, decoded.transformed, stats);
    } else {
      pool_.Publish(slot, Status::Ok(), std::move(slot->data));  // to the backing, then READY
    }
  }
  read = TileRead{};  // drop the slot and stats before the engine may go
  const double wall_s = SecondsSince(decoded.started);
  std::vector<OwnerId> unsized;
  uint32_t inflight = 0;
  {
    std::lock_guard lock(reads_mutex_);
    if (decode_wall_s_ < 0) reads_cv_.notify_all();  // the first: a scheduler may wait for it
    ObserveLocked(decode_wall_s_, wall_s);
    if (read_latency_s_ >= 0 && !unsized_read_ahead_.empty()) {
      unsized.swap(unsized_read_ahead_);
    } else {
      inflight = --inflight_;
      --outstanding_;
    }
  }
  if (!unsized.empty()) {
    // Before this read stops counting as outstanding (the engine may go once none is).
    for (const OwnerId owner : unsized) SizeReadAhead(owner);
    std::lock_guard lock(reads_mutex_);
    inflight = --inflight_;
    --outstanding_;
  }
  TracePassNow(trace.get(), PassEvent::kReadsInFlight, 0, 0, inflight);
  tokens_.Returned();
  ReadRoomFreed();
}

void Engine::ReadRoomFreed() {
  {
    std::lock_guard lock(reads_mutex_);
    // Notified under the lock: once the destructor sees zero the engine may go at once.
    if (outstanding_ == 0) reads_cv_.notify_all();
    if (queued_reads_.empty() || !MayIssueLocked()) return;
    if (issuers_waiting_ > 0) {  // a scheduler waits to start the next read itself
      reads_cv_.notify_all();
      return;
    }
  }
  IssueReads();  // nobody else will: this (decode) thread starts it
}

void Engine::TransformSlot(const std::shared_ptr<Slot>& slot, bool applied, LoadStats& stats) {
  if (slot->cancel.cancelled()) {  // abandoned: nobody will read it
    pool_.Publish(slot, Cancelled("the chunk was abandoned"), Buffer());
    return;
  }
  // Wall time, not CPU: a Python transform's cost includes waiting for the GIL (and any
  // I/O it does), which a CPU clock would hide from the limiting-stage verdict.
  const auto t0 = std::chrono::steady_clock::now();
  const ArraySource& source = sources_[slot->key.source];
  const int64_t chunk = slot->key.chunk;
  const int64_t first = chunk * source.spc;
  const auto samples = static_cast<uint64_t>(std::min(source.spc, source.n_samples - first));
  auto run = [&]() -> Result<Buffer> {
    if (applied) return std::move(slot->data);
    // The transform sees the outer chunk sample-first and unpadded. A chunk stored as one
    // whole-field tile already is (the padding rows past `samples` are never read), so its
    // memory is handed over as is: the slot owns it exclusively until Publish replaces it.
    std::shared_ptr<Buffer> data;
    if (source.stored.tiles == 1 && source.stored.tile_shape == source.stored.field_shape &&
        source.stored.pieces.empty()) {
      data = std::make_shared<Buffer>(std::move(slot->data));
    } else {
      INSITU_ASSIGN_OR_RETURN(Buffer assembled, pool_.TakeBuffer(samples * source.stored.sample_bytes()));
      std::vector<int64_t> anchors(samples);
      for (uint64_t i = 0; i < samples; ++i) anchors[i] = first + static_cast<int64_t>(i);
      GatherLabel(
          source.stored, source.spc, Label{"", slot->key.source, 0, {}, {}}, anchors,
          [&](SlotKey) -> const Slot& { return *slot; }, assembled.data());
      data = std::make_shared<Buffer>(std::move(assembled));
    }
    ChunkTransformInput input;
    input.array_path = source.path();
    input.chunk_index = chunk;
    input.sample_offset = first;
    input.samples = samples;
    input.data = std::move(data);
    input.layout = &source.stored;
    const uint64_t out_bytes = samples * source.resident.sample_bytes();
    if (source.transform->in_place() && input.data->size() >= source.resident.bytes()) {
      std::span<std::byte> inout(input.data->data(), out_bytes);
      INSITU_RETURN_IF_ERROR(source.transform->Apply(input, inout));
      return std::move(*input.data);
    }
    INSITU_ASSIGN_OR_RETURN(Buffer output, pool_.TakeBuffer(source.resident.bytes()));
    INSITU_RETURN_IF_ERROR(source.transform->Apply(input, std::span<std::byte>(output.data(), out_bytes)));
    // The rows past the array's end in a last partial chunk: never gathered, but a disk
    // slot writes them to its file, and recycled memory must not end up there.
    std::memset(output.data() + out_bytes, 0, output.size() - out_bytes);
    return output;
  };
  Result<Buffer> output = run();
  if (output.ok()) {
    pool_.Publish(slot, Status::Ok(), std::move(output).value());
  } else {
    pool_.Publish(
        slot, output.status().WithContext("chunk_transform on '" + source.path() + "' chunk " + std::to_string(chunk)),
        Buffer());
  }
  if (TraceRecorder* trace = stats.trace.get()) {
    TracePass(trace, PassEvent::kTransform, trace->At(t0), trace->Now(), slot->key.source, chunk);
  }
  std::lock_guard lock(stats.mutex);
  stats.assemble_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace insitubatch::engine
