// Metering: the price table and plan config, the SQLite usage ledger (exact per-tier totals,
// concurrency, durability against kill -9), quota admission with window rollover on a fake clock,
// the /v1/usage report, and all of it through the HTTP server on a tiny model.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "server/http_server.h"
#include "server/metering.h"
#include "shared_data.h"

namespace uf::server {
namespace {

using json = nlohmann::json;
using scheduler::ServiceTier;

constexpr ServiceTier kUltrafast = ServiceTier::kUltrafast;
constexpr ServiceTier kDefault = ServiceTier::kDefault;
constexpr ServiceTier kFlex = ServiceTier::kFlex;
int Idx(ServiceTier t) { return static_cast<int>(t); }

// Costs are integers (picodollars), so totals must match exactly; a JSON "cost" in dollars is
// the nearest double to that integer over 1e12.
void ExpectUsd(const json& cost, int64_t picousd) {
  EXPECT_EQ(cost.get<double>(), static_cast<double>(picousd) / 1e12);
}

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("uf_ledger_test_" + std::to_string(getpid()) + ".db"))
                .string();
    Remove();
    auto ledger = UsageLedger::Open(path_);
    ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
    ledger_ = std::move(ledger).value();
    clock_.Set(1'800'000'000.0);  // a unix time on a minute boundary (1.8e9 = 30e6 * 60)
  }
  void TearDown() override {
    ledger_.reset();
    Remove();
  }
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }

  std::string path_;
  std::unique_ptr<UsageLedger> ledger_;
  FakeClock clock_;
};

TEST(MeteringConfigTest, DefaultPricesAndPlans) {
  const MeteringConfig c = MeteringConfig::Defaults();
  const TierPrice& d = c.prices[Idx(kDefault)];
  // Picodollars per token = micro-dollars per million: $0.10, $0.025, $0.40 per M.
  EXPECT_EQ(d.input, 100'000);
  EXPECT_EQ(d.cached_input, 25'000);
  EXPECT_EQ(d.output, 400'000);
  EXPECT_EQ(c.prices[Idx(kUltrafast)].input, 6 * d.input);
  EXPECT_EQ(c.prices[Idx(kUltrafast)].output, 6 * d.output);
  EXPECT_EQ(c.prices[Idx(kFlex)].cached_input, d.cached_input / 2);
  EXPECT_EQ(c.prices[Idx(kFlex)].output, d.output / 2);
  ASSERT_NE(c.FindPlan("base"), nullptr);
  ASSERT_NE(c.FindPlan("scale"), nullptr);
  EXPECT_EQ(c.FindPlan(""), c.FindPlan("base"));
  EXPECT_EQ(c.FindPlan("gold"), nullptr);
  for (int i = 0; i < scheduler::kNumServiceTiers; ++i) {
    ASSERT_TRUE(c.FindPlan("base")->tokens_per_window[i].has_value());
    EXPECT_EQ(*c.FindPlan("scale")->tokens_per_window[i],
              25 * *c.FindPlan("base")->tokens_per_window[i]);
    EXPECT_FALSE(c.FindPlan("unlimited")->tokens_per_window[i].has_value());
  }
  EXPECT_EQ(c.window_s, 60);
}

TEST(MeteringConfigTest, CostByHand) {
  const MeteringConfig c = MeteringConfig::Defaults();
  // 1000 prompt tokens of which 400 cached, 500 output, default tier:
  // 600 * 0.10 + 400 * 0.025 + 500 * 0.40 = 60 + 10 + 200 = 270 per million -> $0.00027.
  EXPECT_EQ(c.Cost(kDefault, 1000, 400, 500), 270'000'000);  // 270e-6 USD in 1e-12 USD
  EXPECT_EQ(c.Cost(kUltrafast, 1000, 400, 500), 6 * 270'000'000);
  EXPECT_EQ(c.Cost(kFlex, 1000, 400, 500), 135'000'000);
  EXPECT_EQ(FormatUsd(c.Cost(kDefault, 1000, 400, 500)), "0.000270");
}

TEST(MeteringConfigTest, FormatUsdIsExactDecimal) {
  EXPECT_EQ(FormatUsd(0), "0.000000");
  EXPECT_EQ(FormatUsd(53'000'000), "0.000053");
  EXPECT_EQ(FormatUsd(1), "0.000000000001");
  EXPECT_EQ(FormatUsd(12'500'000'000'000), "12.500000");
  EXPECT_EQ(FormatUsd(9'223'372'036'854'775'807), "9223372.036854775807");
}

// Summing dollars as doubles printed 1.4000000000000001e-05 for two default-tier requests of 1
// and 34 output tokens at $0.40/M (binary fractions); integers keep it exact and the JSON prints
// 1.4e-05.
TEST(MeteringConfigTest, SumsHaveNoBinaryFloatArtefacts) {
  const MeteringConfig c = MeteringConfig::Defaults();
  double as_double = 0.0;
  UsageTotals t;
  for (int64_t n : {1, 34}) {
    as_double += static_cast<double>(n) * 0.4 / 1e6;  // what the ledger summed before
    UsageTotals one;
    one.cost_picousd = c.Cost(kDefault, 0, 0, n);
    t.Add(one);
  }
  EXPECT_NE(as_double, 14e-6);  // the artefact this test is about
  EXPECT_EQ(t.cost_picousd, 14'000'000);
  const std::string dumped = TotalsJson(t).dump();
  EXPECT_NE(dumped.find("\"cost\":1.4e-05"), std::string::npos) << dumped;
  EXPECT_NE(dumped.find("\"cost_picousd\":14000000"), std::string::npos) << dumped;
  EXPECT_EQ(FormatUsd(t.cost_picousd), "0.000014");
}

TEST(MeteringConfigTest, FromJson) {
  auto c = MeteringConfig::FromJson(R"({
    "base_price": {"input": 1.0, "cached_input": 0.5, "output": 2.0},
    "tier_multipliers": {"ultrafast": 10},
    "prices": {"flex": {"output": 0.25}},
    "window_seconds": 86400,
    "default_plan": "small",
    "plans": {"small": {"ultrafast": 0, "default": 1000}, "big": {"ultrafast": null, "flex": 5}}
  })");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->prices[Idx(kUltrafast)].input, 10'000'000);  // $10/M
  EXPECT_EQ(c->prices[Idx(kDefault)].output, 2'000'000);
  EXPECT_EQ(c->prices[Idx(kFlex)].input, 500'000);   // base x default multiplier 0.5
  EXPECT_EQ(c->prices[Idx(kFlex)].output, 250'000);  // explicit override
  EXPECT_EQ(c->window_s, 86400);
  EXPECT_EQ(c->plans.size(), 2u);
  const Plan* small = c->FindPlan("");
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(small->tokens_per_window[Idx(kUltrafast)], 0);
  EXPECT_EQ(small->tokens_per_window[Idx(kDefault)], 1000);
  EXPECT_FALSE(small->tokens_per_window[Idx(kFlex)].has_value());
  EXPECT_EQ(c->FindPlan("big")->tokens_per_window[Idx(kFlex)], 5);

  EXPECT_TRUE(MeteringConfig::FromJson("{}").ok());
  for (const char* bad :
       {"", "[]", "{\"window_seconds\": 0}", "{\"window_seconds\": 1.5}", "{\"frob\": 1}",
        "{\"base_price\": {\"input\": -1}}", "{\"base_price\": {\"inputs\": 1}}",
        "{\"tier_multipliers\": {\"priority\": 2}}", "{\"plans\": {}}",
        "{\"plans\": {\"a\": {\"default\": -5}}}", "{\"plans\": {\"a\": {\"default\": 1.5}}}",
        "{\"plans\": {\"a\": {}}}",  // default_plan "base" is gone
        "{\"default_plan\": \"nope\"}", "{\"prices\": {\"flex\": 3}}",
        // Prices are whole picodollars per token: at most 6 decimals in $/M, at most $100k/M.
        "{\"base_price\": {\"input\": 0.0000001}}",
        "{\"prices\": {\"flex\": {\"output\": 1e6}}}"}) {
    auto r = MeteringConfig::FromJson(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_EQ(MeteringConfig::FromFile("/nonexistent/metering.json").status().code(),
            StatusCode::kNotFound);
}

// $/M with up to 6 decimals converts exactly; a 7th decimal is refused at any magnitude (not
// rounded: 1.0000005 would otherwise bill 1000000.5 picodollars per token as 1000001), and so is a
// price past $100,000/M; the error names the field.
TEST(MeteringConfigTest, PricesAreWholePicodollarsPerToken) {
  for (const auto& [usd_per_m, pico] :
       std::vector<std::pair<std::string, int64_t>>{{"0", 0},
                                                    {"0.000001", 1},
                                                    {"0.1", 100'000},
                                                    {"0.025", 25'000},
                                                    {"1.000001", 1'000'001},
                                                    {"0.3", 300'000},
                                                    {"12345.678901", 12'345'678'901},
                                                    {"99999.999999", 99'999'999'999},
                                                    {"100000", 100'000'000'000},
                                                    {"1e-6", 1}}) {
    auto c =
        MeteringConfig::FromJson("{\"prices\": {\"default\": {\"output\": " + usd_per_m + "}}}");
    ASSERT_TRUE(c.ok()) << usd_per_m << ": " << c.status().ToString();
    EXPECT_EQ(c->prices[Idx(kDefault)].output, pico) << usd_per_m;
  }
  for (const char* usd_per_m : {"0.0000001", "0.0000005", "1.0000005", "0.5000004", "2.4000001",
                                "99999.9999995", "12345.6789012", "100000.000001", "1e300"}) {
    auto c = MeteringConfig::FromJson(std::string("{\"base_price\": {\"cached_input\": ") +
                                      usd_per_m + "}}");
    ASSERT_FALSE(c.ok()) << usd_per_m << " was accepted as "
                         << c->prices[Idx(kDefault)].cached_input;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << usd_per_m;
    EXPECT_NE(c.status().message().find("metering config: base_price.cached_input"),
              std::string::npos)
        << c.status().message();
  }
  // A derived tier price past the cap is refused too, not clamped: $50,000/M x 6 for ultrafast.
  auto c = MeteringConfig::FromJson("{\"base_price\": {\"output\": 50000}}");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tier_multipliers.ultrafast"), std::string::npos)
      << c.status().message();
  c = MeteringConfig::FromJson(
      "{\"base_price\": {\"output\": 50000}, \"tier_multipliers\": {\"ultrafast\": 2}}");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->prices[Idx(kUltrafast)].output, 100'000'000'000);
}

// The ledger's per-tier totals equal the sum of the usage recorded, exactly (tokens are integers
// summed by SQLite), and so does the /v1/usage report.
TEST_F(LedgerTest, TotalsEqualRecordedUsagePerTier) {
  Meter meter(MeteringConfig::Defaults(), ledger_.get(), &clock_);
  std::mt19937 rng(7);
  TierTotals expected{}, other{};
  for (int i = 0; i < 300; ++i) {
    const auto tier = static_cast<ServiceTier>(rng() % 3);
    const int64_t key = 1 + rng() % 2;
    const int64_t prompt = 1 + rng() % 500, cached = rng() % (prompt + 1), completion = rng() % 300;
    auto r =
        meter.Record(key, "req-" + std::to_string(i), "tiny", tier, prompt, cached, completion);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GT(r->id, 0);
    UsageTotals& t = (key == 1 ? expected : other)[Idx(tier)];
    t.requests += 1;
    t.prompt_tokens += prompt;
    t.cached_tokens += cached;
    t.completion_tokens += completion;
    t.cost_picousd += MeteringConfig::Defaults().Cost(tier, prompt, cached, completion);
    clock_.Advance(0.01);  // all inside the first minute-window
  }
  auto totals = ledger_->Totals(1, 0, HUGE_VAL);
  ASSERT_TRUE(totals.ok());
  auto report = meter.Report(1, "alice", "base");
  ASSERT_TRUE(report.ok());
  for (int i = 0; i < scheduler::kNumServiceTiers; ++i) {
    const std::string name(scheduler::ServiceTierName(static_cast<ServiceTier>(i)));
    EXPECT_EQ((*totals)[i].requests, expected[i].requests) << name;
    EXPECT_EQ((*totals)[i].prompt_tokens, expected[i].prompt_tokens) << name;
    EXPECT_EQ((*totals)[i].cached_tokens, expected[i].cached_tokens) << name;
    EXPECT_EQ((*totals)[i].completion_tokens, expected[i].completion_tokens) << name;
    EXPECT_EQ((*totals)[i].cost_picousd, expected[i].cost_picousd) << name;
    for (const char* period : {"current_window", "all_time"}) {
      const json& t = (*report)[period][name];
      EXPECT_EQ(t["requests"], expected[i].requests);
      EXPECT_EQ(t["input_tokens"], expected[i].prompt_tokens);
      EXPECT_EQ(t["cached_tokens"], expected[i].cached_tokens);
      EXPECT_EQ(t["output_tokens"], expected[i].completion_tokens);
      EXPECT_EQ(t["cost_picousd"], expected[i].cost_picousd);
      ExpectUsd(t["cost"], expected[i].cost_picousd);
    }
  }
  auto by_key = ledger_->TotalsByKey(0);
  ASSERT_TRUE(by_key.ok());
  ASSERT_EQ(by_key->size(), 2u);
  EXPECT_EQ((*by_key)[1].key_id, 2);
  EXPECT_EQ((*by_key)[1].tiers[Idx(kFlex)].completion_tokens, other[Idx(kFlex)].completion_tokens);
  auto rows = ledger_->Rows(2);
  ASSERT_TRUE(rows.ok());
  int64_t n_other = 0;
  for (const auto& t : other) n_other += t.requests;
  EXPECT_EQ(static_cast<int64_t>(rows->size()), n_other);
}

TEST_F(LedgerTest, QuotaAndWindowRollover) {
  auto config = MeteringConfig::FromJson(
      R"({"window_seconds": 60, "default_plan": "p",
          "plans": {"p": {"ultrafast": 1000, "default": 0}}})");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Meter meter(*config, ledger_.get(), &clock_);
  clock_.Set(1'800'000'000.0 + 15.0);  // 15 s into a window: 45 s left
  auto admit = [&](ServiceTier tier, int64_t prompt, int64_t key = 1) {
    auto d = meter.CheckQuota(key, "p", tier, prompt);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? *d : std::optional<QuotaDenial>();
  };
  EXPECT_FALSE(admit(kUltrafast, 1000));
  ASSERT_TRUE(meter.Record(1, "a", "m", kUltrafast, 300, 100, 600).ok());  // 900 tokens used
  EXPECT_FALSE(admit(kUltrafast, 100));
  auto denied = admit(kUltrafast, 101);
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->retry_after_s, 45);
  EXPECT_NE(denied->message.find("quota of 1000 ultrafast tokens"), std::string::npos)
      << denied->message;
  EXPECT_FALSE(admit(kUltrafast, 101, /*key=*/2));  // quotas are per key
  EXPECT_FALSE(admit(kFlex, 1'000'000));            // no flex limit in plan p
  auto never = admit(kDefault, 1);                  // a zero quota: waiting does not help
  ASSERT_TRUE(never);
  EXPECT_EQ(never->retry_after_s, 0);
  auto too_big = admit(kUltrafast, 1001);
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->retry_after_s, 0);

  // An admitted request may end past the limit; the overshoot counts in its window.
  ASSERT_TRUE(meter.Record(1, "b", "m", kUltrafast, 100, 0, 500).ok());  // 1500 used
  clock_.Advance(44.5);
  denied = admit(kUltrafast, 1);
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->retry_after_s, 1);  // 0.5 s rounds up
  auto report = meter.Report(1, "k", "p");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ((*report)["quota"]["ultrafast"]["used"], 1500);
  EXPECT_EQ((*report)["quota"]["ultrafast"]["remaining"], 0);
  EXPECT_TRUE((*report)["quota"]["flex"]["limit"].is_null());
  EXPECT_EQ((*report)["window"]["start"], 1'800'000'000);
  EXPECT_EQ((*report)["window"]["end"], 1'800'000'060);

  clock_.Advance(0.5);  // the next window: everything frees
  EXPECT_FALSE(admit(kUltrafast, 1000));
  report = meter.Report(1, "k", "p");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ((*report)["current_window"]["ultrafast"]["requests"], 0);
  EXPECT_EQ((*report)["all_time"]["ultrafast"]["requests"], 2);
  EXPECT_EQ((*report)["all_time"]["total"]["output_tokens"], 1100);
  EXPECT_EQ((*report)["quota"]["ultrafast"]["remaining"], 1000);

  auto unknown = meter.CheckQuota(1, "gold", kDefault, 1);
  EXPECT_EQ(unknown.status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(LedgerTest, ReportShape) {
  Meter meter(MeteringConfig::Defaults(), ledger_.get(), &clock_);
  auto r = meter.Report(5, "bob", "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)["object"], "usage");
  EXPECT_EQ((*r)["key"]["id"], 5);
  EXPECT_EQ((*r)["key"]["name"], "bob");
  EXPECT_EQ((*r)["plan"], "base");
  EXPECT_EQ((*r)["window"]["seconds"], 60);
  for (const char* tier : {"ultrafast", "default", "flex"}) {
    EXPECT_EQ((*r)["current_window"][tier]["requests"], 0);
    EXPECT_EQ((*r)["quota"][tier]["used"], 0);
    EXPECT_TRUE((*r)["prices_per_million_tokens"][tier]["output"].is_number());
  }
  EXPECT_EQ((*r)["quota"]["ultrafast"]["limit"], 20000);
  EXPECT_EQ((*r)["all_time"]["total"]["cost"], 0.0);
}

// The usage_ledger schema before costs were integers, as that version created it (`git show
// edaf322~1:src/server/ledger.cc`), and in WAL mode as its server left the file.
void WriteRealCostLedger(const std::string& path, const std::string& inserts) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql =
      "PRAGMA journal_mode=WAL;"
      "CREATE TABLE IF NOT EXISTS usage_ledger ("
      " id INTEGER PRIMARY KEY,"
      " key_id INTEGER NOT NULL,"
      " time REAL NOT NULL,"
      " request_id TEXT NOT NULL,"
      " model TEXT NOT NULL,"
      " tier TEXT NOT NULL,"
      " prompt_tokens INTEGER NOT NULL,"
      " cached_tokens INTEGER NOT NULL,"
      " completion_tokens INTEGER NOT NULL,"
      " cost REAL NOT NULL);"
      "CREATE INDEX IF NOT EXISTS usage_ledger_key_time ON usage_ledger (key_id, time);" +
      inserts;
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
  sqlite3_free(error);
  sqlite3_close(db);
}

// "name TYPE" per column of usage_ledger, read with a raw connection.
std::vector<std::string> LedgerColumns(const std::string& path) {
  sqlite3* db = nullptr;
  std::vector<std::string> columns;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return columns;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA table_info(usage_ledger)", -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    columns.push_back(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 1))) + " " +
                      reinterpret_cast<const char*>(sqlite3_column_text(st, 2)));
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return columns;
}

// A ledger from before integer costs (cost REAL, dollars) is migrated on open: every row's cost
// becomes exact picodollars and the totals add up as integers.
TEST_F(LedgerTest, MigratesRealDollarCostsToPicodollars) {
  ledger_.reset();
  Remove();
  // Costs as the old code computed them with the default prices, binary-float artefacts included.
  WriteRealCostLedger(
      path_,
      "INSERT INTO usage_ledger VALUES (1, 7, 100.0, 'a', 'm', 'default', 10, 0, 20, 0.000009);"
      "INSERT INTO usage_ledger VALUES (2, 7, 101.0, 'b', 'm', 'default', 0, 0, 23,"
      " 9.200000000000002e-06);"
      "INSERT INTO usage_ledger VALUES (3, 7, 102.0, 'c', 'm', 'ultrafast', 5, 5, 1,"
      " 3.1500000000000003e-06);"
      "INSERT INTO usage_ledger VALUES (4, 8, 103.0, 'd', 'm', 'flex', 3, 0, 1,"
      " 3.5000000000000004e-07);");
  ASSERT_FALSE(HasFatalFailure());

  auto ledger = UsageLedger::Open(path_);
  ASSERT_TRUE(ledger.ok()) << ledger.status().ToString();
  EXPECT_EQ(LedgerColumns(path_),
            (std::vector<std::string>{"id INTEGER", "key_id INTEGER", "time REAL",
                                      "request_id TEXT", "model TEXT", "tier TEXT",
                                      "prompt_tokens INTEGER", "cached_tokens INTEGER",
                                      "completion_tokens INTEGER", "cost_picousd INTEGER"}));
  auto rows = (*ledger)->Rows(7);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 3u);
  EXPECT_EQ((*rows)[0].cost_picousd, 9'000'000);
  EXPECT_EQ((*rows)[1].cost_picousd, 9'200'000);
  EXPECT_EQ((*rows)[2].cost_picousd, 3'150'000);
  EXPECT_EQ((*rows)[1].completion_tokens, 23);  // the other columns are untouched
  EXPECT_EQ((*rows)[2].tier, kUltrafast);
  auto totals = (*ledger)->Totals(7, 0, HUGE_VAL);
  ASSERT_TRUE(totals.ok());
  EXPECT_EQ((*totals)[Idx(kDefault)].cost_picousd, 18'200'000);
  EXPECT_EQ((*totals)[Idx(kDefault)].completion_tokens, 43);
  EXPECT_EQ((*totals)[Idx(kDefault)].requests, 2);
  EXPECT_EQ((*totals)[Idx(kUltrafast)].cost_picousd, 3'150'000);
  auto by_key = (*ledger)->TotalsByKey(0);
  ASSERT_TRUE(by_key.ok());
  ASSERT_EQ(by_key->size(), 2u);
  EXPECT_EQ((*by_key)[1].tiers[Idx(kFlex)].cost_picousd, 350'000);
  // New rows land in the migrated table, and opening again is a no-op.
  UsageRecord r;
  r.key_id = 7;
  r.request_id = "d";
  r.model = "m";
  r.cost_picousd = 1;
  ASSERT_TRUE((*ledger)->Record(&r).ok());
  ledger->reset();
  auto again = UsageLedger::Open(path_);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*(*again)->Totals(7, 0, HUGE_VAL))[Idx(kDefault)].cost_picousd, 18'200'001);
}

// The server and `ultrafast usage` may open an old ledger at the same moment: one of them
// migrates, the others find it done (the check is repeated under the write lock), and all open.
TEST_F(LedgerTest, ConcurrentOpensOfAnOldLedgerMigrateOnce) {
  ledger_.reset();
  for (int round = 0; round < 10; ++round) {
    Remove();
    WriteRealCostLedger(
        path_,
        "INSERT INTO usage_ledger VALUES (1, 7, 100.0, 'a', 'm', 'default', 0, 0, 53, "
        "2.1200000000000004e-05);");
    ASSERT_FALSE(HasFatalFailure());
    constexpr int kOpeners = 4;
    std::atomic<int> waiting{kOpeners};
    std::vector<StatusOr<std::unique_ptr<UsageLedger>>> opened;
    for (int i = 0; i < kOpeners; ++i) opened.emplace_back(InternalError("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < kOpeners; ++i) {
      threads.emplace_back([&, i] {
        waiting.fetch_sub(1);
        while (waiting.load() > 0) {
        }
        opened[i] = UsageLedger::Open(path_);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kOpeners; ++i) {
      ASSERT_TRUE(opened[i].ok()) << "round " << round << ": " << opened[i].status().ToString();
      auto totals = (*opened[i])->Totals(7, 0, HUGE_VAL);
      ASSERT_TRUE(totals.ok()) << totals.status().ToString();
      EXPECT_EQ((*totals)[Idx(kDefault)].cost_picousd, 21'200'000);
    }
  }
}

// 53 output tokens at $1/M, recorded as 53 one-token requests or as 4 + 40 + 9: summed as dollars
// in doubles (the old REAL column and sum(cost)) the reports printed 5.2999999999999947e-05 and
// 5.300000000000001e-05. Summed as integer picodollars both are 53000000, and the dumped JSON
// says 5.3e-05.
TEST_F(LedgerTest, ReportedSumsHaveNoBinaryFloatArtefacts) {
  auto config = MeteringConfig::FromJson(R"({"base_price": {"output": 1}})");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Meter meter(*config, ledger_.get(), &clock_);
  const std::vector<std::pair<std::vector<int64_t>, std::string>> cases = {
      {std::vector<int64_t>(53, 1), "5.2999999999999947e-05"},
      {{4, 40, 9}, "5.300000000000001e-05"}};
  int64_t key = 0;
  for (const auto& [split, artefact] : cases) {
    ++key;
    double as_double = 0.0;
    for (int64_t n : split) {
      as_double += static_cast<double>(n) * 1.0 / 1e6;  // the old Cost, summed in row order
      ASSERT_TRUE(meter.Record(key, "r", "tiny", kDefault, 0, 0, n).ok());
    }
    EXPECT_EQ(json(as_double).dump(), artefact);  // what the old code printed
    auto report = meter.Report(key, "k", "");
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    for (const char* period : {"current_window", "all_time"}) {
      for (const char* tier : {"default", "total"}) {
        const std::string dumped = (*report)[period][tier].dump();
        EXPECT_NE(dumped.find("\"cost\":5.3e-05,"), std::string::npos) << dumped;
        EXPECT_NE(dumped.find("\"cost_picousd\":53000000"), std::string::npos) << dumped;
        EXPECT_EQ(dumped.find("5.29999"), std::string::npos) << dumped;
        EXPECT_EQ(dumped.find("5.30000"), std::string::npos) << dumped;
      }
    }
    auto by_key = ledger_->TotalsByKey(0, key);
    ASSERT_TRUE(by_key.ok());
    ASSERT_EQ(by_key->size(), 1u);
    const UsageTotals& t = (*by_key)[0].tiers[Idx(kDefault)];
    EXPECT_EQ(t.cost_picousd, 53'000'000);
    EXPECT_EQ(FormatUsd(t.cost_picousd), "0.000053");  // the `ultrafast usage` table
  }
}

// int64 picodollars hold $9.2 million: a request's cost and a cross-tier total saturate there,
// and a ledger sum past it is an error (SQLite's integer sum) rather than a wrapped number.
TEST_F(LedgerTest, MoneyPastInt64FailsOrSaturatesNeverWraps) {
  const MeteringConfig c = MeteringConfig::Defaults();
  EXPECT_EQ(c.Cost(kUltrafast, 0, 0, INT64_MAX / 1000), INT64_MAX);
  EXPECT_EQ(c.Cost(kUltrafast, INT64_MAX, 0, INT64_MAX), INT64_MAX);
  UsageTotals a, b;
  a.cost_picousd = INT64_MAX - 1;
  b.cost_picousd = 2;
  a.Add(b);
  EXPECT_EQ(a.cost_picousd, INT64_MAX);
  EXPECT_EQ(FormatUsd(a.cost_picousd), "9223372.036854775807");
  for (int i = 0; i < 2; ++i) {
    UsageRecord r;
    r.key_id = 3;
    r.request_id = "big";
    r.model = "m";
    r.cost_picousd = INT64_MAX / 2 + 1;
    ASSERT_TRUE(ledger_->Record(&r).ok());
  }
  auto totals = ledger_->Totals(3, 0, HUGE_VAL);
  ASSERT_FALSE(totals.ok());
  EXPECT_NE(totals.status().message().find("overflow"), std::string::npos)
      << totals.status().ToString();
}

TEST_F(LedgerTest, ConcurrentRecordsAllLand) {
  Meter meter(MeteringConfig::Defaults(), ledger_.get(), &clock_);
  constexpr int kThreads = 8, kPerThread = 100;
  std::vector<std::thread> threads;
  std::vector<int64_t> ids[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto r = meter.Record(1, "r", "m", static_cast<ServiceTier>(i % 3), 10 + t, 0, i);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        ids[t].push_back(r->id);
        // Readers interleave with writers, as /v1/usage and quota checks do.
        if (i % 10 == 0) {
          ASSERT_TRUE(meter.CheckQuota(1, "", kDefault, 1).ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<int64_t> unique;
  for (const auto& v : ids) unique.insert(v.begin(), v.end());
  EXPECT_EQ(unique.size(), static_cast<size_t>(kThreads * kPerThread));
  auto totals = ledger_->Totals(1, 0, HUGE_VAL);
  ASSERT_TRUE(totals.ok());
  int64_t requests = 0, prompt = 0, completion = 0;
  for (const auto& t : *totals) {
    requests += t.requests;
    prompt += t.prompt_tokens;
    completion += t.completion_tokens;
  }
  EXPECT_EQ(requests, kThreads * kPerThread);
  EXPECT_EQ(prompt, kPerThread * (10 * kThreads + kThreads * (kThreads - 1) / 2));
  EXPECT_EQ(completion, kThreads * kPerThread * (kPerThread - 1) / 2);
}

// "A kill -9 under load loses no usage that a client was already told about": a child records
// rows and acknowledges each on a pipe only after Record returned (as the server answers only
// after recording); the parent kills it mid-stream, then every acknowledged row must be in the
// database.
TEST_F(LedgerTest, KillNineLosesNoAcknowledgedRow) {
  ledger_.reset();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    auto ledger = UsageLedger::Open(path_);
    if (!ledger.ok()) _exit(3);
    // Several writer threads, as the HTTP pool has.
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int64_t i = 0;; ++i) {
          UsageRecord r;
          r.key_id = 1;
          r.time = 1.8e9 + static_cast<double>(i);
          r.request_id = std::to_string(t) + "-" + std::to_string(i);
          r.model = "m";
          r.prompt_tokens = i;
          if (!(*ledger)->Record(&r).ok()) _exit(4);
          const int64_t id = r.id;
          if (write(fds[1], &id, sizeof(id)) != sizeof(id)) _exit(5);
        }
      });
    }
    for (auto& th : threads) th.join();
    _exit(0);
  }
  close(fds[1]);
  std::vector<int64_t> acked;
  int64_t id;
  while (acked.size() < 400 && read(fds[0], &id, sizeof(id)) == sizeof(id)) acked.push_back(id);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // Acknowledgements already in the pipe were sent before the kill: they count too.
  while (read(fds[0], &id, sizeof(id)) == sizeof(id)) acked.push_back(id);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited early with status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_GE(acked.size(), 400u);

  auto reopened = UsageLedger::Open(path_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  auto rows = (*reopened)->Rows(1);
  ASSERT_TRUE(rows.ok());
  std::set<int64_t> present;
  for (const UsageRecord& r : *rows) present.insert(r.id);
  size_t missing = 0;
  for (int64_t a : acked) missing += present.count(a) == 0;
  EXPECT_EQ(missing, 0u) << "of " << acked.size() << " acknowledged rows";
  EXPECT_GE(present.size(), acked.size());
  ledger_ = std::move(reopened).value();
}

TEST_F(LedgerTest, OpenFailsClearly) {
  auto bad = UsageLedger::Open("/nonexistent-dir/x/ledger.db");
  EXPECT_FALSE(bad.ok());
  // A file that is not a database.
  const std::string junk = path_ + ".junk";
  std::FILE* f = std::fopen(junk.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("this is not an sqlite database, not at all, no sir, definitely not one", f);
  std::fclose(f);
  auto r = UsageLedger::Open(junk);
  EXPECT_FALSE(r.ok());
  std::remove(junk.c_str());
}

// The server end to end: a real engine on a tiny model, keys in the same database as the ledger,
// a fake clock for the quota window.
class MeteredServerTest : public LedgerTest {
 protected:
  static constexpr char kModel[] = "../shared/models/tiny-qwen2-256-q8_0.gguf";

  void Start(const std::string& config_json) {
    static model::Model* model = std::move(model::Model::Load(kModel)).value().release();
    static Tokenizer* tokenizer = std::move(Tokenizer::FromGguf(model->file())).value().release();
    auto keys = KeyStore::OpenDb(path_, /*create=*/true, /*read_only=*/false);
    ASSERT_TRUE(keys.ok()) << keys.status().ToString();
    keys_ = std::move(keys).value();
    auto config = MeteringConfig::FromJson(config_json);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    meter_ = std::make_unique<Meter>(*config, ledger_.get(), &clock_);
    engine::ServiceOptions so;
    so.n_threads = 2;
    so.ctx = 256;
    service_ = std::move(engine::Service::Create(*model, *tokenizer, so)).value();
    ServerOptions ho;
    ho.port = 0;
    ho.model_id = "tiny";
    ho.poll_s = 0.02;
    auto render = [](const json& messages, const json&) -> StatusOr<std::string> {
      std::string out;
      for (const auto& m : messages) out += m["content"].get<std::string>() + "\n";
      return out;
    };
    http_ = std::make_unique<HttpServer>(ho, service_.get(), render, keys_.get(), &metrics_);
    http_->SetMeter(meter_.get());
    ASSERT_TRUE(http_->Bind().ok());
    thread_ = std::thread([this] { http_->Serve(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", http_->port());
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (http_) {
      client_.reset();
      service_->Shutdown();
      http_->Stop();
      thread_.join();
    }
    LedgerTest::TearDown();
  }
  httplib::Result Post(const std::string& key, const std::string& body) {
    return client_->Post("/v1/completions", {{"Authorization", "Bearer " + key}}, body,
                         "application/json");
  }
  json Usage(const std::string& key) {
    auto r = client_->Get("/v1/usage", {{"Authorization", "Bearer " + key}});
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return r ? json::parse(r->body) : json();
  }

  std::unique_ptr<KeyStore> keys_;
  std::unique_ptr<Meter> meter_;
  std::unique_ptr<engine::Service> service_;
  Metrics metrics_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

std::string Completion(int max_tokens, const std::string& extra = "") {
  return R"({"model":"tiny","prompt":"Once upon a time there was","temperature":0,)"
         R"("ignore_eos":true,"max_tokens":)" +
         std::to_string(max_tokens) + extra + "}";
}

TEST_F(MeteredServerTest, UsageReturnedEqualsLedgerAndQuotaRollsOver) {
  UF_REQUIRE_SHARED();
  Start(R"({"window_seconds": 60, "plans": {"base": {"default": 40, "flex": null}}})");
  auto key = keys_->AddKey("alice");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(client_->Get("/v1/usage")->status, 401);

  // Non-streamed default request, then a streamed flex one; sum what the client was told.
  TierTotals told{};
  auto r = Post(*key, Completion(30));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body);
  EXPECT_EQ(body["service_tier"], "default");
  auto add = [&](ServiceTier tier, const json& usage) {
    UsageTotals& t = told[Idx(tier)];
    t.requests += 1;
    t.prompt_tokens += usage["prompt_tokens"].get<int64_t>();
    t.cached_tokens += usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    t.completion_tokens += usage["completion_tokens"].get<int64_t>();
  };
  add(kDefault, body["usage"]);
  r = Post(*key, Completion(5, R"(,"stream":true,"stream_options":{"include_usage":true},)"
                               R"("service_tier":"flex")"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  json stream_usage;
  for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos; ++pos) {
    const json chunk = json::parse(r->body.substr(pos + 6, r->body.find("\n\n", pos) - pos - 6));
    if (chunk.contains("usage") && !chunk["usage"].is_null()) stream_usage = chunk["usage"];
  }
  ASSERT_FALSE(stream_usage.is_null()) << r->body;
  add(kFlex, stream_usage);

  const json usage = Usage(*key);
  for (ServiceTier tier : {kUltrafast, kDefault, kFlex}) {
    const json& got = usage["current_window"][std::string(scheduler::ServiceTierName(tier))];
    const UsageTotals& want = told[Idx(tier)];
    EXPECT_EQ(got["requests"], want.requests);
    EXPECT_EQ(got["input_tokens"], want.prompt_tokens);
    EXPECT_EQ(got["cached_tokens"], want.cached_tokens);
    EXPECT_EQ(got["output_tokens"], want.completion_tokens);
    const int64_t cost =
        meter_->config().Cost(tier, want.prompt_tokens, want.cached_tokens, want.completion_tokens);
    EXPECT_EQ(got["cost_picousd"], cost);
    ExpectUsd(got["cost"], cost);
  }
  auto rows = ledger_->Rows(keys_->Authenticate("Bearer " + *key)->id);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].request_id, body["id"]);
  EXPECT_EQ((*rows)[1].tier, kFlex);

  // The default quota (40 tokens) is (nearly) spent: 429 quota_exceeded until the window ends. The
  // fake clock stands at 1.8e9, a window start, so Retry-After is the whole 60 s.
  r = Post(*key, Completion(2));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "quota_exceeded");
  EXPECT_EQ(r->get_header_value("Retry-After"), "60");
  const int64_t used = told[Idx(kDefault)].tokens();
  ASSERT_GT(used + told[Idx(kDefault)].prompt_tokens, 40);  // the same prompt no longer fits
  EXPECT_EQ(Usage(*key)["quota"]["default"]["used"], used);
  EXPECT_EQ(Usage(*key)["quota"]["default"]["remaining"], std::max<int64_t>(0, 40 - used));
  // Flex is unlimited in this plan; the refused request was not billed.
  ASSERT_EQ(Post(*key, Completion(2, R"(,"service_tier":"flex")"))->status, 200);
  EXPECT_EQ(Usage(*key)["current_window"]["default"]["requests"], 1);

  clock_.Advance(60.0);
  r = Post(*key, Completion(2));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const json after = Usage(*key);
  EXPECT_EQ(after["current_window"]["default"]["requests"], 1);
  EXPECT_EQ(after["all_time"]["default"]["requests"], 2);
  EXPECT_EQ(after["all_time"]["flex"]["requests"], 2);
}

}  // namespace
}  // namespace uf::server

// One request core: a Responses and a Messages request are admitted against the same quota and
// recorded in the same ledger as a completion, with the usage each API reports, under the
// response's own id; a spent quota is a 429 in each API's error shape.
namespace uf::server {
namespace {

TEST_F(MeteredServerTest, EveryApiIsMeteredTheSame) {
  UF_REQUIRE_SHARED();
  Start(R"({"window_seconds": 60, "plans": {"base": {"default": 60, "flex": null}}})");
  auto key = keys_->AddKey("bob");
  ASSERT_TRUE(key.ok());
  const httplib::Headers bearer = {{"Authorization", "Bearer " + *key}};
  auto r = client_->Post("/v1/responses", bearer,
                         R"({"model":"tiny","input":"Once upon","max_output_tokens":6,)"
                         R"("temperature":0,"ignore_eos":true,"service_tier":"flex"})",
                         "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json resp = json::parse(r->body);
  EXPECT_EQ(resp["service_tier"], "flex");
  r = client_->Post("/v1/messages", {{"x-api-key", *key}},
                    R"({"model":"tiny","max_tokens":5,"temperature":0,"ignore_eos":true,)"
                    R"("messages":[{"role":"user","content":"Once upon"}]})",
                    "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json msg = json::parse(r->body);
  auto rows = ledger_->Rows(keys_->ListKeys()->back().id);
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  const UsageRecord& a = (*rows)[0];
  EXPECT_EQ(a.request_id, resp["id"]);
  EXPECT_EQ(a.tier, kFlex);
  EXPECT_EQ(a.prompt_tokens, resp["usage"]["input_tokens"]);
  EXPECT_EQ(a.cached_tokens, resp["usage"]["input_tokens_details"]["cached_tokens"]);
  EXPECT_EQ(a.completion_tokens, 6);
  const UsageRecord& b = (*rows)[1];
  EXPECT_EQ(b.request_id, msg["id"]);
  EXPECT_EQ(b.tier, kDefault);
  EXPECT_EQ(b.prompt_tokens, msg["usage"]["input_tokens"].get<int64_t>() +
                                 msg["usage"]["cache_read_input_tokens"].get<int64_t>());
  EXPECT_EQ(b.cached_tokens, msg["usage"]["cache_read_input_tokens"]);
  EXPECT_EQ(b.completion_tokens, 5);
  // The default quota (60 tokens) is spent now or by the next request; then both APIs refuse.
  for (int i = 0; i < 3; ++i) {
    r = client_->Post("/v1/messages", {{"x-api-key", *key}},
                      R"({"model":"tiny","max_tokens":30,"ignore_eos":true,)"
                      R"("messages":[{"role":"user","content":"Once upon"}]})",
                      "application/json");
    ASSERT_TRUE(r);
    if (r->status != 200) break;
  }
  EXPECT_EQ(r->status, 429);
  const json err = json::parse(r->body);
  EXPECT_EQ(err["type"], "error");
  EXPECT_EQ(err["error"]["type"], "rate_limit_error");
  EXPECT_FALSE(r->get_header_value("Retry-After").empty());
  r = client_->Post("/v1/responses", bearer, R"({"model":"tiny","input":"x"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "quota_exceeded");
}

}  // namespace
}  // namespace uf::server
