// Small RAII helpers over the SQLite C API, shared by the key store and the usage ledger.
#pragma once

#include <sqlite3.h>

#include <string>
#include <string_view>

#include "base/status.h"

namespace uf::server {

// A prepared statement, finalized on destruction.
class SqliteStatement {
 public:
  SqliteStatement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~SqliteStatement() { sqlite3_finalize(stmt_); }
  SqliteStatement(const SqliteStatement&) = delete;
  SqliteStatement& operator=(const SqliteStatement&) = delete;

  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void BindText(int index, std::string_view text) {
    sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  }
  std::string ColumnText(int index) {
    const unsigned char* text = sqlite3_column_text(stmt_, index);
    return text ? reinterpret_cast<const char*>(text) : "";
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_ERROR;
};

// InternalError "<what>: <sqlite's message>".
inline Status SqliteError(sqlite3* db, std::string_view what) {
  return InternalError(std::string(what) + ": " + (db ? sqlite3_errmsg(db) : "out of memory"));
}

}  // namespace uf::server
