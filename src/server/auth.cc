#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sqlite3.h>

#include <ctime>

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

Status SqliteError(sqlite3* db, std::string_view what) {
  return InternalError("keys db: " + std::string(what) + ": " +
                       (db ? sqlite3_errmsg(db) : "out of memory"));
}

// RAII prepared statement.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

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
                             (create ? "" : " (create it with `ultrafast keys add`)"));
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
      return SqliteError(store->db_, "create table");
    }
  }
  Statement check(store->db_, "SELECT count(*) FROM api_keys");
  if (!check.ok()) {
    return InvalidArgumentError("keys db: " + path + " has no api_keys table (" +
                                sqlite3_errmsg(store->db_) + ")");
  }
  return store;
}

bool KeyStore::LookupDigest(const std::string& digest_hex) const {
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_, "SELECT 1 FROM api_keys WHERE key_sha256 = ?1 AND revoked_at IS NULL");
  if (!st.ok()) return false;
  sqlite3_bind_text(st.get(), 1, digest_hex.data(), static_cast<int>(digest_hex.size()),
                    SQLITE_TRANSIENT);
  return sqlite3_step(st.get()) == SQLITE_ROW;
}

bool KeyStore::Authorize(std::string_view authorization) const {
  if (!enabled()) return true;
  const std::string_view token = BearerToken(authorization);
  if (token.empty()) return false;
  const std::string digest = Sha256Hex(token);
  if (!key_digest_.empty() &&
      CRYPTO_memcmp(digest.data(), key_digest_.data(), digest.size()) == 0) {
    return true;
  }
  return db_ != nullptr && LookupDigest(digest);
}

StatusOr<std::string> KeyStore::AddKey(std::string_view name) {
  if (!db_) return FailedPreconditionError("no keys database");
  UF_ASSIGN_OR_RETURN(std::string key, GenerateApiKey());
  const std::string digest = Sha256Hex(key);
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_, "INSERT INTO api_keys (name, key_sha256, created_at) VALUES (?1, ?2, ?3)");
  if (!st.ok()) return SqliteError(db_, "insert");
  sqlite3_bind_text(st.get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(st.get(), 2, digest.data(), static_cast<int>(digest.size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.get(), 3, static_cast<int64_t>(std::time(nullptr)));
  if (sqlite3_step(st.get()) != SQLITE_DONE) return SqliteError(db_, "insert");
  return key;
}

StatusOr<std::vector<ApiKeyInfo>> KeyStore::ListKeys() const {
  if (!db_) return FailedPreconditionError("no keys database");
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_,
               "SELECT id, name, key_sha256, created_at, revoked_at IS NOT NULL FROM api_keys "
               "ORDER BY id");
  if (!st.ok()) return SqliteError(db_, "list");
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
    keys.push_back(std::move(k));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "list");
  return keys;
}

Status KeyStore::RevokeKey(std::string_view id_or_name) {
  if (!db_) return FailedPreconditionError("no keys database");
  std::lock_guard<std::mutex> lock(mu_);
  Statement st(db_,
               "UPDATE api_keys SET revoked_at = ?2 WHERE revoked_at IS NULL AND "
               "(name = ?1 OR CAST(id AS TEXT) = ?1)");
  if (!st.ok()) return SqliteError(db_, "revoke");
  sqlite3_bind_text(st.get(), 1, id_or_name.data(), static_cast<int>(id_or_name.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.get(), 2, static_cast<int64_t>(std::time(nullptr)));
  if (sqlite3_step(st.get()) != SQLITE_DONE) return SqliteError(db_, "revoke");
  if (sqlite3_changes(db_) == 0) {
    return NotFoundError("no active key with id or name '" + std::string(id_or_name) + "'");
  }
  return OkStatus();
}

}  // namespace uf::server
