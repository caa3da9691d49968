#include "insitubatch/io/reference_store.h"

#include <span>

#include "insitubatch/io/memory_store.h"

namespace insitubatch {

Result<std::shared_ptr<ReferenceStore>> ReferenceStore::Open(ReferenceSet refs,
                                                             std::vector<ReferenceTarget> targets,
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

void ReferenceStore::ReadAsync(std::string key, ByteRange range, ReadCallback done, CancelRef cancel) {
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
    done(std::move(out));
    return;
  }
  const ReferenceTarget& target = targets_[static_cast<size_t>(ref->target)];
  ByteRange inner = range;
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
  target.store->ReadAsync(
      target.key, inner,
      [done = std::move(done), where = std::move(where)](Result<ReadResult> result) {
        if (!result.ok()) {
          done(result.status().WithContext(where));
        } else if (!result->found) {
          // The reference names an object that is not there: never a silent fill value.
          done(NotFound(where + ": the target object does not exist"));
        } else {
          done(std::move(result));
        }
      },
      std::move(cancel));
}

Result<std::vector<std::string>> ReferenceStore::List(std::string_view prefix) {
  return refs_.Keys(prefix);
}

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
