// The usage ledger: one SQLite row per metered request, in the keys database (table
// usage_ledger, beside api_keys), so one file holds who may call and what they used.
//
// Durability: the database runs in WAL mode with synchronous=NORMAL, and every Record is its own
// transaction. When Record returns, the row is in the WAL file through write(2), so it survives a
// kill -9 of the process (the OS holds the pages); it may be lost to a power failure or kernel
// crash before the next checkpoint's fsync. The server records a request before it sends the
// response (or the stream's last chunk) that tells the client its usage.
//
// Thread safety: one connection behind a mutex; Record from many HTTP threads is serialised.
// A write takes well under a millisecond in WAL mode, so the mutex is not a bottleneck at the
// request rates one CPU engine serves.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "scheduler/tiers.h"

struct sqlite3;

namespace uf::server {

struct UsageRecord {
  int64_t id = 0;  // row id, set by Record
  int64_t key_id = 0;
  double time = 0.0;  // unix seconds
  std::string request_id;
  std::string model;
  scheduler::ServiceTier tier = scheduler::ServiceTier::kDefault;  // the tier that served it
  int64_t prompt_tokens = 0;                                       // including cached_tokens
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cost_picousd = 0;  // 1e-12 USD, exact (server/metering.h)
};

struct UsageTotals {
  int64_t requests = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cost_picousd = 0;  // 1e-12 USD, exact

  int64_t tokens() const { return prompt_tokens + completion_tokens; }
  void Add(const UsageTotals& o);  // cost_picousd saturates at INT64_MAX ($9.2 million)
};

using TierTotals = std::array<UsageTotals, scheduler::kNumServiceTiers>;  // by ServiceTier

// One key's totals, for `ultrafast usage`.
struct KeyTierTotals {
  int64_t key_id = 0;
  TierTotals tiers;
};

class UsageLedger {
 public:
  ~UsageLedger();
  UsageLedger(const UsageLedger&) = delete;
  UsageLedger& operator=(const UsageLedger&) = delete;

  // Opens (creating if needed) the database file and its usage_ledger table; switches it to WAL.
  // A ledger written before costs were integers (a REAL `cost` column in dollars) is migrated in
  // one transaction to the integer `cost_picousd` column.
  static StatusOr<std::unique_ptr<UsageLedger>> Open(const std::string& path);

  // Commits the row; sets record->id.
  Status Record(UsageRecord* record);
  // Totals of key_id's rows with since <= time < until, per tier.
  StatusOr<TierTotals> Totals(int64_t key_id, double since, double until) const;
  // Every key's totals with time >= since (key_id < 0: all keys), ordered by key id.
  StatusOr<std::vector<KeyTierTotals>> TotalsByKey(double since, int64_t key_id = -1) const;
  // Rows of key_id in id order (tests, audits).
  StatusOr<std::vector<UsageRecord>> Rows(int64_t key_id) const;

 private:
  UsageLedger() = default;

  sqlite3* db_ = nullptr;
  mutable std::mutex mu_;  // serialises use of db_
};

}  // namespace uf::server
