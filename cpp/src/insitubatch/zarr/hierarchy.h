#pragma once

// Hierarchy: the groups and arrays of one zarr store, read from metadata only (no chunk
// data). Uses consolidated metadata when present (v3 inline `consolidated_metadata`, v2
// `.zmetadata`), otherwise lists the store.

#include <map>
#include <memory>
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

  // Paths of every array in the hierarchy, sorted ("" for a root array).
  std::vector<std::string> ArrayPaths() const;
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

  std::shared_ptr<Store> store_;
  int zarr_format_ = 3;
  bool consolidated_ = false;
  std::map<std::string, NodeKind, std::less<>> nodes_;                        // path -> kind
  std::map<std::string, Result<ArrayMetadata>, std::less<>> array_metadata_;  // arrays only
};

// Validates an array/group path from user input or metadata ("a/b"; no "..", no leading
// "/"); "" is the root.
Status ValidateNodePath(std::string_view path);

}  // namespace insitubatch::zarr
