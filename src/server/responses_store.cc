#include "server/responses_store.h"

namespace uf::server {

ResponseStore::ResponseStore(ResponseStoreOptions options, const Clock* clock)
    : options_(options), clock_(clock != nullptr ? clock : &system_clock_) {}

void ResponseStore::EraseLocked(std::list<Entry>::iterator it) {
  bytes_ -= it->bytes;
  by_id_.erase(it->id);
  entries_.erase(it);
}

void ResponseStore::ExpireLocked(double now) {
  while (!entries_.empty() && now - entries_.front().created > options_.ttl_s) {
    EraseLocked(entries_.begin());
  }
}

void ResponseStore::Put(const std::string& id, StoredResponse response) {
  // The size of its JSON text: what the entry holds, give or take the containers' overhead.
  const size_t bytes =
      id.size() + response.messages.dump().size() + response.response.dump().size();
  std::lock_guard<std::mutex> lock(mu_);
  const double now = clock_->Now();
  ExpireLocked(now);
  if (auto it = by_id_.find(id); it != by_id_.end()) EraseLocked(it->second);
  if (bytes > options_.max_bytes || options_.max_responses == 0) return;
  while (!entries_.empty() &&
         (entries_.size() >= options_.max_responses || bytes_ + bytes > options_.max_bytes)) {
    EraseLocked(entries_.begin());
  }
  entries_.push_back(Entry{id, std::move(response), bytes, now});
  by_id_[id] = std::prev(entries_.end());
  bytes_ += bytes;
}

std::optional<StoredResponse> ResponseStore::Get(const std::string& id, int64_t key_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(clock_->Now());
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second->response.key_id != key_id) return std::nullopt;
  return it->second->response;
}

bool ResponseStore::Remove(const std::string& id, int64_t key_id) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(clock_->Now());
  auto it = by_id_.find(id);
  if (it == by_id_.end() || it->second->response.key_id != key_id) return false;
  EraseLocked(it->second);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace uf::server
