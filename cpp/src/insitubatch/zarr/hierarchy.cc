#include "insitubatch/zarr/hierarchy.h"

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <utility>

#include "insitubatch/zarr/metadata_internal.h"

namespace insitubatch::zarr {
namespace {

using internal_metadata::Abbrev;
using internal_metadata::CheckObject;
using internal_metadata::Error;
using internal_metadata::Find;
using internal_metadata::Require;
using internal_metadata::RequireString;

// Why a hierarchy is listed, said with a listing's error.
constexpr const char* kUnconsolidated = "(no consolidated metadata; arrays named by path open without a listing)";

// Metadata reads issued at once while discovering an unconsolidated hierarchy (one round
// trip per document would make opening a remote store slow).
constexpr size_t kMaxInflightReads = 32;

// Reads every key concurrently (bounded); nullopt for a missing key.
Result<std::vector<std::optional<std::string>>> ReadAll(Store& store, const std::vector<std::string>& keys) {
  std::mutex mutex;
  std::condition_variable done;
  size_t pending = 0;
  std::vector<std::optional<Result<ReadResult>>> results(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    {
      std::unique_lock lock(mutex);
      done.wait(lock, [&] { return pending < kMaxInflightReads; });
      ++pending;
    }
    store.ReadAsync(keys[i], ByteRange::All(), [&, i](Result<ReadResult> result) {
      std::lock_guard lock(mutex);
      results[i] = std::move(result);
      --pending;
      done.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    done.wait(lock, [&] { return pending == 0; });
  }
  std::vector<std::optional<std::string>> texts(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<ReadResult>& result = *results[i];
    if (!result.ok()) return result.status().WithContext("reading " + store.Describe(keys[i]));
    if (!result->found) continue;
    const Buffer& data = result->data;
    texts[i].emplace(reinterpret_cast<const char*>(data.data()), data.size());
  }
  return texts;
}

// A document's text as JSON, nullopt when absent.
Result<std::optional<Json>> ParseDocument(const std::optional<std::string>& text, const std::string& where) {
  if (!text) return std::optional<Json>();
  INSITU_ASSIGN_OR_RETURN(Json document, ParseJson(*text, where));
  return std::optional<Json>(std::move(document));
}

// The JSON document at `key`, nullopt when the key is absent.
Result<std::optional<Json>> ReadJson(Store& store, const std::string& key) {
  INSITU_ASSIGN_OR_RETURN(auto texts, ReadAll(store, {key}));
  return ParseDocument(texts[0], store.Describe(key));
}

// Splits "a/b/.zarray" into ("a/b", ".zarray"); "" for a root document.
std::pair<std::string_view, std::string_view> SplitLeaf(std::string_view key) {
  const size_t slash = key.rfind('/');
  if (slash == std::string_view::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

Status BadNodeKey(std::string_view key, const Status& cause, std::string_view where) {
  return Error(StatusCode::kInvalidArgument, where, "metadata key \"" + std::string(key) + "\": " + cause.message());
}

}  // namespace

Status ValidateNodePath(std::string_view path) {
  auto bad = [&](const char* why) {
    return InvalidArgument("invalid node path \"" + std::string(path) + "\": " + why);
  };
  if (path.empty()) return Status::Ok();
  if (path.front() == '/') return bad("leading '/'");
  if (path.find('\\') != std::string_view::npos) return bad("contains a backslash");
  if (path.find('\0') != std::string_view::npos) return bad("contains NUL");
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view segment = path.substr(start, end - start);
    if (segment.empty()) return bad("empty path segment");
    if (segment == "." || segment == "..") return bad("'.' or '..' path segment");
    start = end + 1;
  }
  return Status::Ok();
}

namespace {

// Builds the node tables; the static Open below picks the format.
class HierarchyBuilder {
 public:
  HierarchyBuilder(Store& store, std::map<std::string, NodeKind, std::less<>>& nodes,
                   std::map<std::string, Result<ArrayMetadata>, std::less<>>& arrays)
      : store_(store), nodes_(nodes), arrays_(arrays) {}

  // A v3 node document (root, listed, or a consolidated entry).
  Status AddV3Node(const std::string& path, const Json& document, std::string_view where) {
    INSITU_RETURN_IF_ERROR(CheckObject(document, "node metadata", where));
    INSITU_ASSIGN_OR_RETURN(std::string node_type, RequireString(document, "node_type", where));
    if (node_type == "array") {
      nodes_[path] = NodeKind::kArray;
      arrays_.insert_or_assign(path, ParseArrayMetadataV3(document, where));
    } else if (node_type == "group") {
      INSITU_RETURN_IF_ERROR(internal_metadata::CheckZarrFormat(document, 3, where));
      nodes_[path] = NodeKind::kGroup;
    } else {
      return Error(StatusCode::kInvalidArgument, where,
                   "node_type must be \"array\" or \"group\", got " + Abbrev(node_type));
    }
    return Status::Ok();
  }

  Status AddV3Consolidated(const Json& consolidated, std::string_view where) {
    INSITU_RETURN_IF_ERROR(CheckObject(consolidated, "\"consolidated_metadata\"", where));
    if (const Json* kind = Find(consolidated, "kind"); kind && *kind != Json("inline")) {
      return Error(StatusCode::kUnimplemented, where,
                   "consolidated_metadata kind " + Abbrev(*kind) + " is not supported");
    }
    INSITU_ASSIGN_OR_RETURN(const Json* metadata, Require(consolidated, "metadata", where));
    INSITU_RETURN_IF_ERROR(CheckObject(*metadata, "consolidated \"metadata\"", where));
    for (const auto& [path, document] : metadata->items()) {
      Status valid = path.empty() ? InvalidArgument("empty node path") : ValidateNodePath(path);
      if (!valid.ok()) return BadNodeKey(path, valid, where);
      const std::string entry_where = std::string(where) + " (consolidated entry \"" + path + "\")";
      INSITU_RETURN_IF_ERROR(AddV3Node(path, document, entry_where));
    }
    return Status::Ok();
  }

  // Reads every `<path>/zarr.json` below the root that the listing `keys` name.
  Status DiscoverV3(const std::vector<std::string>& keys) {
    std::vector<std::string> paths, documents;
    for (const std::string& key : keys) {
      auto [path, leaf] = SplitLeaf(key);
      if (leaf != "zarr.json" || path.empty()) continue;
      Status valid = ValidateNodePath(path);
      if (!valid.ok()) return BadNodeKey(key, valid, store_.Describe(""));
      paths.emplace_back(path);
      documents.push_back(key);
    }
    INSITU_ASSIGN_OR_RETURN(auto texts, ReadAll(store_, documents));
    for (size_t i = 0; i < paths.size(); ++i) {
      if (!texts[i]) continue;  // removed since the listing
      const std::string where = store_.Describe(documents[i]);
      INSITU_ASSIGN_OR_RETURN(Json document, ParseJson(*texts[i], where));
      INSITU_RETURN_IF_ERROR(AddV3Node(paths[i], document, where));
    }
    return Status::Ok();
  }

  // `.zmetadata`: {"metadata": {"a/.zarray": {...}, "a/.zattrs": {...}, ...}}.
  Status AddV2Consolidated(const Json& zmetadata, std::string_view where) {
    INSITU_RETURN_IF_ERROR(CheckObject(zmetadata, ".zmetadata", where));
    if (const Json* format = Find(zmetadata, "zarr_consolidated_format"); format && *format != Json(1)) {
      return Error(StatusCode::kUnimplemented, where,
                   "zarr_consolidated_format " + Abbrev(*format) + " is not supported");
    }
    INSITU_ASSIGN_OR_RETURN(const Json* metadata, Require(zmetadata, "metadata", where));
    INSITU_RETURN_IF_ERROR(CheckObject(*metadata, "consolidated \"metadata\"", where));
    std::map<std::string, V2Node, std::less<>> found;
    for (const auto& [key, document] : metadata->items()) {
      auto [path, leaf] = SplitLeaf(key);
      if (leaf != ".zarray" && leaf != ".zgroup" && leaf != ".zattrs") continue;
      Status valid = ValidateNodePath(path);
      if (!valid.ok()) return BadNodeKey(key, valid, where);
      if (path.empty()) continue;  // the root, already read from its own documents
      V2Node& node = found[std::string(path)];
      (leaf == ".zarray" ? node.zarray : leaf == ".zgroup" ? node.zgroup : node.zattrs) = &document;
    }
    for (const auto& [path, node] : found) {
      const std::string entry_where = std::string(where) + " (entry \"" + path + "\")";
      INSITU_RETURN_IF_ERROR(AddV2Node(path, node, entry_where));
    }
    return Status::Ok();
  }

  // Reads each listed array's .zarray (+ .zattrs). Groups need only their key.
  Status DiscoverV2(const std::vector<std::string>& keys) {
    struct Listed {
      bool zarray = false, zgroup = false, zattrs = false;
    };
    std::map<std::string, Listed, std::less<>> listed;
    for (const std::string& key : keys) {
      auto [path, leaf] = SplitLeaf(key);
      if (path.empty() || (leaf != ".zarray" && leaf != ".zgroup" && leaf != ".zattrs")) {
        continue;
      }
      Status valid = ValidateNodePath(path);
      if (!valid.ok()) return BadNodeKey(key, valid, store_.Describe(""));
      Listed& entry = listed[std::string(path)];
      (leaf == ".zarray" ? entry.zarray : leaf == ".zgroup" ? entry.zgroup : entry.zattrs) = true;
    }
    std::vector<std::string> array_paths, documents;
    for (const auto& [path, entry] : listed) {
      if (entry.zarray) {
        array_paths.push_back(path);
        documents.push_back(path + "/.zarray");
        documents.push_back(entry.zattrs ? path + "/.zattrs" : std::string());
      } else if (entry.zgroup) {
        nodes_[path] = NodeKind::kGroup;
      }
    }
    std::vector<std::string> to_read;
    for (const std::string& key : documents) {
      if (!key.empty()) to_read.push_back(key);
    }
    INSITU_ASSIGN_OR_RETURN(auto texts, ReadAll(store_, to_read));
    size_t next = 0;
    for (size_t i = 0; i < array_paths.size(); ++i) {
      const std::string& path = array_paths[i];
      const std::optional<std::string> zarray = texts[next++];
      std::optional<std::string> zattrs;
      if (!documents[2 * i + 1].empty()) zattrs = texts[next++];
      if (listed[path].zgroup) {
        return Error(StatusCode::kInvalidArgument, store_.Describe(path), "both .zarray and .zgroup are present");
      }
      if (!zarray) continue;  // removed since the listing
      INSITU_RETURN_IF_ERROR(AddV2Array(path, *zarray, zattrs));
    }
    return Status::Ok();
  }

  // One node below the root asked for by path, read from its own documents; nothing is
  // added when none of them exists.
  Status ReadNode(int zarr_format, const std::string& path) {
    return (zarr_format == 3 ? ReadV3Level({path}) : ReadV2Level({path})).status();
  }

  // A v2 node from its documents' texts (nullopt: absent); nothing when neither .zarray nor
  // .zgroup exists.
  Status AddV2Node(const std::string& path, const std::optional<std::string>& zarray,
                   const std::optional<std::string>& zgroup, const std::optional<std::string>& zattrs) {
    if (zarray && zgroup) {
      return Error(StatusCode::kInvalidArgument, store_.Describe(path), "both .zarray and .zgroup are present");
    }
    if (zarray) return AddV2Array(path, *zarray, zattrs);
    if (zgroup) {
      const std::string where = store_.Describe(path.empty() ? ".zgroup" : path + "/.zgroup");
      INSITU_ASSIGN_OR_RETURN(Json group, ParseJson(*zgroup, where));
      INSITU_RETURN_IF_ERROR(CheckObject(group, ".zgroup", where));
      nodes_[path] = NodeKind::kGroup;
    }
    return Status::Ok();
  }

  // Every node below the root, a level at a time: the directories of a level listed alone
  // (Store::ListDir, concurrently), then the documents of every subdirectory read at once.
  // A group's subdirectories, and those of a directory that is no node (it may hold nodes
  // deeper), make the next level; an array's directory is never listed, so its chunk keys
  // cost nothing. A store that cannot list a directory at a time is listed whole.
  Status Walk(int zarr_format) {
    std::vector<std::string> level = {""};
    while (!level.empty()) {
      Result<std::vector<DirListing>> listings = ListDirs(level);
      if (listings.status().code() == StatusCode::kUnimplemented) {
        INSITU_ASSIGN_OR_RETURN(auto keys, ListAll());
        return zarr_format == 3 ? DiscoverV3(keys) : DiscoverV2(keys);
      }
      if (!listings.ok()) return listings.status().WithContext(ListingContext());
      std::vector<std::string> children;
      for (const DirListing& listing : *listings) {
        for (const std::string& dir : listing.dirs) {
          // A name no node can have ("a\\b"): nothing of zarr's is under it.
          if (ValidateNodePath(dir).ok()) children.push_back(dir);
        }
      }
      INSITU_ASSIGN_OR_RETURN(level, zarr_format == 3 ? ReadV3Level(children) : ReadV2Level(children));
    }
    return Status::Ok();
  }

  // A v3 level's nodes (each below the root) from their zarr.json: the directories to list next.
  Result<std::vector<std::string>> ReadV3Level(const std::vector<std::string>& dirs) {
    std::vector<std::string> documents;
    for (const std::string& dir : dirs) documents.push_back(dir + "/zarr.json");
    INSITU_ASSIGN_OR_RETURN(auto texts, ReadAll(store_, documents));
    std::vector<std::string> next;
    for (size_t i = 0; i < dirs.size(); ++i) {
      if (!texts[i]) {
        next.push_back(dirs[i]);
        continue;
      }
      const std::string where = store_.Describe(documents[i]);
      INSITU_ASSIGN_OR_RETURN(Json document, ParseJson(*texts[i], where));
      INSITU_RETURN_IF_ERROR(AddV3Node(dirs[i], document, where));
      if (nodes_[dirs[i]] == NodeKind::kGroup) next.push_back(dirs[i]);
    }
    return next;
  }

  // The same for v2, from each directory's .zarray, .zgroup and .zattrs.
  Result<std::vector<std::string>> ReadV2Level(const std::vector<std::string>& dirs) {
    std::vector<std::string> documents;
    for (const std::string& dir : dirs) {
      for (const char* leaf : {"/.zarray", "/.zgroup", "/.zattrs"}) documents.push_back(dir + leaf);
    }
    INSITU_ASSIGN_OR_RETURN(auto texts, ReadAll(store_, documents));
    std::vector<std::string> next;
    for (size_t i = 0; i < dirs.size(); ++i) {
      INSITU_RETURN_IF_ERROR(AddV2Node(dirs[i], texts[3 * i], texts[3 * i + 1], texts[3 * i + 2]));
      auto kind = nodes_.find(dirs[i]);
      if (kind == nodes_.end() || kind->second == NodeKind::kGroup) next.push_back(dirs[i]);
    }
    return next;
  }

  // Store::ListDir of each directory, at most kMaxInflightReads at once.
  Result<std::vector<DirListing>> ListDirs(const std::vector<std::string>& dirs) {
    std::vector<DirListing> out;
    out.reserve(dirs.size());
    for (size_t start = 0; start < dirs.size(); start += kMaxInflightReads) {
      const size_t end = std::min(dirs.size(), start + kMaxInflightReads);
      std::vector<std::future<Result<DirListing>>> pending;
      for (size_t i = start + 1; i < end; ++i) {
        pending.push_back(std::async(std::launch::async, [this, &dirs, i] { return store_.ListDir(dirs[i]); }));
      }
      Result<DirListing> first = store_.ListDir(dirs[start]);
      std::vector<Result<DirListing>> results;
      results.push_back(std::move(first));
      for (auto& f : pending) results.push_back(f.get());  // every thread joined before returning
      for (Result<DirListing>& r : results) {
        if (!r.ok()) return r.status();
        out.push_back(std::move(r).value());
      }
    }
    return out;
  }

  std::string ListingContext() const { return "listing " + store_.Describe("") + " " + kUnconsolidated; }

  // The store's keys; Unimplemented from a store that cannot list.
  Result<std::vector<std::string>> ListAll() {
    auto keys = store_.List("");
    if (!keys.ok()) return keys.status().WithContext(ListingContext());
    return keys;
  }

  // A root or listed v2 array from its document texts.
  Status AddV2Array(const std::string& path, const std::string& zarray_text,
                    const std::optional<std::string>& zattrs_text) {
    const std::string prefix = path.empty() ? "" : path + "/";
    const std::string where = store_.Describe(prefix + ".zarray");
    nodes_[path] = NodeKind::kArray;
    arrays_.insert_or_assign(path, [&]() -> Result<ArrayMetadata> {
      INSITU_ASSIGN_OR_RETURN(Json zarray, ParseJson(zarray_text, where));
      Json zattrs;
      if (zattrs_text) {
        INSITU_ASSIGN_OR_RETURN(zattrs, ParseJson(*zattrs_text, store_.Describe(prefix + ".zattrs")));
      }
      return ParseArrayMetadataV2(zarray, zattrs, where);
    }());
    return Status::Ok();
  }

 private:
  struct V2Node {
    const Json* zarray = nullptr;
    const Json* zgroup = nullptr;
    const Json* zattrs = nullptr;
  };

  Status AddV2Node(const std::string& path, const V2Node& node, std::string_view where) {
    if (node.zarray != nullptr && node.zgroup != nullptr) {
      return Error(StatusCode::kInvalidArgument, where, "both .zarray and .zgroup are present");
    }
    if (node.zarray != nullptr) {
      const Json null_value;
      nodes_[path] = NodeKind::kArray;
      arrays_.insert_or_assign(path,
                               ParseArrayMetadataV2(*node.zarray, node.zattrs ? *node.zattrs : null_value, where));
    } else if (node.zgroup != nullptr) {
      INSITU_RETURN_IF_ERROR(CheckObject(*node.zgroup, ".zgroup", where));
      nodes_[path] = NodeKind::kGroup;
    }
    return Status::Ok();
  }

  Store& store_;
  std::map<std::string, NodeKind, std::less<>>& nodes_;
  std::map<std::string, Result<ArrayMetadata>, std::less<>>& arrays_;
};

}  // namespace

Result<Hierarchy> Hierarchy::Open(std::shared_ptr<Store> store) {
  if (store == nullptr) return InvalidArgument("Hierarchy::Open: store is null");
  Hierarchy h;
  h.store_ = std::move(store);
  Store& s = *h.store_;
  HierarchyBuilder builder(s, h.nodes_, h.array_metadata_);

  // zarr.json first, alone: a v3 store (the common case) is asked for nothing it lacks,
  // which a server logs as a failure (S3 without s3:ListBucket, as AccessDenied).
  INSITU_ASSIGN_OR_RETURN(std::optional<Json> root, ReadJson(s, "zarr.json"));
  if (root) {
    const std::string where = s.Describe("zarr.json");
    h.zarr_format_ = 3;
    INSITU_RETURN_IF_ERROR(CheckObject(*root, "zarr.json", where));
    INSITU_RETURN_IF_ERROR(internal_metadata::CheckZarrFormat(*root, 3, where));
    INSITU_RETURN_IF_ERROR(builder.AddV3Node("", *root, where));
    if (h.nodes_[""] == NodeKind::kArray) return std::move(h).RootArrayChecked();
    const Json* consolidated = Find(*root, "consolidated_metadata");
    if (consolidated != nullptr && !consolidated->is_null()) {
      h.consolidated_ = true;
      INSITU_RETURN_IF_ERROR(builder.AddV3Consolidated(*consolidated, where));
    } else {
      h.lazy_mutex_ = std::make_shared<std::mutex>();
    }
    return h;
  }

  // A v2 store: its root documents and .zmetadata together, in one more round trip.
  h.zarr_format_ = 2;
  INSITU_ASSIGN_OR_RETURN(auto texts, ReadAll(s, {".zarray", ".zgroup", ".zattrs", ".zmetadata"}));
  INSITU_RETURN_IF_ERROR(builder.AddV2Node("", texts[0], texts[1], texts[2]));
  const auto root_kind = h.nodes_.find("");
  if (root_kind == h.nodes_.end()) {
    return NotFound("no zarr metadata (zarr.json, .zgroup or .zarray) at the root of " + s.Describe(""));
  }
  if (root_kind->second == NodeKind::kArray) return std::move(h).RootArrayChecked();
  INSITU_ASSIGN_OR_RETURN(std::optional<Json> zmetadata, ParseDocument(texts[3], s.Describe(".zmetadata")));
  if (zmetadata) {
    h.consolidated_ = true;
    INSITU_RETURN_IF_ERROR(builder.AddV2Consolidated(*zmetadata, s.Describe(".zmetadata")));
  } else {
    h.lazy_mutex_ = std::make_shared<std::mutex>();
  }
  return h;
}

// A store that is one array has nothing else to open: its metadata error is the store's.
Result<Hierarchy> Hierarchy::RootArrayChecked() && {
  const Result<ArrayMetadata>& root = array_metadata_.find("")->second;
  if (!root.ok()) return root.status();
  return std::move(*this);
}

Result<std::vector<std::string>> Hierarchy::ArrayPaths() const {
  auto lock = LockLazy();
  if (lazy_mutex_ && !walked_) {
    if (!unlisted_.ok()) return unlisted_;
    HierarchyBuilder builder(*store_, nodes_, array_metadata_);
    Status walked = builder.Walk(zarr_format_);
    if (walked.code() == StatusCode::kUnimplemented) unlisted_ = walked;  // a store that cannot list
    INSITU_RETURN_IF_ERROR(walked);
    walked_ = true;
  }
  std::vector<std::string> paths;
  for (const auto& [path, md] : array_metadata_) paths.push_back(path);
  return paths;
}

std::unique_lock<std::mutex> Hierarchy::LockLazy() const {
  return lazy_mutex_ ? std::unique_lock(*lazy_mutex_) : std::unique_lock<std::mutex>();
}

Result<NodeKind> Hierarchy::Kind(std::string_view path) const {
  INSITU_RETURN_IF_ERROR(ValidateNodePath(path));
  auto lock = LockLazy();
  auto it = nodes_.find(path);
  if (it == nodes_.end() && lazy_mutex_ && !walked_) {
    HierarchyBuilder builder(*store_, nodes_, array_metadata_);
    const std::string key(path);
    INSITU_RETURN_IF_ERROR(builder.ReadNode(zarr_format_, key));
    it = nodes_.find(path);
  }
  if (it == nodes_.end()) {
    return NotFound("no array or group at '" + std::string(path) + "' in " + store_->Describe(""));
  }
  return it->second;
}

Result<ArrayMetadata> Hierarchy::ArrayMetadataAt(std::string_view path) const {
  INSITU_ASSIGN_OR_RETURN(NodeKind kind, Kind(path));
  if (kind == NodeKind::kGroup) {
    return InvalidArgument("'" + std::string(path) + "' is a group, not an array");
  }
  auto lock = LockLazy();
  const Result<ArrayMetadata>& metadata = array_metadata_.find(path)->second;
  if (!metadata.ok()) {
    return metadata.status().WithContext("array '" + std::string(path) + "'");
  }
  return *metadata;
}

Result<std::shared_ptr<const Array>> Hierarchy::OpenArray(std::string_view path) const {
  INSITU_ASSIGN_OR_RETURN(ArrayMetadata metadata, ArrayMetadataAt(path));
  return Array::Create(store_, std::string(path), std::move(metadata));
}

}  // namespace insitubatch::zarr
