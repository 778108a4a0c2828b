// The Responses API's stored responses (`store`, the default, and `previous_response_id`): kept in
// memory only, so a restart forgets them. Bounded three ways: at most max_responses, at most
// max_bytes of JSON in all, and each for ttl_s after it was created; the oldest go first when a
// bound is reached. A response belongs to the key that created it: another key gets "not found".
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/clock.h"

namespace uf::server {

struct ResponseStoreOptions {
  size_t max_responses = 1000;
  size_t max_bytes = 64u << 20;
  double ttl_s = 3600.0;
};

struct StoredResponse {
  int64_t key_id = 0;  // KeyIdentity::id of the creator (0 without keys or with --api-key)
  // The conversation through this response as chat messages: the inputs of every response in its
  // previous_response_id chain and of its own (without `instructions`, which OpenAI does not carry
  // over), then its output (the assistant's text and tool calls).
  nlohmann::json messages;
  nlohmann::json response;  // the response object, as returned
};

class ResponseStore {
 public:
  // clock: nullptr = the system clock; must outlive the store.
  explicit ResponseStore(ResponseStoreOptions options, const Clock* clock = nullptr);

  // Replaces a response of the same id. One larger than max_bytes is not kept.
  void Put(const std::string& id, StoredResponse response);
  // nullopt when absent, expired, or created by another key.
  std::optional<StoredResponse> Get(const std::string& id, int64_t key_id);
  // False when Get would give nullopt.
  bool Remove(const std::string& id, int64_t key_id);
  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    StoredResponse response;
    size_t bytes = 0;
    double created = 0.0;
  };
  void EraseLocked(std::list<Entry>::iterator it);
  void ExpireLocked(double now);

  ResponseStoreOptions options_;
  SystemClock system_clock_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // oldest first
  std::unordered_map<std::string, std::list<Entry>::iterator> by_id_;
  size_t bytes_ = 0;
};

}  // namespace uf::server
