#include "server/ledger.h"

#include <sqlite3.h>

#include "server/sqlite_util.h"

namespace uf::server {
namespace {

using scheduler::ServiceTier;

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS usage_ledger ("
    " id INTEGER PRIMARY KEY,"
    " key_id INTEGER NOT NULL,"
    " time REAL NOT NULL,"  // unix seconds
    " request_id TEXT NOT NULL,"
    " model TEXT NOT NULL,"
    " tier TEXT NOT NULL,"  // ServiceTierName of the tier that served the request
    " prompt_tokens INTEGER NOT NULL,"
    " cached_tokens INTEGER NOT NULL,"
    " completion_tokens INTEGER NOT NULL,"
    " cost_picousd INTEGER NOT NULL);"  // 1e-12 USD: integer sums are exact
    "CREATE INDEX IF NOT EXISTS usage_ledger_key_time ON usage_ledger (key_id, time);";

// Tier of a stored name; rows are only written by Record, so an unknown name is corruption and
// is counted as default rather than dropped.
int TierIndex(const std::string& name) {
  auto tier = scheduler::ParseServiceTierName(name);
  return static_cast<int>(tier.ok() ? *tier : ServiceTier::kDefault);
}

// Accumulates a "tier, count, prompt, cached, completion, cost" row starting at column first.
void AddRow(SqliteStatement& st, int first, TierTotals* totals) {
  UsageTotals& t = (*totals)[TierIndex(st.ColumnText(first))];
  t.requests += sqlite3_column_int64(st.get(), first + 1);
  t.prompt_tokens += sqlite3_column_int64(st.get(), first + 2);
  t.cached_tokens += sqlite3_column_int64(st.get(), first + 3);
  t.completion_tokens += sqlite3_column_int64(st.get(), first + 4);
  t.cost_picousd += sqlite3_column_int64(st.get(), first + 5);
}

// True when usage_ledger still has the `cost REAL` (dollars) column of ledgers written before
// costs were integers, and not yet the integer one.
StatusOr<bool> HasRealCost(sqlite3* db) {
  bool has_real = false, has_int = false;
  SqliteStatement info(db, "PRAGMA table_info(usage_ledger)");
  if (!info.ok()) return SqliteError(db, "usage ledger: table info");
  int rc;
  while ((rc = sqlite3_step(info.get())) == SQLITE_ROW) {
    const std::string column = info.ColumnText(1);
    has_real |= column == "cost";
    has_int |= column == "cost_picousd";
  }
  if (rc != SQLITE_DONE) return SqliteError(db, "usage ledger: table info");
  return has_real && !has_int;
}

// Converts each row's dollars to picodollars (the nearest integer; those costs were products of
// prices with at most a few decimals, so rounding restores what the double approximated) and
// drops the old column, all in one transaction so that a crash leaves either schema whole.
Status MigrateRealCost(sqlite3* db) {
  UF_ASSIGN_OR_RETURN(const bool old_schema, HasRealCost(db));
  if (!old_schema) return OkStatus();
  // The server and `ultrafast usage` open the same file: whichever takes the write lock second
  // must see the first one's migration, so the check is repeated under the lock.
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return SqliteError(db, "usage ledger: migrating cost to integer picodollars");
  }
  StatusOr<bool> still_old = HasRealCost(db);
  Status s = still_old.status();
  if (s.ok() && *still_old &&
      sqlite3_exec(db,
                   "ALTER TABLE usage_ledger ADD COLUMN cost_picousd INTEGER NOT NULL DEFAULT 0;"
                   "UPDATE usage_ledger SET cost_picousd = CAST(round(cost * 1e12) AS INTEGER);"
                   "ALTER TABLE usage_ledger DROP COLUMN cost;",
                   nullptr, nullptr, nullptr) != SQLITE_OK) {
    s = SqliteError(db, "usage ledger: migrating cost to integer picodollars");
  }
  if (s.ok() && sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    s = SqliteError(db, "usage ledger: migrating cost to integer picodollars");
  }
  if (!s.ok()) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  return s;
}

}  // namespace

void UsageTotals::Add(const UsageTotals& o) {
  requests += o.requests;
  prompt_tokens += o.prompt_tokens;
  cached_tokens += o.cached_tokens;
  completion_tokens += o.completion_tokens;
  // Saturates rather than wraps: the ledger's own sums are checked (SQLite fails a query whose
  // integer sum overflows), but adding tiers together for display could still pass $9.2 million.
  if (__builtin_add_overflow(cost_picousd, o.cost_picousd, &cost_picousd)) {
    cost_picousd = INT64_MAX;
  }
}

UsageLedger::~UsageLedger() {
  if (db_) sqlite3_close(db_);
}

StatusOr<std::unique_ptr<UsageLedger>> UsageLedger::Open(const std::string& path) {
  std::unique_ptr<UsageLedger> ledger(new UsageLedger);
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(path.c_str(), &ledger->db_, flags, nullptr) != SQLITE_OK) {
    return UnavailableError("usage ledger: cannot open " + path + ": " +
                            (ledger->db_ ? sqlite3_errmsg(ledger->db_) : "out of memory"));
  }
  // The admin commands and the server share the file; wait for each other's short writes.
  sqlite3_busy_timeout(ledger->db_, 5000);
  {  // finalized before the migration's transaction, which cannot commit beside it
    SqliteStatement wal(ledger->db_, "PRAGMA journal_mode=WAL");
    if (!wal.ok() || sqlite3_step(wal.get()) != SQLITE_ROW || wal.ColumnText(0) != "wal") {
      return SqliteError(ledger->db_, "usage ledger: " + path + ": cannot switch to WAL");
    }
  }
  // NORMAL in WAL mode: a commit is written to the WAL (durable against a process kill) and
  // fsynced at checkpoints only (a power loss may drop the last commits).
  if (sqlite3_exec(ledger->db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr) !=
          SQLITE_OK ||
      sqlite3_exec(ledger->db_, kSchema, nullptr, nullptr, nullptr) != SQLITE_OK) {
    return SqliteError(ledger->db_, "usage ledger: " + path);
  }
  UF_RETURN_IF_ERROR(MigrateRealCost(ledger->db_));
  return ledger;
}

Status UsageLedger::Record(UsageRecord* r) {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_,
                     "INSERT INTO usage_ledger (key_id, time, request_id, model, tier, "
                     "prompt_tokens, cached_tokens, completion_tokens, cost_picousd) "
                     "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  if (!st.ok()) return SqliteError(db_, "usage ledger: insert");
  sqlite3_bind_int64(st.get(), 1, r->key_id);
  sqlite3_bind_double(st.get(), 2, r->time);
  st.BindText(3, r->request_id);
  st.BindText(4, r->model);
  st.BindText(5, scheduler::ServiceTierName(r->tier));
  sqlite3_bind_int64(st.get(), 6, r->prompt_tokens);
  sqlite3_bind_int64(st.get(), 7, r->cached_tokens);
  sqlite3_bind_int64(st.get(), 8, r->completion_tokens);
  sqlite3_bind_int64(st.get(), 9, r->cost_picousd);
  if (sqlite3_step(st.get()) != SQLITE_DONE) return SqliteError(db_, "usage ledger: insert");
  r->id = sqlite3_last_insert_rowid(db_);
  return OkStatus();
}

StatusOr<TierTotals> UsageLedger::Totals(int64_t key_id, double since, double until) const {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_,
                     "SELECT tier, count(*), sum(prompt_tokens), sum(cached_tokens), "
                     "sum(completion_tokens), sum(cost_picousd) FROM usage_ledger "
                     "WHERE key_id = ?1 AND time >= ?2 AND time < ?3 GROUP BY tier");
  if (!st.ok()) return SqliteError(db_, "usage ledger: totals");
  sqlite3_bind_int64(st.get(), 1, key_id);
  sqlite3_bind_double(st.get(), 2, since);
  sqlite3_bind_double(st.get(), 3, until);
  TierTotals totals{};
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) AddRow(st, 0, &totals);
  if (rc != SQLITE_DONE) return SqliteError(db_, "usage ledger: totals");
  return totals;
}

StatusOr<std::vector<KeyTierTotals>> UsageLedger::TotalsByKey(double since, int64_t key_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_,
                     "SELECT key_id, tier, count(*), sum(prompt_tokens), sum(cached_tokens), "
                     "sum(completion_tokens), sum(cost_picousd) FROM usage_ledger "
                     "WHERE time >= ?1 AND (?2 < 0 OR key_id = ?2) "
                     "GROUP BY key_id, tier ORDER BY key_id");
  if (!st.ok()) return SqliteError(db_, "usage ledger: totals by key");
  sqlite3_bind_double(st.get(), 1, since);
  sqlite3_bind_int64(st.get(), 2, key_id);
  std::vector<KeyTierTotals> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    const int64_t id = sqlite3_column_int64(st.get(), 0);
    if (out.empty() || out.back().key_id != id) out.push_back({id, {}});
    AddRow(st, 1, &out.back().tiers);
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "usage ledger: totals by key");
  return out;
}

StatusOr<std::vector<UsageRecord>> UsageLedger::Rows(int64_t key_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  SqliteStatement st(db_,
                     "SELECT id, key_id, time, request_id, model, tier, prompt_tokens, "
                     "cached_tokens, completion_tokens, cost_picousd FROM usage_ledger "
                     "WHERE key_id = ?1 ORDER BY id");
  if (!st.ok()) return SqliteError(db_, "usage ledger: rows");
  sqlite3_bind_int64(st.get(), 1, key_id);
  std::vector<UsageRecord> rows;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    UsageRecord r;
    r.id = sqlite3_column_int64(st.get(), 0);
    r.key_id = sqlite3_column_int64(st.get(), 1);
    r.time = sqlite3_column_double(st.get(), 2);
    r.request_id = st.ColumnText(3);
    r.model = st.ColumnText(4);
    r.tier = static_cast<ServiceTier>(TierIndex(st.ColumnText(5)));
    r.prompt_tokens = sqlite3_column_int64(st.get(), 6);
    r.cached_tokens = sqlite3_column_int64(st.get(), 7);
    r.completion_tokens = sqlite3_column_int64(st.get(), 8);
    r.cost_picousd = sqlite3_column_int64(st.get(), 9);
    rows.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "usage ledger: rows");
  return rows;
}

}  // namespace uf::server
