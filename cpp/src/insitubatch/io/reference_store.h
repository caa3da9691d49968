#pragma once

// ReferenceStore: a read-only Store over a ReferenceSet. A key's bytes are inline, or a byte
// range read from the target object through that target's own store (file, HTTP, S3, GCS,
// with its own options and credentials). A range read of a key is confined to the range its
// reference names; a reference past the end of its target is DataLoss naming the key.

#include <memory>
#include <string>
#include <vector>

#include "insitubatch/io/reference_set.h"
#include "insitubatch/io/store.h"

namespace insitubatch {

// Where one target URL of a set is read from: `store` at `key`.
struct ReferenceTarget {
  std::shared_ptr<Store> store;
  std::string key;
};

class ReferenceStore final : public Store {
 public:
  // `targets[i]` serves `refs.targets()[i]`. `name` (the reference file) appears in messages.
  static Result<std::shared_ptr<ReferenceStore>> Open(ReferenceSet refs,
                                                      std::vector<ReferenceTarget> targets,
                                                      std::string name);

  using Store::ReadAsync;
  void ReadAsync(std::string key, ByteRange range, ReadCallback done,
                 CancelRef cancel) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  std::string Describe(std::string_view key) const override;

  const ReferenceSet& references() const { return refs_; }
  const std::string& name() const { return name_; }

 private:
  ReferenceStore(ReferenceSet refs, std::vector<ReferenceTarget> targets, std::string name)
      : refs_(std::move(refs)), targets_(std::move(targets)), name_(std::move(name)) {}

  ReferenceSet refs_;
  std::vector<ReferenceTarget> targets_;
  std::string name_;
};

}  // namespace insitubatch
