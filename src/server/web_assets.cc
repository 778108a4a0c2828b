#include "server/web_assets.h"

namespace uf::server {

const EmbeddedFile* FindPlaygroundFile(std::string_view name) {
  for (const EmbeddedFile& f : PlaygroundFiles()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string_view ContentTypeFor(std::string_view name) {
  const size_t dot = name.rfind('.');
  const std::string_view ext = dot == std::string_view::npos ? "" : name.substr(dot + 1);
  if (ext == "html") return "text/html; charset=utf-8";
  if (ext == "js" || ext == "mjs") return "text/javascript; charset=utf-8";
  if (ext == "css") return "text/css; charset=utf-8";
  if (ext == "svg") return "image/svg+xml";
  if (ext == "png") return "image/png";
  if (ext == "json") return "application/json";
  return "application/octet-stream";
}

}  // namespace uf::server
