// Constrained requests (a JSON schema, JSON mode) served on a Vulkan device: their grammar masks go
// to the device with the step (model::Batch::allowed), allow_rows.comp masks the rows there and
// only the masked rows' best 64 tokens come back, not 128k-float rows. The tokens must be the same
// engine's with every row copied back whole and masked on the host, request for request. Runs on
// lavapipe in CI; skips, saying why, without a device.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/service.h"
#include "gpu_service_util.h"
#include "grammar/json_schema.h"
#include "service_test_util.h"
#include "test_models.h"

namespace uf {
namespace {

using testing_gpu::SkipReason;

// Six constrained requests on the demo model: greedy, seeded top-k 40 with top-p, and without
// top-k at temperature 1 (drawn from the reduced row where that decides, else the row is fetched
// whole: SampleReduced), each with a schema and with JSON mode; one more with logprobs and one
// with a presence penalty (both come back whole: logprobs are the unmasked row's, and an edited
// token must not be merged back past the mask). With the device reduction on, the three kinds of
// sampling come back reduced, and every request's text equals the run with it off.
TEST(GpuGrammar, MaskedRowsFromTheDeviceEqualHostMaskedRows) {
  const std::string skip = SkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  const testing_models::Loaded& demo = testing_models::DemoModel();
  auto person = grammar::JsonSchemaGrammar(testing_gpu::PersonSchema());
  ASSERT_TRUE(person.ok()) << person.status().ToString();
  const auto object = grammar::JsonObjectGrammar();
  constexpr int kRequests = 8;
  const auto run = [&](int32_t top_k, int64_t* reduced, int64_t* fetched) {
    engine::ServiceOptions o;
    o.max_seqs = 4;
    o.ctx = 256;
    o.n_threads = 2;
    gpu::GpuForward* fwd = nullptr;
    o.make_forward = testing_gpu::DeviceForward(*demo.model, top_k, &fwd);
    auto s = engine::Service::Create(*demo.model, *demo.tokenizer, o);
    UF_CHECK(s.ok()) << s.status().ToString();
    std::vector<std::shared_ptr<engine::RequestChannel>> chans;
    for (int i = 0; i < kRequests; ++i) {
      engine::GenerationRequest r;
      r.prompt = demo.tokenizer->Encode(i % 2 == 0 ? "ROMEO:" : "First Citizen:", true, false);
      r.max_tokens = 48;
      r.grammar = i % 2 == 0 ? *person : object;
      const int kind = (i / 2) % 3;  // greedy, top-k, no top-k
      r.sampling.temperature = kind == 0 ? 0.0f : kind == 1 ? 0.9f : 1.0f;
      r.sampling.top_k = kind == 1 ? 40 : 0;
      r.sampling.top_p = kind == 1 ? 0.95f : 1.0f;
      r.sampling.min_p = 0.0f;
      r.sampling.seed = 300 + i;
      if (i == 6) r.top_logprobs = 2;                  // whole rows
      if (i == 7) r.sampling.presence_penalty = 0.5f;  // whole rows
      auto ch = (*s)->Submit(std::move(r));
      UF_CHECK(ch.ok()) << ch.status().ToString();
      chans.push_back(*ch);
    }
    std::vector<std::string> out;
    for (auto& ch : chans) out.push_back(engine::testing_service::Collect(*ch).text);
    engine::testing_service::SettledStats(**s);
    *reduced = fwd->rows_reduced();
    *fetched = fwd->rows_fetched();
    return out;
  };
  int64_t reduced = 0, fetched = 0, none = 0, none_fetched = 0;
  const auto top = run(64, &reduced, &fetched);
  const auto full = run(0, &none, &none_fetched);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(top[i], full[i]) << "request " << i;
    EXPECT_FALSE(top[i].empty()) << "request " << i;
  }
  // The schema's replies are whole objects of it (max_tokens leaves room to finish).
  for (int i : {0, 2, 4}) {
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(top[i])) << top[i];
    EXPECT_TRUE(v.contains("name") && v.contains("age") && v.contains("city")) << top[i];
  }
  EXPECT_EQ(none, 0);
  // Six requests sampled from reduced rows: far more rows than the two requests' whole ones.
  EXPECT_GE(reduced, 6 * 8) << "constrained rows came back whole";
  std::printf("[gpu grammar] %lld constrained rows sampled from device candidates, %lld fetched\n",
              static_cast<long long>(reduced), static_cast<long long>(fetched));
}

}  // namespace
}  // namespace uf
