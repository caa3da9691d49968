#include "insitubatch/io/references/reference_store.h"

#include <algorithm>
#include <cstdio>
#include <span>

#include "insitubatch/io/memory_store.h"
#include "insitubatch/util/crc32c.h"

namespace insitubatch {
namespace {

// A key's generation: of the bytes a reference names, so a reference moved to other
// bytes of the same object is a change too. Inline bytes: their checksum; a range: the
// target's generation (if its store gives one) and the range.
std::string ReferenceGeneration(const Reference& ref, const std::string& target) {
  if (ref.target < 0) {
    char text[32];
    std::snprintf(text, sizeof(text),
                  "inline:%08x:", static_cast<unsigned>(Crc32c(std::as_bytes(std::span(ref.data)))));
    return text + std::to_string(ref.data.size());
  }
  if (target.empty() || ref.whole) return target;
  return target + "@" + std::to_string(ref.offset) + "+" + std::to_string(ref.length);
}

}  // namespace

Result<std::shared_ptr<ReferenceStore>> ReferenceStore::Open(ReferenceSet refs, std::vector<ReferenceTarget> targets,
                                                             std::string name) {
  if (targets.size() != refs.targets().size()) {
    return InvalidArgument(name + ": " + std::to_string(refs.targets().size()) + " target URLs but " +
                           std::to_string(targets.size()) + " target stores");
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    auto where = [&] {
      return name + ": reference \"" + refs.first_key_of(i) + "\" points to \"" + refs.targets()[i] + "\"";
    };
    if (!targets[i].store) return InvalidArgument(where() + ", which has no store");
    if (Status s = ValidateKey(targets[i].key); !s.ok()) return s.WithContext(where());
  }
  return std::shared_ptr<ReferenceStore>(new ReferenceStore(std::move(refs), std::move(targets), std::move(name)));
}

void ReferenceStore::ExpectReads(const std::vector<std::string>& keys) {
  std::lock_guard lock(ahead_mutex_);
  // A new block: what the last one expected but did not ask for was served from the pool
  // or abandoned (the engine asks for a block's reads before it announces the next), so
  // it is forgotten, and bytes fetched for it are let go.
  for (auto it = ahead_.begin(); it != ahead_.end();) {
    if (it->second.state == Ahead::State::kFetching) {
      ++it;
      continue;
    }
    held_bytes_ -= it->second.bytes.size();
    it = ahead_.erase(it);
  }
  expected_at_.clear();
  if (keys.size() > kMaxExpected) return;
  for (const std::string& key : keys) {
    const Reference* ref = refs_.Find(key);
    if (ref == nullptr || ref->target < 0 || ref->whole || ref->length == 0 || ahead_.contains(key)) continue;
    ahead_.emplace(key, Ahead{});
    expected_at_[{static_cast<size_t>(ref->target), ref->offset}] = key;
  }
}

void ReferenceStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  if (range.kind == ByteRange::Kind::kAll) {
    std::unique_lock lock(ahead_mutex_);
    auto it = ahead_.find(key);
    if (it != ahead_.end()) {
      Ahead& ahead = it->second;
      if (ahead.state == Ahead::State::kHeld) {
        ReadResult out;
        out.found = true;
        out.data = std::move(ahead.bytes);
        out.generation = std::move(ahead.generation);
        held_bytes_ -= out.data.size();
        ahead_.erase(it);
        lock.unlock();
        done(std::move(out));
        return;
      }
      if (ahead.state == Ahead::State::kFetching) {
        ahead.waiters.push_back({std::move(done), std::move(cancel)});
        return;
      }
      // Expected: gather the expected neighbours whose bytes continue this key's, both ways.
      const Reference& ref = *refs_.Find(key);
      const size_t target = static_cast<size_t>(ref.target);
      expected_at_.erase({target, ref.offset});
      const Reference* first = &ref;
      std::vector<std::string> run{key};
      uint64_t begin = ref.offset;
      uint64_t end = ref.offset + ref.length;
      const uint64_t room = held_bytes_ < kMaxHeldBytes ? std::min(kMaxRunBytes, kMaxHeldBytes - held_bytes_) : 0;
      for (auto next = expected_at_.find({target, end}); next != expected_at_.end();
           next = expected_at_.find({target, end})) {
        const Reference& r = *refs_.Find(next->second);
        if (end + r.length - begin > room) break;
        run.push_back(next->second);
        end += r.length;
        expected_at_.erase(next);
      }
      for (;;) {
        auto prev = expected_at_.lower_bound({target, begin});
        if (prev == expected_at_.begin()) break;
        --prev;
        const Reference& r = *refs_.Find(prev->second);
        if (prev->first.first != target || r.offset + r.length != begin || end - r.offset > room) break;
        run.insert(run.begin(), prev->second);
        begin = r.offset;
        first = &r;
        expected_at_.erase(prev);
      }
      if (run.size() == 1) {
        ahead_.erase(it);
        lock.unlock();
        ReadDirect(std::move(key), range, std::move(done), std::move(cancel));
        return;
      }
      for (const std::string& k : run) ahead_[k].state = Ahead::State::kFetching;
      ahead.waiters.push_back({std::move(done), cancel});
      lock.unlock();
      FetchRun(std::move(run), *first, end, std::move(cancel));
      return;
    }
  }
  ReadDirect(std::move(key), range, std::move(done), std::move(cancel));
}

void ReferenceStore::FetchRun(std::vector<std::string> run, const Reference& first, uint64_t end, CancelRef cancel) {
  const ReferenceTarget& target = targets_[static_cast<size_t>(first.target)];
  const uint64_t begin = first.offset;
  target_reads_.fetch_add(1, std::memory_order_relaxed);
  target.store->ReadAsync(
      target.key, ByteRange::Range(begin, end - begin),
      [this, run = std::move(run), begin](Result<ReadResult> result) {
        const bool ok = result.ok() && result->found;
        std::vector<std::pair<ReadCallback, Result<ReadResult>>> serve;
        std::vector<std::pair<std::string, Ahead::Waiter>> again;
        {
          std::lock_guard lock(ahead_mutex_);
          for (const std::string& key : run) {
            auto it = ahead_.find(key);
            if (it == ahead_.end()) continue;
            std::vector<Ahead::Waiter> waiters = std::move(it->second.waiters);
            Result<Buffer> piece = InvalidArgument("unused");
            if (ok) {
              const Reference& ref = *refs_.Find(key);
              piece = Buffer::CopyOf(result->data.span().subspan(ref.offset - begin, ref.length));
            }
            if (!ok || !piece.ok()) {
              // Read again on its own (whoever asks later reads it directly too): its
              // error, or its bytes if only a neighbour was bad, are then its own.
              ahead_.erase(it);
              for (Ahead::Waiter& w : waiters) again.push_back({key, std::move(w)});
              continue;
            }
            std::string generation = ReferenceGeneration(*refs_.Find(key), result->generation);
            if (waiters.empty()) {
              held_bytes_ += piece->size();
              it->second.state = Ahead::State::kHeld;
              it->second.bytes = std::move(*piece);
              it->second.generation = std::move(generation);
              continue;
            }
            ahead_.erase(it);
            for (size_t w = 0; w < waiters.size(); ++w) {
              ReadResult out;
              out.found = true;
              out.generation = generation;
              if (w + 1 == waiters.size()) {
                out.data = std::move(*piece);
              } else {
                auto copy = Buffer::CopyOf(piece->span());
                if (!copy.ok()) {
                  serve.emplace_back(std::move(waiters[w].done), copy.status());
                  continue;
                }
                out.data = std::move(*copy);
              }
              out.retry = result->retry;
              serve.emplace_back(std::move(waiters[w].done), std::move(out));
            }
          }
        }
        for (auto& [done, r] : serve) done(std::move(r));
        // Each with its own cancel flag: a run its requester abandoned still serves the
        // others, and an abandoned caller's re-read ends at once.
        for (auto& [key, w] : again) ReadDirect(key, ByteRange::All(), std::move(w.done), std::move(w.cancel));
      },
      std::move(cancel));
}

void ReferenceStore::ReadDirect(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
  const Reference* ref = refs_.Find(key);
  if (ref == nullptr) {
    done(ReadResult::Missing());
    return;
  }
  if (ref->target < 0) {  // inline bytes
    auto span = ResolveRange(range, ref->data.size());
    if (!span.ok()) {
      done(span.status().WithContext(Describe(key) + range.Describe()));
      return;
    }
    auto data = Buffer::CopyOf(std::as_bytes(std::span(ref->data)).subspan(span->begin, span->end - span->begin));
    if (!data.ok()) {
      done(data.status());
      return;
    }
    ReadResult out;
    out.found = true;
    out.data = std::move(*data);
    out.generation = ReferenceGeneration(*ref, "");
    done(std::move(out));
    return;
  }
  const ReferenceTarget& target = targets_[static_cast<size_t>(ref->target)];
  ByteRange inner = range;
  inner.if_none_match.clear();  // a key's generation is not its target's: the read is made in full
  if (!ref->whole) {
    // Confine the read to the referenced bytes, then shift it into the target object.
    auto span = ResolveRange(range, ref->length);
    if (!span.ok()) {
      done(span.status().WithContext(Describe(key) + range.Describe()));
      return;
    }
    inner = ByteRange::Range(ref->offset + span->begin, span->end - span->begin);
  }
  std::string where = Describe(key);
  target_reads_.fetch_add(1, std::memory_order_relaxed);
  target.store->ReadAsync(
      target.key, inner,
      [done = std::move(done), where = std::move(where), ref](Result<ReadResult> result) {
        if (!result.ok()) {
          done(result.status().WithContext(where));
        } else if (!result->found) {
          // The reference names an object that is not there: never a silent fill value.
          done(NotFound(where + ": the target object does not exist"));
        } else {
          result->generation = ReferenceGeneration(*ref, result->generation);
          done(std::move(result));
        }
      },
      std::move(cancel));
}

Result<std::vector<std::string>> ReferenceStore::List(std::string_view prefix) { return refs_.Keys(prefix); }

std::string ReferenceStore::Describe(std::string_view key) const {
  std::string out = name_ + ":" + std::string(key);
  const Reference* ref = refs_.Find(key);
  if (ref != nullptr && ref->target >= 0) {
    out += " -> " + refs_.targets()[static_cast<size_t>(ref->target)];
    if (!ref->whole) out += ByteRange::Range(ref->offset, ref->length).Describe();
  }
  return out;
}

}  // namespace insitubatch
