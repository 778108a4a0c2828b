// Bearer API keys. Keys are never stored: --api-key is kept as its SHA-256 digest, and the keys
// database (SQLite) holds only hex SHA-256 digests, so a leaked database does not leak usable keys.
// Keys are 192 random bits, so an unsalted fast hash is enough (no dictionary to attack).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

struct sqlite3;

namespace uf::server {

// Lowercase hex SHA-256 of data (OpenSSL libcrypto).
std::string Sha256Hex(std::string_view data);
// A fresh key "sk-uf-" + 48 hex digits from OpenSSL's CSPRNG.
StatusOr<std::string> GenerateApiKey();

struct ApiKeyInfo {
  int64_t id = 0;
  std::string name;
  std::string sha256_prefix;  // first 12 hex digits of the digest, to tell keys apart
  int64_t created_at = 0;     // unix seconds
  bool revoked = false;
};

class KeyStore {
 public:
  KeyStore() = default;  // no keys: every request is allowed
  ~KeyStore();
  KeyStore(const KeyStore&) = delete;
  KeyStore& operator=(const KeyStore&) = delete;

  static std::unique_ptr<KeyStore> WithKey(std::string_view key);
  // Opens (create: creates) the keys database. The server opens it read-only, so keys added or
  // revoked by `ultrafast keys` take effect on the next request.
  static StatusOr<std::unique_ptr<KeyStore>> OpenDb(const std::string& path, bool create,
                                                    bool read_only);

  bool enabled() const { return !key_digest_.empty() || db_ != nullptr; }
  // True when keys are off, or authorization is "Bearer <a valid key>".
  bool Authorize(std::string_view authorization) const;

  // Database administration.
  StatusOr<std::string> AddKey(std::string_view name);  // returns the key (shown once)
  StatusOr<std::vector<ApiKeyInfo>> ListKeys() const;
  // Revokes keys by id or name; NotFound when none matched.
  Status RevokeKey(std::string_view id_or_name);

 private:
  bool LookupDigest(const std::string& digest_hex) const;

  std::string key_digest_;  // hex SHA-256 of --api-key
  sqlite3* db_ = nullptr;
  mutable std::mutex mu_;  // serialises use of db_
};

}  // namespace uf::server
