// Fuzzes what a bucket's listing hands back -- untrusted replies from the network: an S3
// ListObjectsV2 page, a GCS objects.list page or an Azure List Blobs page (with or without a
// delimiter's subdirectories), then its names and prefixes through what a store makes of a
// listing (CollectListing for a prefix, CollectDirListing for one directory level). The
// first byte picks the format, the root and the directory. Any Status is fine; crashes and
// sanitizer reports are not.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "insitubatch/io/aws/s3_request.h"
#include "insitubatch/io/azure/azure_store.h"
#include "insitubatch/io/gcs/gcs_store.h"
#include "insitubatch/io/http/http_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace insitubatch;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  ListPage list_page;
  switch ((data[0] >> 2) % 3) {
    case 0: {
      auto page = ParseListObjectsV2(text);
      if (!page.ok()) return 0;
      list_page = {page->keys, "", page->etags, page->prefixes};
      break;
    }
    case 1: {
      auto page = ParseGcsListPage(text);
      if (!page.ok()) return 0;
      list_page = {page->names, "", page->generations, page->prefixes};
      break;
    }
    default: {
      auto page = ParseAzureListPage(text);
      if (!page.ok()) return 0;
      list_page = {page->names, "", page->etags, page->prefixes};
      break;
    }
  }
  const std::string root = (data[0] & 1) ? "p/" : "";
  const std::string dir = (data[0] & 2) ? "g" : "";
  auto fetch = [&](const std::string& token) -> Result<ListPage> { return list_page; };
  (void)CollectListing("fuzz", root, "key", "token", fetch);
  (void)CollectListingGenerations("fuzz", root, "key", "token", fetch);
  (void)CollectDirListing("fuzz", root, dir, "key", "token",
                          [&](const std::string& list_prefix, const std::string& token) { return fetch(token); });
  return 0;
}
