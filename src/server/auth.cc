#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sqlite3.h>

#include <ctime>

#include "server/sqlite_util.h"

namespace uf::server {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

// Key from "Bearer <key>" (scheme case-insensitive), or "" when malformed.
std::string_view BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const char c = header[i];
    if ((c >= 'A' && c <= 'Z' ? c + 32 : c) != kScheme[i]) return {};
  }
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

Status DbError(sqlite3* db, std::string_view what) {
  return SqliteError(db, "keys db: " + std::string(what));
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  UF_CHECK(EVP_Digest(data.data(), data.size(), digest, &n, EVP_sha256(), nullptr) == 1)
      << "SHA-256 failed";
  return Hex(digest, n);
}

StatusOr<std::string> GenerateApiKey() {
  unsigned char bytes[24];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    return InternalError("cannot draw random bytes for a new key");
  }
  return "sk-uf-" + Hex(bytes, sizeof(bytes));
}

KeyStore::~KeyStore() {
  if (db_) sqlite3_close(db_);
}

std::unique_ptr<KeyStore> KeyStore::WithKey(std::string_view key) {
  auto store = std::make_unique<KeyStore>();
  store->key_digest_ = Sha256Hex(key);
  return store;
}

StatusOr<std::unique_ptr<KeyStore>> KeyStore::OpenDb(const std::string& path, bool create,
                                                     bool read_only) {
  auto store = std::make_unique<KeyStore>();
  int flags = SQLITE_OPEN_FULLMUTEX;
  flags |= read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (create && !read_only) flags |= SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path.c_str(), &store->db_, flags, nullptr) != SQLITE_OK) {
    Status s = NotFoundError("keys db: cannot open " + path + ": " +
                             (store->db_ ? sqlite3_errmsg(store->db_) : "out of memory") +
                             (create ? "" : " (create it with `ultrafast keys create`)"));
    return s;
  }
  sqlite3_busy_timeout(store->db_, 2000);
  if (!read_only) {
    const char* schema =
        "CREATE TABLE IF NOT EXISTS api_keys ("
        " id INTEGER PRIMARY KEY,"
        " name TEXT NOT NULL,"
        " key_sha256 TEXT NOT NULL UNIQUE,"
        " created_at INTEGER NOT NULL,"
        " revoked_at INTEGER)";
    if (sqlite3_exec(store->db_, schema, nullptr, nullptr, nullptr) != SQLITE_OK) {
      return DbError(store->db_, "create table");
    }
    // Databases made before metering have no plan column; NULL means the default plan.
    SqliteStatement probe(store->db_, "SELECT plan FROM api_keys LIMIT 0");
    if (!probe.ok() && sqlite3_exec(store->db_, "ALTER TABLE api_keys ADD COLUMN plan TEXT",
                                    nullptr, nullptr, nullptr) != SQLITE_OK) {
      return DbError(store->db_, "add the plan column");
    }
  }
  store->has_plan_column_ = SqliteStatement(store->db_, "SELECT plan FROM api_keys LIMIT 0").ok();
  SqliteStatement check(store->db_, "SELECT count(*) FROM api_keys");
  if (!check.ok()) {
    return InvalidArgumentError("keys db: " + path + " has no api_keys table (" +
                                sqlite3_errmsg(store->db_) + ")");
  }
  return store;
}

std::optional<KeyIdentity> KeyStore::LookupDigest(const std::string& digest_hex) const {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_, has_plan_column_
                              ? "SELECT id, name, plan FROM api_keys WHERE key_sha256 = ?1 AND "
                                "revoked_at IS NULL"
                              : "SELECT id, name, NULL FROM api_keys WHERE key_sha256 = ?1 AND "
                                "revoked_at IS NULL");
  if (!st.ok()) return std::nullopt;
  st.BindText(1, digest_hex);
  if (sqlite3_step(st.get()) != SQLITE_ROW) return std::nullopt;
  return KeyIdentity{sqlite3_column_int64(st.get(), 0), st.ColumnText(1), st.ColumnText(2)};
}

std::optional<KeyIdentity> KeyStore::Authenticate(std::string_view authorization) const {
  if (!enabled()) return KeyIdentity{};
  const std::string_view token = BearerToken(authorization);
  if (token.empty()) return std::nullopt;
  const std::string digest = Sha256Hex(token);
  if (!key_digest_.empty() &&
      CRYPTO_memcmp(digest.data(), key_digest_.data(), digest.size()) == 0) {
    return KeyIdentity{0, "api-key", ""};
  }
  if (db_ == nullptr) return std::nullopt;
  return LookupDigest(digest);
}

bool KeyStore::Authorize(std::string_view authorization) const {
  return Authenticate(authorization).has_value();
}

StatusOr<std::string> KeyStore::AddKey(std::string_view name, std::string_view plan) {
  if (!db_) return FailedPreconditionError("no keys database");
  UF_ASSIGN_OR_RETURN(std::string key, GenerateApiKey());
  const std::string digest = Sha256Hex(key);
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_,
                     "INSERT INTO api_keys (name, key_sha256, created_at, plan) "
                     "VALUES (?1, ?2, ?3, NULLIF(?4, ''))");
  if (!st.ok()) return DbError(db_, "insert");
  sqlite3_bind_text(st.get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st.get(), 2, digest.data(), static_cast<int>(digest.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.get(), 3, static_cast<int64_t>(std::time(nullptr)));
  st.BindText(4, plan);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return DbError(db_, "insert");
  return key;
}

StatusOr<std::vector<ApiKeyInfo>> KeyStore::ListKeys() const {
  if (!db_) return FailedPreconditionError("no keys database");
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_, has_plan_column_
                              ? "SELECT id, name, key_sha256, created_at, revoked_at IS NOT "
                                "NULL, plan FROM api_keys ORDER BY id"
                              : "SELECT id, name, key_sha256, created_at, revoked_at IS NOT "
                                "NULL, NULL FROM api_keys ORDER BY id");
  if (!st.ok()) return DbError(db_, "list");
  std::vector<ApiKeyInfo> keys;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    ApiKeyInfo k;
    k.id = sqlite3_column_int64(st.get(), 0);
    const unsigned char* name = sqlite3_column_text(st.get(), 1);
    const unsigned char* digest = sqlite3_column_text(st.get(), 2);
    k.name = name ? reinterpret_cast<const char*>(name) : "";
    k.sha256_prefix =
        digest ? std::string(reinterpret_cast<const char*>(digest)).substr(0, 12) : "";
    k.created_at = sqlite3_column_int64(st.get(), 3);
    k.revoked = sqlite3_column_int(st.get(), 4) != 0;
    k.plan = st.ColumnText(5);
    keys.push_back(std::move(k));
  }
  if (rc != SQLITE_DONE) return DbError(db_, "list");
  return keys;
}

Status KeyStore::RevokeKey(std::string_view id_or_name) {
  if (!db_) return FailedPreconditionError("no keys database");
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_,
                     "UPDATE api_keys SET revoked_at = ?2 WHERE revoked_at IS NULL AND "
                     "(name = ?1 OR CAST(id AS TEXT) = ?1)");
  if (!st.ok()) return DbError(db_, "revoke");
  sqlite3_bind_text(st.get(), 1, id_or_name.data(), static_cast<int>(id_or_name.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.get(), 2, static_cast<int64_t>(std::time(nullptr)));
  if (sqlite3_step(st.get()) != SQLITE_DONE) return DbError(db_, "revoke");
  if (sqlite3_changes(db_) == 0) {
    return NotFoundError("no active key with id or name '" + std::string(id_or_name) + "'");
  }
  return OkStatus();
}

Status KeyStore::SetPlan(std::string_view id_or_name, std::string_view plan) {
  if (!db_) return FailedPreconditionError("no keys database");
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_,
                     "UPDATE api_keys SET plan = NULLIF(?2, '') WHERE revoked_at IS NULL AND "
                     "(name = ?1 OR CAST(id AS TEXT) = ?1)");
  if (!st.ok()) return DbError(db_, "set plan");
  st.BindText(1, id_or_name);
  st.BindText(2, plan);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return DbError(db_, "set plan");
  if (sqlite3_changes(db_) == 0) {
    return NotFoundError("no active key with id or name '" + std::string(id_or_name) + "'");
  }
  return OkStatus();
}

}  // namespace uf::server
