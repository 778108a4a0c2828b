// The playground page (web/playground) built into the binary: `serve` answers GET / with its
// index.html and GET /assets/NAME with its other files. The bytes come from a file generated at
// build time by tools/embed_assets.cmake, so nothing is read from disk or the network at run time.
#pragma once

#include <span>
#include <string_view>

namespace uf::server {

struct EmbeddedFile {
  std::string_view name;  // file name in web/playground
  std::string_view body;
};

// Every file of web/playground (generated).
std::span<const EmbeddedFile> PlaygroundFiles();

// The file called name, or nullptr.
const EmbeddedFile* FindPlaygroundFile(std::string_view name);

// Content-Type for a file name by its extension (html, js, css, svg, png, json; else
// application/octet-stream).
std::string_view ContentTypeFor(std::string_view name);

}  // namespace uf::server
