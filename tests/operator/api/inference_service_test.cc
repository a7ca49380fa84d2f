// ParseInferenceService: every sample parses; the CRD's defaults and fields match the types
// (checked by walking the CRD's own schema); semantic checks name the field; status round-trips;
// MakeAutoscalerConfig keeps the autoscaler's defaults.
#include "operator/api/inference_service.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "operator/api/autoscaler_config.h"
#include "operator/api/units.h"
#include "tests/operator/api/yaml_to_json.h"

namespace kinfer::api {
namespace {

using nlohmann::json;
using testing::LoadYamlFile;

const std::string kRoot = KINFER_SOURCE_DIR;

json Sample(const std::string& name) { return LoadYamlFile(kRoot + "/crds/samples/" + name); }

json CrdSpecSchema() {
  json crd = LoadYamlFile(kRoot + "/crds/serving.kinfer.dev_inferenceservices.yaml");
  return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
}

// Runs `edit` on a copy of `object`'s spec and parses it; returns the error message ("" = OK).
std::string ParseError(json object, const std::function<void(json&)>& edit) {
  edit(object["spec"]);
  auto parsed = ParseInferenceService(object);
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(InferenceServiceTest, EverySampleParses) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kRoot + "/crds/samples")) {
    if (entry.path().extension() != ".yaml") continue;
    auto parsed = ParseInferenceService(LoadYamlFile(entry.path()));
    EXPECT_TRUE(parsed.ok()) << entry.path() << ": " << parsed.status().ToString();
    ++n;
  }
  EXPECT_GE(n, 3);
}

TEST(InferenceServiceTest, MinimalSampleGetsTheDefaults) {
  auto isvc = ParseInferenceService(Sample("minimal.yaml"));
  ASSERT_TRUE(isvc.ok()) << isvc.status().ToString();
  const InferenceServiceSpec& s = isvc->spec;
  EXPECT_EQ(isvc->metadata.name, "smollm2");
  EXPECT_EQ(s.model.source, ModelSource::kPvc);
  EXPECT_EQ(s.model.pvc_claim, "models");
  EXPECT_EQ(s.model.path, "smollm2-135m-instruct-q4_1.gguf");
  EXPECT_EQ(s.model.format, "gguf");
  EXPECT_EQ(s.runtime.max_batch_tokens, 2048);
  EXPECT_EQ(s.resources.gpus, 1);
  EXPECT_EQ(s.resources.gpu_resource_name, "nvidia.com/gpu");
  EXPECT_TRUE(s.autoscaling.enabled);
  EXPECT_EQ(s.autoscaling.min_replicas, 1);
  EXPECT_EQ(s.autoscaling.max_replicas, 10);
  EXPECT_EQ(s.autoscaling.metrics_source_type, "pods");
  EXPECT_FALSE(s.replicas.has_value());
  ASSERT_EQ(s.sidecar.classes.size(), 3u);
  EXPECT_EQ(s.sidecar.classes[2].name, "batch");
  EXPECT_EQ(s.sidecar.classes[2].timeout.value, std::chrono::seconds(120));
  EXPECT_EQ(s.sidecar.classes[2].degrade.max_tokens_cap, 256);
  EXPECT_EQ(s.sidecar.default_class, "standard");
}

TEST(InferenceServiceTest, FullSampleReadsEveryGivenField) {
  auto isvc = ParseInferenceService(Sample("full.yaml"));
  ASSERT_TRUE(isvc.ok()) << isvc.status().ToString();
  const InferenceServiceSpec& s = isvc->spec;
  EXPECT_EQ(isvc->metadata.namespace_name, "llm");
  EXPECT_EQ(s.model.source, ModelSource::kHttp);
  ASSERT_TRUE(s.fallback_model);
  EXPECT_EQ(s.fallback_model->name, "smollm2-135m-instruct");
  ASSERT_TRUE(s.runtime.speculative);
  EXPECT_TRUE(s.runtime.speculative->enabled);
  EXPECT_EQ(s.runtime.extra_args, (std::vector<std::string>{"--log-level", "info"}));
  EXPECT_DOUBLE_EQ(s.runtime.kv_cache_fraction, 0.85);
  EXPECT_EQ(s.sidecar.max_body_bytes.bytes, 2u << 20);
  EXPECT_EQ(s.sidecar.timeouts.drain.value, std::chrono::seconds(60));
  ASSERT_EQ(s.sidecar.classes.size(), 3u);
  EXPECT_EQ(s.sidecar.classes[0].degrade.triggers,
            (std::vector<std::string>{"breaker_open", "deadline"}));
  EXPECT_EQ(s.sidecar.classes[2].timeout.value, std::chrono::seconds(300));
  EXPECT_EQ(s.sidecar.classes[1].timeout.text, "60s");
  EXPECT_EQ(s.sidecar.api_keys_secret_name, "gemma3-chat-api-keys");
  EXPECT_DOUBLE_EQ(s.sidecar.rate_limits.overrides.at("team-a").requests_per_second, 100);
  EXPECT_EQ(s.sidecar.cache.max_bytes.bytes, 128u << 20);
  EXPECT_EQ(s.resources.cpu, "4");
  EXPECT_EQ(s.resources.memory, "16Gi");
  EXPECT_EQ(s.node_selector.at("nvidia.com/gpu.product"), "NVIDIA-L4");
  EXPECT_EQ(s.tolerations.size(), 1u);
  EXPECT_TRUE(s.affinity.contains("podAntiAffinity"));
  EXPECT_EQ(s.priority_class_name, "inference-high");
  EXPECT_EQ(s.slo_ttft_p99_seconds, 0.5);
  EXPECT_EQ(s.autoscaling.metrics_source_type, "prometheus");
  ASSERT_TRUE(s.autoscaling.prometheus);
  EXPECT_EQ(s.autoscaling.prometheus->url, "http://prometheus-operated.monitoring.svc:9090");
}

TEST(InferenceServiceTest, ManualReplicasSample) {
  auto isvc = ParseInferenceService(Sample("manual-replicas.yaml"));
  ASSERT_TRUE(isvc.ok()) << isvc.status().ToString();
  EXPECT_FALSE(isvc->spec.autoscaling.enabled);
  EXPECT_EQ(isvc->spec.replicas, 2);
  EXPECT_EQ(isvc->spec.resources.gpus, 0);
}

// Walks the CRD schema: every property with a scalar or list default, found at the same path in
// ToJson(spec) of an object that leaves it out, has the CRD's default value.
void CollectDefaults(const json& schema, const std::string& path,
                     std::vector<std::pair<std::string, json>>* out) {
  if (schema.contains("default") && !schema["default"].is_object())
    out->emplace_back(path, schema["default"]);
  if (schema.contains("properties")) {
    for (const auto& [key, sub] : schema["properties"].items())
      CollectDefaults(sub, path + "/" + key, out);
  }
  if (schema.contains("items") && schema["items"].contains("properties"))
    CollectDefaults(schema["items"], path + "/0", out);
  if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
    CollectDefaults(schema["additionalProperties"], path + "/team-a", out);
  }
}

// A spec where every object with defaulted children exists but sets nothing.
json Skeleton() {
  json object = Sample("minimal.yaml");
  json& spec = object["spec"];
  spec["fallbackModel"] = {{"name", "small"}, {"uri", "pvc://models/small.gguf"}};
  spec["runtime"]["speculative"] = {
      {"draftModel", {{"name", "draft"}, {"uri", "file:///models/draft.gguf"}}}};
  spec["sidecar"] = {{"classes", {{{"name", "standard"}}}},
                     {"rateLimits", {{"overrides", {{"team-a", json::object()}}}}}};
  spec["autoscaling"] = {
      {"metricsSource",
       {{"prometheus", {{"url", "http://prom:9090"}, {"queries", json::object()}}}}}};
  return object;
}

TEST(InferenceServiceTest, DefaultsAreTheCrdDefaults) {
  std::vector<std::pair<std::string, json>> defaults;
  CollectDefaults(CrdSpecSchema(), "", &defaults);
  ASSERT_GT(defaults.size(), 60u);
  auto isvc = ParseInferenceService(Skeleton());
  ASSERT_TRUE(isvc.ok()) << isvc.status().ToString();
  const json effective = ToJson(isvc->spec);
  for (const auto& [path, value] : defaults) {
    const json::json_pointer pointer(path);
    ASSERT_TRUE(effective.contains(pointer)) << path << " is missing from ToJson(spec)";
    EXPECT_EQ(effective[pointer], value) << path;
  }
  // The field without a schema default: maxConcurrency left out is the runtime's batch.
  EXPECT_EQ(effective["sidecar"]["admission"]["maxConcurrency"],
            effective["runtime"]["maxRunningRequests"]);
  EXPECT_EQ(effective["runtime"]["maxRunningRequests"], 64);
}

// Walks the CRD schema: a value of the wrong type at any field the schema defines is an error
// naming that field, so the parser reads every field of the CRD.
struct Leaf {
  std::string pointer, path;
  bool is_list;
};

void CollectLeaves(const json& schema, const std::string& pointer, const std::string& path,
                   std::vector<Leaf>* out) {
  if (schema.value("x-kubernetes-preserve-unknown-fields", false)) return;
  if (schema.contains("properties")) {
    for (const auto& [key, sub] : schema["properties"].items()) {
      CollectLeaves(sub, pointer + "/" + key, path + "." + key, out);
    }
    return;
  }
  out->push_back({pointer, path, schema.value("type", "") == "array"});  // scalar, list or map
  if (schema.contains("items") && schema["items"].contains("properties")) {
    CollectLeaves(schema["items"], pointer + "/0", path + "[0]", out);
  }
  if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object()) {
    CollectLeaves(schema["additionalProperties"], pointer + "/team-a", path + ".team-a", out);
  }
}

TEST(InferenceServiceTest, EveryCrdFieldIsReadAndNamedInErrors) {
  std::vector<Leaf> leaves;
  CollectLeaves(CrdSpecSchema(), "", "spec", &leaves);
  ASSERT_GE(leaves.size(), 100u);
  json base = Sample("full.yaml");
  base["spec"]["runtime"]["speculative"]["draftModel"] = {{"name", "draft"},
                                                          {"uri", "pvc://models/d.gguf"}};
  base["spec"]["autoscaling"]["metricsSource"]["prometheus"]["queries"] = json::object();
  ASSERT_TRUE(ParseInferenceService(base).ok());
  int checked = 0;
  for (const auto& [pointer, path, is_list] : leaves) {
    json object = base;
    // A value of the wrong type for every kind of field: an object for a list, a list otherwise.
    object["spec"][json::json_pointer(pointer)] =
        is_list ? json{{"wrong", "type"}} : json::array({1});
    auto parsed = ParseInferenceService(object);
    ASSERT_FALSE(parsed.ok()) << path << " accepted a value of the wrong type";
    EXPECT_EQ(parsed.status().message().rfind(path + ":", 0), 0u)
        << "setting " << path << ": " << parsed.status().message();
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(leaves.size()));
}

TEST(InferenceServiceTest, ToJsonRoundTrips) {
  for (const char* name : {"minimal.yaml", "full.yaml", "manual-replicas.yaml"}) {
    json object = Sample(name);
    auto first = ParseInferenceService(object);
    ASSERT_TRUE(first.ok());
    object["spec"] = ToJson(first->spec);
    auto second = ParseInferenceService(object);
    ASSERT_TRUE(second.ok()) << name << ": " << second.status().ToString();
    EXPECT_EQ(ToJson(second->spec), ToJson(first->spec)) << name;
  }
}

struct BadSpec {
  const char* what;
  std::function<void(json&)> edit;
  const char* error_prefix;
};

TEST(InferenceServiceTest, SpecsTheOperatorCannotServeNameTheField) {
  const json minimal = Sample("minimal.yaml");
  const json full = Sample("full.yaml");
  const std::vector<BadSpec> cases = {
      {"unsupported scheme", [](json& s) { s["model"]["uri"] = "s3://bucket/model.gguf"; },
       "spec.model.uri: scheme 's3' is not supported"},
      {"pvc path escaping the claim",
       [](json& s) { s["model"]["uri"] = "pvc://models/../etc/passwd"; }, "spec.model.uri:"},
      {"pvc without a path", [](json& s) { s["model"]["uri"] = "pvc://models"; },
       "spec.model.uri:"},
      {"host file in /", [](json& s) { s["model"]["uri"] = "file:///model.gguf"; },
       "spec.model.uri:"},
      {"http without sha256", [](json& s) { s["model"]["uri"] = "https://x.example/m.gguf"; },
       "spec.model.uri: a model downloaded over http(s) must be pinned"},
      {"bad sha256", [](json& s) { s["model"]["sha256"] = "ABC"; }, "spec.model.sha256:"},
      {"missing model", [](json& s) { s.erase("model"); }, "spec.model: is required"},
      {"fallback named like the model",
       [](json& s) {
         s["fallbackModel"] = {{"name", "smollm2-135m-instruct"}, {"uri", "pvc://m/x.gguf"}};
       },
       "spec.fallbackModel.name:"},
      {"cache entry larger than the cache",
       [](json& s) {
         s["sidecar"] = {{"cache", {{"maxBytes", "1MiB"}, {"maxEntryBytes", "2MiB"}}}};
       },
       "spec.sidecar.cache.maxEntryBytes:"},
      {"stats window not a multiple",
       [](json& s) {
         s["sidecar"] = {{"metrics", {{"statsWindow", "10s"}, {"statsBucket", "3s"}}}};
       },
       "spec.sidecar.metrics.statsWindow:"},
      {"buckets not increasing",
       [](json& s) {
         s["sidecar"] = {{"metrics", {{"ttftBuckets", {0.5, 0.1}}}}};
       },
       "spec.sidecar.metrics.ttftBuckets:"},
      {"zero class timeout",
       [](json& s) {
         s["sidecar"] = {{"classes", {{{"name", "standard"}, {"timeout", "0s"}}}}};
       },
       "spec.sidecar.classes[0].timeout: must be > 0"},
      {"duplicate class",
       [](json& s) {
         s["sidecar"] = {{"classes", {{{"name", "standard"}}, {{"name", "standard"}}}}};
       },
       "spec.sidecar.classes[1].name:"},
      {"default class not a class",
       [](json& s) {
         s["sidecar"] = {{"defaultClass", "gold"}};
       },
       "spec.sidecar.defaultClass:"},
      {"required API keys without their Secret",
       [](json& s) {
         s["sidecar"] = {{"requireApiKey", true}};
       },
       "spec.sidecar.requireApiKey: needs spec.sidecar.apiKeysSecretName"},
      {"reserved slots",
       [](json& s) {
         s["sidecar"] = {{"admission", {{"maxConcurrency", 2}, {"reservedForTop", 2}}}};
       },
       "spec.sidecar.admission.reservedForTop:"},
      {"reserved slots against the runtime's batch",
       [](json& s) {
         s["runtime"] = {{"maxRunningRequests", 2}};
         s["sidecar"] = {{"admission", {{"reservedForTop", 2}}}};
       },
       "spec.sidecar.admission.reservedForTop: must be less than spec.runtime.maxRunningRequests "
       "(2), which maxConcurrency follows"},
      {"the default reserved slot against a batch of one",
       [](json& s) {
         s["runtime"] = {{"maxRunningRequests", 1}};
       },
       "spec.sidecar.admission.reservedForTop: must be less than spec.runtime.maxRunningRequests "
       "(1)"},
      {"running requests up to the step's token budget",
       [](json& s) {
         s["runtime"] = {{"maxBatchTokens", 64}, {"maxRunningRequests", 64}};
       },
       "spec.runtime.maxRunningRequests: must be less than maxBatchTokens (64): kinfer-runtime "
       "runs at most maxBatchTokens - 1"},
      {"the default running requests against a small budget",
       [](json& s) {
         s["runtime"] = {{"maxBatchTokens", 64}};
       },
       "spec.runtime.maxRunningRequests: must be less than maxBatchTokens (64)"},
      {"running requests against the default budget",
       [](json& s) {
         s["runtime"] = {{"maxRunningRequests", 2048}};
       },
       "spec.runtime.maxRunningRequests: must be less than maxBatchTokens (2048)"},
      {"per-class queue",
       [](json& s) {
         s["sidecar"] = {{"admission", {{"maxQueue", 4}, {"maxQueuePerClass", 5}}}};
       },
       "spec.sidecar.admission.maxQueuePerClass:"},
      {"bad duration",
       [](json& s) {
         s["sidecar"] = {{"timeouts", {{"drain", "30 seconds"}}}};
       },
       "spec.sidecar.timeouts.drain: bad duration"},
      {"zero idle timeout",
       [](json& s) {
         s["sidecar"] = {{"timeouts", {{"clientIdle", "0s"}}}};
       },
       "spec.sidecar.timeouts.clientIdle:"},
      {"connections past the sidecar's limit",
       [](json& s) {
         s["sidecar"] = {{"maxConnections", 2000000}};
       },
       "spec.sidecar.maxConnections: must be in [0, 1048576]"},
      {"extraArgs moving the runtime",
       [](json& s) {
         s["runtime"] = {{"extraArgs", {"--threads", "4", "--port=9000"}}};
       },
       "spec.runtime.extraArgs[2]: --port is set by the operator"},
      {"extraArgs undoing the sidecar's body limit",
       [](json& s) {
         s["runtime"] = {{"extraArgs", {"--max-body-bytes=1024"}}};
       },
       "spec.runtime.extraArgs[0]: --max-body-bytes is set by the operator from "
       "spec.sidecar.maxBodyBytes"},
      {"extraArgs undoing the admission limit",
       [](json& s) {
         s["runtime"] = {{"extraArgs", {"--max-running", "64"}}};
       },
       "spec.runtime.extraArgs[0]: --max-running is set by the operator from "
       "spec.runtime.maxRunningRequests"},
      {"extraArgs choosing the device",
       [](json& s) {
         s["runtime"] = {{"extraArgs", {"--device=cuda"}}};
       },
       "spec.runtime.extraArgs[0]: --device is set by the operator from spec.resources.gpus"},
      {"replicas with the autoscaler on", [](json& s) { s["replicas"] = 3; }, "spec.replicas:"},
      {"no replicas with it off",
       [](json& s) {
         s["autoscaling"] = {{"enabled", false}};
       },
       "spec.replicas:"},
      {"min above max",
       [](json& s) {
         s["autoscaling"] = {{"minReplicas", 5}, {"maxReplicas", 2}};
       },
       "spec.autoscaling.minReplicas:"},
      {"prometheus without its url",
       [](json& s) {
         s["autoscaling"] = {{"metricsSource", {{"type", "prometheus"}}}};
       },
       "spec.autoscaling.metricsSource.prometheus:"},
      {"draft without a model",
       [](json& s) {
         s["runtime"] = {{"speculative", {{"enabled", true}}}};
       },
       "spec.runtime.speculative:"},
      {"out of range",
       [](json& s) {
         s["resources"] = {{"gpus", 17}};
       },
       "spec.resources.gpus: must be in [0, 16]"},
      {"bad quantity",
       [](json& s) {
         s["resources"] = {{"memory", "lots"}};
       },
       "spec.resources.memory:"},
      {"bad gpu resource",
       [](json& s) {
         s["resources"] = {{"gpuResourceName", "nvidia.com/"}};
       },
       "spec.resources.gpuResourceName:"},
      // A standard resource's name would overwrite the runtime container's own request of it.
      {"gpu resource named cpu",
       [](json& s) {
         s["resources"] = {{"gpus", 1}, {"gpuResourceName", "cpu"}, {"cpu", "4"}};
       },
       "spec.resources.gpuResourceName: 'cpu' is not an extended resource name"},
      {"gpu resource named memory",
       [](json& s) {
         s["resources"] = {{"gpuResourceName", "memory"}};
       },
       "spec.resources.gpuResourceName:"},
      {"gpu resource in kubernetes.io",
       [](json& s) {
         s["resources"] = {{"gpuResourceName", "kubernetes.io/gpu"}};
       },
       "spec.resources.gpuResourceName:"},
  };
  for (const BadSpec& c : cases) {
    const std::string error = ParseError(minimal, c.edit);
    EXPECT_EQ(error.rfind(c.error_prefix, 0), 0u) << c.what << ": got '" << error << "'";
  }
  EXPECT_EQ(ParseError(full, [](json&) {}), "");
}

TEST(InferenceServiceTest, MetadataNameMustFitTheObjectsItNames) {
  json object = Sample("minimal.yaml");
  object["metadata"]["name"] = std::string(53, 'a');
  EXPECT_EQ(ParseInferenceService(object).status().message().rfind("metadata.name:", 0), 0u);
  object["metadata"]["name"] = "Upper";
  EXPECT_FALSE(ParseInferenceService(object).ok());
  object["metadata"]["name"] = std::string(52, 'a');
  EXPECT_TRUE(ParseInferenceService(object).ok());
}

TEST(InferenceServiceTest, DurationsAndByteSizesInEveryForm) {
  json object = Sample("minimal.yaml");
  object["spec"]["sidecar"] = {{"maxBodyBytes", 4096},
                               {"timeouts", {{"drain", 1.5}, {"upstream", "2m"}}}};
  auto isvc = ParseInferenceService(object);
  ASSERT_TRUE(isvc.ok()) << isvc.status().ToString();
  EXPECT_EQ(isvc->spec.sidecar.max_body_bytes.bytes, 4096u);
  EXPECT_EQ(isvc->spec.sidecar.max_body_bytes.text, "4096");
  EXPECT_EQ(isvc->spec.sidecar.timeouts.drain.value, std::chrono::milliseconds(1500));
  EXPECT_EQ(isvc->spec.sidecar.timeouts.upstream.value, std::chrono::minutes(2));
}

// clientWrite is also kinfer-runtime's --write-timeout, which takes 1..86400 s: a longer one would
// make the runtime exit 2 (a crash loop) instead of an InvalidSpec condition.
TEST(InferenceServiceTest, ClientWriteFitsTheRuntimesWriteTimeout) {
  const json minimal = Sample("minimal.yaml");
  auto client_write = [&](const json& value) {
    return ParseError(minimal,
                      [&](json& s) { s["sidecar"] = {{"timeouts", {{"clientWrite", value}}}}; });
  };
  for (const char* ok : {"24h", "1440m", "86400s", "86400", "86400000ms", "30s"}) {
    EXPECT_EQ(client_write(ok), "") << ok;
  }
  EXPECT_EQ(client_write(86400), "");
  for (const char* too_long : {"25h", "86401s", "86400.5", "1441m", "86400001ms"}) {
    EXPECT_EQ(client_write(too_long),
              "spec.sidecar.timeouts.clientWrite: '" + std::string(too_long) +
                  "' must be at most 24h (86400s): it is also kinfer-runtime's --write-timeout, "
                  "which takes at most 86400 seconds");
  }
}

// maxBodyBytes is also kinfer-runtime's --max-body-bytes, which takes 1..2^32.
TEST(InferenceServiceTest, MaxBodyBytesFitsTheRuntimesBodyLimit) {
  const json minimal = Sample("minimal.yaml");
  auto max_body_bytes = [&](const json& value) {
    return ParseError(minimal, [&](json& s) { s["sidecar"] = {{"maxBodyBytes", value}}; });
  };
  for (const json& ok : {json("4GiB"), json(4294967296), json("4096MiB"), json("4294MB")}) {
    EXPECT_EQ(max_body_bytes(ok), "") << ok;
  }
  for (const json& too_big : {json("5GiB"), json(4294967297), json("1TiB"), json("4295MB")}) {
    const std::string text = too_big.is_string() ? too_big.get<std::string>() : too_big.dump();
    EXPECT_EQ(max_body_bytes(too_big),
              "spec.sidecar.maxBodyBytes: '" + text +
                  "' must be at most 4GiB (4294967296): it is also kinfer-runtime's "
                  "--max-body-bytes, which takes at most 4294967296");
  }
}

TEST(InferenceServiceTest, BadStatusIsNotAnError) {
  json object = Sample("minimal.yaml");
  object["status"] = {{"replicas", "many"},
                      {"conditions", {1, {{"type", "Ready"}, {"status", "True"}}}}};
  auto isvc = ParseInferenceService(object);
  ASSERT_TRUE(isvc.ok());
  EXPECT_FALSE(isvc->status.replicas);
  ASSERT_EQ(isvc->status.conditions.size(), 1u);
  EXPECT_EQ(isvc->status.conditions[0].type, "Ready");
}

TEST(InferenceServiceTest, StatusRoundTrips) {
  const json status = {{"observedGeneration", 3},
                       {"conditions",
                        {{{"type", "Ready"},
                          {"status", "True"},
                          {"reason", "MinimumReplicasAvailable"},
                          {"message", "2 of 2"},
                          {"observedGeneration", 3},
                          {"lastTransitionTime", "2025-01-01T00:00:00Z"}}}},
                       {"replicas", 2},
                       {"readyReplicas", 2},
                       {"desiredReplicas", 2},
                       {"selector", "serving.kinfer.dev/inferenceservice=x"},
                       {"url", "http://x.ns.svc.cluster.local:8080"},
                       {"observedQueueDepth", 3.5},
                       {"observedP99TtftSeconds", 0.25},
                       {"lastScaleTime", "2025-01-01T00:00:00Z"},
                       {"lastScaleReason", "scale_up_load"}};
  EXPECT_EQ(ToJson(ParseInferenceServiceStatus(status)), status);
}

TEST(InferenceServiceTest, AutoscalerConfigKeepsTheAutoscalerDefaults) {
  auto minimal = ParseInferenceService(Sample("minimal.yaml"));
  ASSERT_TRUE(minimal.ok());
  const autoscale::AutoscalerConfig c = MakeAutoscalerConfig(minimal->spec), d;
  EXPECT_EQ(c.min_replicas, d.min_replicas);
  EXPECT_EQ(c.max_replicas, d.max_replicas);
  EXPECT_EQ(c.target_load_per_replica, d.target_load_per_replica);
  EXPECT_EQ(c.stable_window, d.stable_window);
  EXPECT_EQ(c.panic_window_percent, d.panic_window_percent);
  EXPECT_EQ(c.panic_threshold, d.panic_threshold);
  EXPECT_EQ(c.scale_down_delay, d.scale_down_delay);
  EXPECT_EQ(c.max_scale_up_rate, d.max_scale_up_rate);
  EXPECT_EQ(c.max_scale_down_rate, d.max_scale_down_rate);
  EXPECT_EQ(c.slo_ttft_p99_seconds, 0.0);
  EXPECT_TRUE(c.Validate().ok());

  auto full = ParseInferenceService(Sample("full.yaml"));
  ASSERT_TRUE(full.ok());
  const autoscale::AutoscalerConfig f = MakeAutoscalerConfig(full->spec);
  EXPECT_EQ(f.min_replicas, 2);
  EXPECT_EQ(f.max_replicas, 20);
  EXPECT_EQ(f.slo_ttft_p99_seconds, 0.5);
  EXPECT_EQ(f.scale_down_delay, std::chrono::seconds(300));
}

TEST(UnitsTest, QuantitiesCompareByValue) {
  EXPECT_TRUE(QuantitiesEqual("0.5", "500m"));
  EXPECT_TRUE(QuantitiesEqual("1Gi", "1073741824"));
  EXPECT_TRUE(QuantitiesEqual("4", "4000m"));
  EXPECT_TRUE(QuantitiesEqual("1e3", "1k"));
  EXPECT_FALSE(QuantitiesEqual("1G", "1Gi"));
  EXPECT_FALSE(QuantitiesEqual("1", "x"));
  EXPECT_FALSE(ParseQuantity("16GB").ok());
  EXPECT_FALSE(ParseQuantity("").ok());
  EXPECT_NEAR(static_cast<double>(*ParseQuantity("250m")), 0.25, 1e-15);
  EXPECT_EQ(CeilSeconds(std::chrono::milliseconds(1500)), 2);
}

}  // namespace
}  // namespace kinfer::api
