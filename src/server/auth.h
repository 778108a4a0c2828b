// Bearer API keys. Keys are never stored: --api-key is kept as its SHA-256 digest, and the keys
// database (SQLite) holds only hex SHA-256 digests, so a leaked database does not leak usable keys.
// Keys are 192 random bits, so an unsalted fast hash is enough (no dictionary to attack).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
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
  std::string plan;  // metering plan; "" = the configured default plan
};

// Who made a request: the key's row, or id 0 for --api-key and for a server without keys.
struct KeyIdentity {
  int64_t id = 0;
  std::string name;
  std::string plan;  // "" = the configured default plan
};

class KeyStore {
 public:
  KeyStore() = default;  // no keys: every request is allowed
  ~KeyStore();
  KeyStore(const KeyStore&) = delete;
  KeyStore& operator=(const KeyStore&) = delete;

  static std::unique_ptr<KeyStore> WithKey(std::string_view key);
  // Opens (create: creates) the keys database. Keys are looked up per request, so keys added,
  // revoked or moved to another plan by `ultrafast keys` take effect on the next request. A
  // read-write open also adds the plan column to databases made before plans.
  static StatusOr<std::unique_ptr<KeyStore>> OpenDb(const std::string& path, bool create,
                                                    bool read_only);

  bool enabled() const { return !key_digest_.empty() || db_ != nullptr; }
  // True when keys are off, or authorization is "Bearer <a valid key>".
  bool Authorize(std::string_view authorization) const;
  // The key behind authorization, or nullopt when Authorize would say no.
  std::optional<KeyIdentity> Authenticate(std::string_view authorization) const;

  // Database administration.
  // Returns the key (shown once). plan "" = the default plan of the metering config.
  StatusOr<std::string> AddKey(std::string_view name, std::string_view plan = "");
  StatusOr<std::vector<ApiKeyInfo>> ListKeys() const;
  // Revokes keys by id or name; NotFound when none matched.
  Status RevokeKey(std::string_view id_or_name);
  // Moves active keys (by id or name) to plan; NotFound when none matched.
  Status SetPlan(std::string_view id_or_name, std::string_view plan);

 private:
  std::optional<KeyIdentity> LookupDigest(const std::string& digest_hex) const;

  std::string key_digest_;  // hex SHA-256 of --api-key
  sqlite3* db_ = nullptr;
  bool has_plan_column_ = false;  // false for databases made before plans (read-only opens)
  mutable std::mutex mu_;         // serialises use of db_
};

}  // namespace uf::server
