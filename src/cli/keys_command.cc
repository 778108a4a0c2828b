// `ultrafast keys` (API keys and their plans) and `ultrafast usage` (the usage ledger), both on
// the keys database that `ultrafast serve --keys-db` reads and meters into.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/serve.h"
#include "server/auth.h"
#include "server/ledger.h"
#include "server/metering.h"

namespace uf::cli {
namespace {

using json = nlohmann::json;

int Report(std::string_view command, const Status& s) {
  std::fprintf(stderr, "ultrafast %.*s: %s\n", static_cast<int>(command.size()), command.data(),
               s.ToString().c_str());
  return 1;
}

std::string Utc(int64_t unix_s) {
  char when[32] = "?";
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  if (gmtime_r(&t, &tm)) std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
  return when;
}

StatusOr<server::MeteringConfig> LoadConfig(const std::string& path) {
  if (path.empty()) return server::MeteringConfig::Defaults();
  return server::MeteringConfig::FromFile(path);
}

Status CheckPlan(const std::string& plan, const std::string& config_path) {
  if (plan.empty()) return OkStatus();
  UF_ASSIGN_OR_RETURN(server::MeteringConfig config, LoadConfig(config_path));
  if (config.FindPlan(plan) != nullptr) return OkStatus();
  std::string known;
  for (const auto& [name, p] : config.plans) known += (known.empty() ? "" : ", ") + name;
  return InvalidArgumentError("unknown plan '" + plan + "' (configured: " + known +
                              (config_path.empty() ? "; pass --metering-config for others)" : ")"));
}

}  // namespace

StatusOr<double> ParseSince(std::string_view text, double now) {
  const std::string s(text);
  if (s.empty()) return 0.0;
  // Relative: "90s", "30m", "2h", "7d" before now.
  const char unit = s.back();
  const std::map<char, double> units = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
  if (units.count(unit) && s.size() > 1 && s.size() <= 10 &&
      s.find_first_not_of("0123456789") == s.size() - 1) {
    return now - std::stod(s.substr(0, s.size() - 1)) * units.at(unit);
  }
  if (s.find_first_not_of("0123456789") == std::string::npos && s.size() <= 12) {
    return std::stod(s);  // unix seconds
  }
  // UTC date or date-time.
  for (const char* format :
       {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d"}) {
    std::tm tm{};
    const char* end = strptime(s.c_str(), format, &tm);
    if (end != nullptr && *end == '\0') return static_cast<double>(timegm(&tm));
  }
  return InvalidArgumentError("cannot read --since '" + s +
                              "': expected unix seconds, YYYY-MM-DD[THH:MM[:SS]] (UTC), or a "
                              "duration like 30m, 2h, 7d");
}

int RunKeys(const KeysArgs& args) {
  const bool create = args.action == "create" || args.action == "add";
  if (create || args.action == "plan") {
    if (Status s = CheckPlan(args.plan, args.metering_config); !s.ok()) return Report("keys", s);
  }
  auto store = server::KeyStore::OpenDb(args.db, /*create=*/create, /*read_only=*/false);
  if (!store.ok()) return Report("keys", store.status());
  if (create) {
    auto key = (*store)->AddKey(args.name, args.plan);
    if (!key.ok()) return Report("keys", key.status());
    std::printf("%s\n", key->c_str());
    std::fprintf(stderr, "key '%s' created (plan %s); it is shown only this once\n",
                 args.name.c_str(), args.plan.empty() ? "default" : args.plan.c_str());
    return 0;
  }
  if (args.action == "list") {
    auto keys = (*store)->ListKeys();
    if (!keys.ok()) return Report("keys", keys.status());
    std::printf("%-6s %-24s %-12s %-14s %-20s %s\n", "id", "name", "plan", "sha256", "created",
                "status");
    for (const server::ApiKeyInfo& k : *keys) {
      std::printf("%-6lld %-24s %-12s %-14s %-20s %s\n", static_cast<long long>(k.id),
                  k.name.c_str(), k.plan.empty() ? "(default)" : k.plan.c_str(),
                  k.sha256_prefix.c_str(), Utc(k.created_at).c_str(),
                  k.revoked ? "revoked" : "active");
    }
    return 0;
  }
  if (args.action == "revoke") {
    if (Status s = (*store)->RevokeKey(args.name); !s.ok()) return Report("keys", s);
    std::fprintf(stderr, "revoked\n");
    return 0;
  }
  if (args.action == "plan") {
    if (Status s = (*store)->SetPlan(args.name, args.plan); !s.ok()) return Report("keys", s);
    std::fprintf(stderr, "plan set to %s\n", args.plan.empty() ? "default" : args.plan.c_str());
    return 0;
  }
  return Report("keys", InvalidArgumentError("unknown keys action '" + args.action + "'"));
}

int RunUsage(const UsageArgs& args) {
  const double now = server::WallClock().Now();
  auto since = ParseSince(args.since, now);
  if (!since.ok()) return Report("usage", since.status());
  auto store = server::KeyStore::OpenDb(args.keys_db, /*create=*/false, /*read_only=*/false);
  if (!store.ok()) return Report("usage", store.status());
  auto keys = (*store)->ListKeys();
  if (!keys.ok()) return Report("usage", keys.status());
  std::map<int64_t, const server::ApiKeyInfo*> by_id;
  int64_t only = -1;
  for (const server::ApiKeyInfo& k : *keys) {
    by_id[k.id] = &k;
    if (!args.key.empty() && (k.name == args.key || std::to_string(k.id) == args.key)) only = k.id;
  }
  if (!args.key.empty() && only < 0) {
    return Report("usage", NotFoundError("no key with id or name '" + args.key + "'"));
  }
  auto ledger = server::UsageLedger::Open(args.keys_db);
  if (!ledger.ok()) return Report("usage", ledger.status());
  auto totals = (*ledger)->TotalsByKey(*since, only);
  if (!totals.ok()) return Report("usage", totals.status());

  json out = {{"since", static_cast<int64_t>(*since)}, {"keys", json::array()}};
  if (!args.json) {
    const std::string from =
        *since > 0 ? Utc(static_cast<int64_t>(*since)) + " UTC" : std::string("the start");
    std::printf("usage since %s\n", from.c_str());
    std::printf("%-6s %-20s %-10s %-10s %9s %12s %12s %12s %14s\n", "id", "name", "plan", "tier",
                "requests", "input", "cached", "output", "cost_usd");
  }
  for (const server::KeyTierTotals& k : *totals) {
    auto it = by_id.find(k.key_id);
    const std::string name = it != by_id.end() ? it->second->name : "(api-key)";
    const std::string plan = it != by_id.end() ? it->second->plan : "";
    json tiers = json::object();
    server::UsageTotals sum;
    for (int i = 0; i < scheduler::kNumServiceTiers; ++i) {
      const std::string tier(scheduler::ServiceTierName(static_cast<scheduler::ServiceTier>(i)));
      const server::UsageTotals& t = k.tiers[i];
      sum.Add(t);
      tiers[tier] = server::TotalsJson(t);
      if (args.json || t.requests == 0) continue;
      std::printf(
          "%-6lld %-20s %-10s %-10s %9lld %12lld %12lld %12lld %14s\n",
          static_cast<long long>(k.key_id), name.c_str(), plan.empty() ? "(default)" : plan.c_str(),
          tier.c_str(), static_cast<long long>(t.requests), static_cast<long long>(t.prompt_tokens),
          static_cast<long long>(t.cached_tokens), static_cast<long long>(t.completion_tokens),
          server::FormatUsd(t.cost_picousd).c_str());
    }
    tiers["total"] = server::TotalsJson(sum);
    out["keys"].push_back({{"id", k.key_id}, {"name", name}, {"plan", plan}, {"tiers", tiers}});
  }
  if (args.json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

void AddAdminCommands(CLI::App& app) {
  auto keys_args = std::make_shared<KeysArgs>();
  CLI::App* keys = app.add_subcommand("keys", "manage API keys of a --keys-db database");
  keys->add_option("--db", keys_args->db, "SQLite keys database")->required();
  keys->add_option("action", keys_args->action,
                   "create NAME [--plan P] | list | revoke ID_OR_NAME | plan ID_OR_NAME --plan P")
      ->required()
      ->check(CLI::IsMember({"create", "add", "list", "revoke", "plan"}));
  keys->add_option("name", keys_args->name, "key name (create) or id/name (revoke, plan)");
  keys->add_option("--plan", keys_args->plan, "metering plan (default: the config's default)");
  keys->add_option("--metering-config", keys_args->metering_config,
                   "metering config JSON whose plans --plan must name (default: built-in plans)");
  keys->callback([keys_args] {
    if (keys_args->action != "list" && keys_args->name.empty()) {
      std::fprintf(stderr, "ultrafast keys %s: needs a name or id\n", keys_args->action.c_str());
      throw CLI::RuntimeError(2);
    }
    if (const int code = RunKeys(*keys_args); code != 0) throw CLI::RuntimeError(code);
  });

  auto usage_args = std::make_shared<UsageArgs>();
  CLI::App* usage = app.add_subcommand("usage", "per-key, per-tier usage from the ledger");
  usage->add_option("--keys-db", usage_args->keys_db, "SQLite keys database")->required();
  usage->add_option("--key", usage_args->key, "only this key (id or name)");
  usage->add_option("--since", usage_args->since,
                    "unix seconds, YYYY-MM-DD[THH:MM[:SS]] (UTC), or 30m / 2h / 7d ago");
  usage->add_flag("--json", usage_args->json, "JSON instead of a table");
  usage->callback([usage_args] {
    if (const int code = RunUsage(*usage_args); code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace uf::cli
