#pragma once

// ReferenceSet: a virtual Zarr store's key -> bytes map, where a value is either inline bytes
// or a byte range inside another object (a FITS, HDF5 or netCDF file, a GRIB message).
// Parsed from kerchunk's JSON reference files (version 0, and version 1 with templates and
// `gen`) or built entry by entry (the parquet form is read by Python and added here). Every
// reference is untrusted: a negative, non-integer or overflowing offset or length, an
// unknown template name or a generator that would expand past the limit is an error naming
// the key.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/util/result.h"

namespace insitubatch {

struct Reference {
  // Inline bytes when target < 0; otherwise bytes [offset, offset + length) of
  // targets[target], or the whole object when `whole`.
  int64_t target = -1;
  bool whole = false;
  uint64_t offset = 0;
  uint64_t length = 0;
  std::string data;
};

class ReferenceSet {
 public:
  // Largest number of references one set may hold (a `gen` entry can describe millions).
  static constexpr uint64_t kMaxReferences = uint64_t{50} << 20;

  // Parses kerchunk JSON; `where` (the file's name) prefixes every error.
  static Result<ReferenceSet> ParseJson(std::string_view text, std::string_view where);

  // Adds (or replaces) one reference. `url` empty means the whole-set default target,
  // which must then be given in `default_target` at parse time (it is an error here).
  Status AddRange(std::string key, std::string_view url, int64_t offset, int64_t length);
  Status AddWhole(std::string key, std::string_view url);
  Status AddInline(std::string key, std::string bytes);

  const Reference* Find(std::string_view key) const;
  // Every key under `prefix`, sorted.
  std::vector<std::string> Keys(std::string_view prefix) const;
  size_t size() const { return refs_.size(); }

  // Distinct target URLs in first-use order, and a key that uses each (for messages).
  const std::vector<std::string>& targets() const { return targets_; }
  const std::string& first_key_of(size_t target) const { return first_keys_.at(target); }

 private:
  Result<int64_t> InternTarget(std::string_view url, const std::string& key);

  std::map<std::string, Reference, std::less<>> refs_;
  std::vector<std::string> targets_;
  std::vector<std::string> first_keys_;
  std::map<std::string, int64_t, std::less<>> target_index_;
};

}  // namespace insitubatch
