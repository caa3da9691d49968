#pragma once

// A fresh directory under $TMPDIR for one test, removed (with its contents) afterwards: the
// one temporary-directory helper of every layer's tests.

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace insitubatch::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "insitu-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace insitubatch::testing
