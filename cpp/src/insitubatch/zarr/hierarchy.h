#pragma once

// Hierarchy: the groups and arrays of one zarr store, read from metadata only (no chunk
// data). Uses consolidated metadata when present (v3 inline `consolidated_metadata`, v2
// `.zmetadata`). Without it, a node named by path is read from its own documents when first
// asked for (as zarr-python opens group["name"]), and the whole hierarchy is walked, a
// directory level at a time, only when every array is asked for (ArrayPaths); a store that
// cannot list (plain HTTP) still opens the nodes named by path.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "insitubatch/io/store.h"
#include "insitubatch/zarr/array.h"
#include "insitubatch/zarr/metadata.h"

namespace insitubatch::zarr {

enum class NodeKind { kGroup, kArray };

class Hierarchy {
 public:
  // Opens the node at the store root (a group or a single array). NotFound when the root
  // holds no zarr metadata; DataLoss/InvalidArgument for malformed documents.
  static Result<Hierarchy> Open(std::shared_ptr<Store> store);

  // Paths of every array in the hierarchy, sorted ("" for a root array); Unimplemented
  // when the store cannot list and holds no consolidated metadata. Without consolidated
  // metadata the first call walks the store (a listing and a round of reads per level).
  Result<std::vector<std::string>> ArrayPaths() const;
  // NotFound when nothing lives at `path`.
  Result<NodeKind> Kind(std::string_view path) const;
  // Opens the array at `path`: NotFound if absent, InvalidArgument if it is a group.
  Result<std::shared_ptr<const Array>> OpenArray(std::string_view path) const;
  // The normalized metadata of the array at `path` (no codec chain built). An array whose
  // metadata could not be parsed (an unsupported dtype or codec, a malformed document) is
  // still listed; its error surfaces here, when it is asked for, so one array the reader
  // cannot handle never makes the rest of the store unopenable.
  Result<ArrayMetadata> ArrayMetadataAt(std::string_view path) const;

  int zarr_format() const { return zarr_format_; }
  bool consolidated() const { return consolidated_; }
  const std::shared_ptr<Store>& store() const { return store_; }

 private:
  Result<Hierarchy> RootArrayChecked() &&;
  // Held while the maps are read or grown; only an unlisted hierarchy grows them.
  std::unique_lock<std::mutex> LockLazy() const;

  std::shared_ptr<Store> store_;
  int zarr_format_ = 3;
  bool consolidated_ = false;
  // Set for a hierarchy without consolidated metadata: the lock under which nodes asked for
  // by path are read and added, and the walk of every node (ArrayPaths) runs.
  std::shared_ptr<std::mutex> lazy_mutex_;
  // Whether that walk ran (the tables then hold every node), and for a store that cannot
  // list, why it cannot (what ArrayPaths() returns).
  mutable bool walked_ = false;
  mutable Status unlisted_ = Status::Ok();
  mutable std::map<std::string, NodeKind, std::less<>> nodes_;                        // path -> kind
  mutable std::map<std::string, Result<ArrayMetadata>, std::less<>> array_metadata_;  // arrays only
};

// Validates an array/group path from user input or metadata ("a/b"; no "..", no leading
// "/"); "" is the root.
Status ValidateNodePath(std::string_view path);

}  // namespace insitubatch::zarr
