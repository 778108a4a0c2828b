#include "pull/model_cache.h"

#include <cstdlib>
#include <filesystem>

namespace uf::pull {
namespace {

namespace fs = std::filesystem;

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A file name taken from a URL must stay inside the cache folder.
bool SafeFileName(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\\') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

}  // namespace

std::string DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') {
    return (fs::path(xdg) / "ultrafast").string();
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return (fs::path(home) / ".cache" / "ultrafast").string();
  }
  return (fs::path(".cache") / "ultrafast").string();
}

StatusOr<ModelSource> ParseModelSource(std::string_view spec) {
  ModelSource out;
  constexpr std::string_view kHf = "hf://";
  if (spec.substr(0, kHf.size()) == kHf) {
    const std::string_view rest = spec.substr(kHf.size());
    // OWNER/REPO/FILE: at least two slashes, no empty part.
    const size_t a = rest.find('/');
    const size_t b = a == std::string_view::npos ? a : rest.find('/', a + 1);
    if (a == 0 || b == std::string_view::npos || b == a + 1 || b + 1 >= rest.size() ||
        rest.find("//") != std::string_view::npos) {
      return InvalidArgumentError("'" + std::string(spec) + "' is not hf://OWNER/REPO/FILE.gguf");
    }
    out.url = "https://huggingface.co/" + std::string(rest.substr(0, b)) + "/resolve/main/" +
              std::string(rest.substr(b + 1));
    out.file_name = std::string(rest.substr(rest.rfind('/') + 1));
  } else if (spec.substr(0, 7) == "http://" || spec.substr(0, 8) == "https://") {
    out.url = std::string(spec);
    std::string_view path = spec.substr(spec.find("://") + 3);
    path = path.substr(0, path.find_first_of("?#"));
    const size_t slash = path.find('/');
    if (slash == std::string_view::npos || slash == 0) {
      return InvalidArgumentError("'" + std::string(spec) + "' names no file to download");
    }
    out.file_name = std::string(path.substr(path.rfind('/') + 1));
  } else {
    return InvalidArgumentError("'" + std::string(spec) +
                                "' is neither an http(s):// URL nor hf://OWNER/REPO/FILE.gguf");
  }
  if (!SafeFileName(out.file_name)) {
    return InvalidArgumentError("'" + std::string(spec) + "' names no file to download");
  }
  return out;
}

std::string ResolveModelPath(const std::string& name, const std::string& cache_dir) {
  if (name.empty() || IsRegularFile(name) || !SafeFileName(name)) return name;
  const fs::path dir(cache_dir);
  if (IsRegularFile(dir / name)) return (dir / name).string();
  if (IsRegularFile(dir / (name + ".gguf"))) return (dir / (name + ".gguf")).string();
  return name;
}

}  // namespace uf::pull
