// The build's version, written by tools/version.cmake at every build (`ultrafast --version`).
#pragma once

namespace uf::cli {

extern const char kVersion[];    // the project version in CMakeLists.txt
extern const char kGitCommit[];  // short commit, "-dirty" with uncommitted changes, or "unknown"

}  // namespace uf::cli
