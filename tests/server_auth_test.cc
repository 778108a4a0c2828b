// API keys: SHA-256 against FIPS 180-2 test vectors, Bearer parsing, and the SQLite key store
// (keys stored only as digests; revocation takes effect for a server holding the db open), key
// plans and the migration of databases made before plans.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "server/auth.h"

namespace uf::server {
namespace {

TEST(AuthTest, Sha256KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(AuthTest, NoKeysAllowsEverything) {
  KeyStore none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Authorize(""));
}

TEST(AuthTest, SingleKey) {
  auto k = KeyStore::WithKey("sk-secret");
  EXPECT_TRUE(k->enabled());
  EXPECT_TRUE(k->Authorize("Bearer sk-secret"));
  EXPECT_TRUE(k->Authorize("bearer sk-secret"));
  EXPECT_FALSE(k->Authorize("Bearer sk-secre"));
  EXPECT_FALSE(k->Authorize("Bearer sk-secret2"));
  EXPECT_FALSE(k->Authorize("sk-secret"));
  EXPECT_FALSE(k->Authorize("Basic sk-secret"));
  EXPECT_FALSE(k->Authorize("Bearer "));
  EXPECT_FALSE(k->Authorize(""));
}

TEST(AuthTest, GeneratedKeysAreFreshAndLong) {
  auto a = GenerateApiKey(), b = GenerateApiKey();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->size(), 6u + 48u);
  EXPECT_EQ(a->rfind("sk-uf-", 0), 0u);
}

class KeyDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("uf_keys_test_" + std::to_string(getpid()) + ".db"))
                .string();
    std::remove(path_.c_str());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(KeyDbTest, AddListRevoke) {
  EXPECT_FALSE(KeyStore::OpenDb(path_, /*create=*/false, /*read_only=*/true).ok());
  auto admin = KeyStore::OpenDb(path_, /*create=*/true, /*read_only=*/false);
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  auto key1 = (*admin)->AddKey("alice");
  auto key2 = (*admin)->AddKey("bob");
  ASSERT_TRUE(key1.ok() && key2.ok());

  auto server = KeyStore::OpenDb(path_, false, true);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_TRUE((*server)->enabled());
  EXPECT_TRUE((*server)->Authorize("Bearer " + *key1));
  EXPECT_TRUE((*server)->Authorize("Bearer " + *key2));
  EXPECT_FALSE((*server)->Authorize("Bearer sk-uf-nope"));

  auto keys = (*admin)->ListKeys();
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].name, "alice");
  EXPECT_EQ((*keys)[0].sha256_prefix, Sha256Hex(*key1).substr(0, 12));
  EXPECT_FALSE((*keys)[0].revoked);

  ASSERT_TRUE((*admin)->RevokeKey("alice").ok());
  EXPECT_FALSE((*server)->Authorize("Bearer " + *key1));  // seen without reopening
  EXPECT_TRUE((*server)->Authorize("Bearer " + *key2));
  EXPECT_EQ((*admin)->RevokeKey("alice").code(), StatusCode::kNotFound);
  ASSERT_TRUE((*admin)->RevokeKey(std::to_string((*keys)[1].id)).ok());
  EXPECT_FALSE((*server)->Authorize("Bearer " + *key2));
}

TEST_F(KeyDbTest, StoresOnlyDigests) {
  auto admin = KeyStore::OpenDb(path_, true, false);
  ASSERT_TRUE(admin.ok());
  auto key = (*admin)->AddKey("carol");
  ASSERT_TRUE(key.ok());
  admin->reset();
  // Read the raw file: the key must not appear, its digest must.
  std::FILE* f = std::fopen(path_.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  std::string bytes;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  std::fclose(f);
  EXPECT_EQ(bytes.find(*key), std::string::npos);
  EXPECT_NE(bytes.find(Sha256Hex(*key)), std::string::npos);
}

TEST_F(KeyDbTest, RejectsAForeignDatabase) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE other (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = KeyStore::OpenDb(path_, false, true);
  EXPECT_FALSE(s.ok());
}

TEST_F(KeyDbTest, PlansAndIdentity) {
  auto admin = KeyStore::OpenDb(path_, /*create=*/true, /*read_only=*/false);
  ASSERT_TRUE(admin.ok()) << admin.status().ToString();
  auto plain = (*admin)->AddKey("plain");
  auto big = (*admin)->AddKey("big", "scale");
  ASSERT_TRUE(plain.ok() && big.ok());
  auto who = (*admin)->Authenticate("Bearer " + *big);
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->name, "big");
  EXPECT_EQ(who->plan, "scale");
  EXPECT_GT(who->id, 0);
  who = (*admin)->Authenticate("Bearer " + *plain);
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->plan, "");  // the default plan
  EXPECT_FALSE((*admin)->Authenticate("Bearer sk-uf-nope").has_value());

  ASSERT_TRUE((*admin)->SetPlan("plain", "unlimited").ok());
  EXPECT_EQ((*admin)->Authenticate("Bearer " + *plain)->plan, "unlimited");
  EXPECT_EQ((*admin)->SetPlan("nobody", "base").code(), StatusCode::kNotFound);
  auto keys = (*admin)->ListKeys();
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[0].plan, "unlimited");
  EXPECT_EQ((*keys)[1].plan, "scale");

  // Without keys everyone is the anonymous id 0; --api-key is id 0 too.
  EXPECT_EQ(KeyStore().Authenticate("")->id, 0);
  auto single = KeyStore::WithKey("sk-one");
  EXPECT_EQ(single->Authenticate("Bearer sk-one")->id, 0);
  EXPECT_FALSE(single->Authenticate("Bearer sk-two").has_value());
}

// A database made before plans existed: read-only opens still authenticate (default plan), and
// the first read-write open adds the plan column.
TEST_F(KeyDbTest, MigratesDatabasesWithoutPlans) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  const std::string digest = Sha256Hex("sk-old");
  const std::string sql =
      "CREATE TABLE api_keys (id INTEGER PRIMARY KEY, name TEXT NOT NULL, key_sha256 TEXT NOT "
      "NULL UNIQUE, created_at INTEGER NOT NULL, revoked_at INTEGER);"
      "INSERT INTO api_keys (name, key_sha256, created_at) VALUES ('old', '" +
      digest + "', 1)";
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  auto reader = KeyStore::OpenDb(path_, false, /*read_only=*/true);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto who = (*reader)->Authenticate("Bearer sk-old");
  ASSERT_TRUE(who.has_value());
  EXPECT_EQ(who->name, "old");
  EXPECT_EQ(who->plan, "");
  ASSERT_TRUE((*reader)->ListKeys().ok());

  auto writer = KeyStore::OpenDb(path_, false, /*read_only=*/false);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ASSERT_TRUE((*writer)->SetPlan("old", "scale").ok());
  EXPECT_EQ((*writer)->Authenticate("Bearer sk-old")->plan, "scale");
}

}  // namespace
}  // namespace uf::server
