// Downloads a model file over HTTP(S) into a folder: into NAME.partial first, resumed with a Range
// request after a network failure (within one call, and by a later call that finds the partial
// file), checked against a sha256 when the source gives one, validated as GGUF, and only then
// renamed to NAME. Nothing that failed a check is left under NAME.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "pull/model_cache.h"

namespace uf::pull {

struct DownloadProgress {
  int64_t bytes = 0;         // in the partial file so far (resumed bytes included)
  int64_t total = -1;        // the whole file, when the server said; -1 when unknown
  int64_t resumed_from = 0;  // bytes already there when this transfer started
  double elapsed_s = 0.0;    // since this transfer started
  bool done = false;         // the last call of a transfer
};

struct DownloadOptions {
  // Network failures (connection refused or cut, timeouts) retried, each resuming where the
  // previous try stopped. HTTP errors (404, 403, ...) are not retried.
  int retries = 3;
  double retry_delay_s = 1.0;
  int connect_timeout_s = 15;
  int read_timeout_s = 60;
  // A 64-hex sha256 the file must have; empty: the server's X-Linked-Etag / ETag when it is one
  // (Hugging Face gives the LFS object's sha256 there), else no check.
  std::string expected_sha256;
  // Called at most every 100 ms while bytes arrive, and once with done = true when a transfer
  // completed.
  std::function<void(const DownloadProgress&)> on_progress;
  // Called before retry number `retry` (from 1) with the network failure that caused it.
  std::function<void(const Status& why, int retry)> on_retry;
};

struct DownloadResult {
  std::string path;  // the final file
  int64_t bytes = 0;
  std::string sha256;  // of the final file (hex)
  bool sha256_checked = false;
  bool already_present = false;  // NAME was there: nothing downloaded
  int64_t resumed_from = 0;      // bytes of an earlier partial file reused by the first try
  int attempts = 0;              // HTTP transfers made (1 + retries used)
};

// Fetches src.url into dir/src.file_name (dir is created). Errors: NotFound for a 404,
// Unavailable for a network failure after the retries (the partial file is kept for the next
// call), DataLoss for a sha256 mismatch and InvalidArgument for a file that is not GGUF (both
// delete the partial file), FailedPrecondition for other HTTP statuses (401, 403, 5xx), Internal
// for local I/O errors.
StatusOr<DownloadResult> Download(const ModelSource& src, const std::string& dir,
                                  const DownloadOptions& options = {});

// Hex sha256 of a file's bytes.
StatusOr<std::string> Sha256File(const std::string& path);

}  // namespace uf::pull
