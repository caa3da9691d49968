#include "insitubatch/io/http/http_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace insitubatch {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A bucket's listing served from `pages` by token ("" first), whatever the prefix asked.
DirPageFetch Pages(std::map<std::string, ListPage> pages) {
  return [pages = std::move(pages)](const std::string& list_prefix, const std::string& token) -> Result<ListPage> {
    auto it = pages.find(token);
    if (it == pages.end()) return IoError("no page " + token);
    return it->second;
  };
}

TEST(CollectDirListingTest, OneLevelAcrossPages) {
  std::map<std::string, ListPage> pages;
  pages[""] = {{"root/g/zarr.json", "root/g//x"}, "t1", {}, {"root/g/a/", "root/g/b/", "root/g//"}};
  pages["t1"] = {{"root/g/z.txt", "root/g/"}, "", {}, {"root/g/c/", "root/g/a/"}};
  auto listing = CollectDirListing("listing x", "root/", "g", "key", "token", Pages(pages));
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->keys, ElementsAre("g/z.txt", "g/zarr.json"));  // no "g/" directory marker
  EXPECT_THAT(listing->dirs, ElementsAre("g/a", "g/b", "g/c"));
}

TEST(CollectDirListingTest, AServerThatIgnoresTheDelimiterStillGivesOneLevel) {
  std::map<std::string, ListPage> pages;
  pages[""] = {{"zarr.json", "t2m/zarr.json", "t2m/c/0/0", "t2m/c/1/0", "sub/x/zarr.json"}, "", {}, {}};
  auto listing = CollectDirListing("listing x", "", "", "key", "token", Pages(pages));
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_THAT(listing->keys, ElementsAre("zarr.json"));
  EXPECT_THAT(listing->dirs, ElementsAre("sub", "t2m"));
}

TEST(CollectDirListingTest, HostileRepliesAreErrors) {
  std::map<std::string, ListPage> outside;
  outside[""] = {{}, "", {}, {"other/g/"}};
  auto status = CollectDirListing("listing x", "root/", "", "key", "token", Pages(outside)).status();
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_THAT(status.message(), HasSubstr("outside the requested prefix"));
  std::map<std::string, ListPage> deeper;
  deeper[""] = {{}, "", {}, {"g/a/b/"}};
  status = CollectDirListing("listing x", "", "g", "key", "token", Pages(deeper)).status();
  EXPECT_THAT(status.message(), HasSubstr("\"g/a/b/\" as a directory directly in \"g\""));
  std::map<std::string, ListPage> looping;
  looping[""] = {{}, "t", {}, {}};
  looping["t"] = {{}, "t", {}, {}};
  status = CollectDirListing("listing x", "", "", "key", "token", Pages(looping)).status();
  EXPECT_THAT(status.message(), HasSubstr("repeated a token"));
  // A directory that is no key is refused before anything is asked of the server.
  for (const char* bad : {"../g", "g/", "/g"}) {
    EXPECT_EQ(CollectDirListing("listing x", "", bad, "key", "token", Pages(looping)).status().code(),
              StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace insitubatch
