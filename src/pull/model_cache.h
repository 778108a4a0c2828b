// Where `ultrafast pull` puts models, and how a model name given to -m is found there.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace uf::pull {

// $XDG_CACHE_HOME/ultrafast, else $HOME/.cache/ultrafast (the XDG default), else
// ./.cache/ultrafast when neither variable is set.
std::string DefaultCacheDir();

// A download: the URL to fetch and the file name it gets in the cache.
struct ModelSource {
  std::string url;
  std::string file_name;
};

// "https://host/path/name.gguf?x" (or http://) -> that URL, file "name.gguf";
// "hf://OWNER/REPO/PATH.gguf" -> https://huggingface.co/OWNER/REPO/resolve/main/PATH.gguf.
// InvalidArgument for anything else, naming the accepted forms.
StatusOr<ModelSource> ParseModelSource(std::string_view spec);

// What -m NAME opens: NAME itself when it is an existing file; else NAME or NAME.gguf in
// cache_dir when there; else NAME unchanged (so the loader's "cannot open" names what was asked).
std::string ResolveModelPath(const std::string& name, const std::string& cache_dir);

}  // namespace uf::pull
