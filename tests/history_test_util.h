// Helpers shared by the Computer History tests: reading back what the recorder wrote.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace uf::history_testing {

inline std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every file under dir, concatenated: for "this never appears anywhere" checks.
inline std::string AllText(const std::filesystem::path& dir) {
  std::string all;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) all += Slurp(e.path());
  }
  return all;
}

}  // namespace uf::history_testing
