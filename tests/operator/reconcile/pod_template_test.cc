// The desired objects: the pod layout (containers, ports, probes, resources, model volumes, init
// containers, preStop hooks, grace period, passthrough scheduling fields), the Service, and the
// shell scripts of the pod run for real with /bin/sh on temporary files.
#include "operator/reconcile/desired_objects.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "operator/reconcile/object_diff.h"
#include "sidecar/config/sidecar_config.h"
#include "tests/operator/api/yaml_to_json.h"

namespace kinfer::reconcile {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kRoot = KINFER_SOURCE_DIR;

api::InferenceService Parse(const std::string& sample,
                            const std::function<void(json&)>& edit = nullptr) {
  json object = testing::LoadYamlFile(kRoot + "/crds/samples/" + sample);
  object["metadata"]["uid"] = "u1";
  if (edit) edit(object["spec"]);
  auto isvc = api::ParseInferenceService(object);
  EXPECT_TRUE(isvc.ok()) << isvc.status().ToString();
  return isvc.ok() ? *isvc : api::InferenceService{};
}

const json& Named(const json& list, const std::string& name) {
  for (const json& item : list) {
    if (item.value("name", "") == name) return item;
  }
  static const json kNull;
  ADD_FAILURE() << "no item named " << name << " in " << list.dump();
  return kNull;
}

bool HasNamed(const json& list, const std::string& name) {
  for (const json& item : list) {
    if (item.value("name", "") == name) return true;
  }
  return false;
}

std::vector<std::string> Args(const json& container) {
  return container["args"].get<std::vector<std::string>>();
}

bool Contains(const std::vector<std::string>& args, const std::string& flag,
              const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag && args[i + 1] == value) return true;
  }
  return false;
}

TEST(PodTemplateTest, MinimalPodLayout) {
  const api::InferenceService isvc = Parse("minimal.yaml");
  const PlannerOptions options;
  const json pod = BuildPodTemplate(isvc, options)["spec"];
  const json& runtime = Named(pod["containers"], "runtime");
  const json& sidecar = Named(pod["containers"], "sidecar");
  EXPECT_EQ(pod["containers"].size(), 2u);
  EXPECT_EQ(runtime["image"], options.default_runtime_image);
  EXPECT_EQ(sidecar["image"], options.default_sidecar_image);
  const auto args = Args(runtime);
  EXPECT_TRUE(Contains(args, "--model", "/models/model/smollm2-135m-instruct-q4_1.gguf"));
  EXPECT_TRUE(Contains(args, "--model-name", "smollm2-135m-instruct"));
  EXPECT_TRUE(Contains(args, "--host", "127.0.0.1"));  // the runtime: localhost only
  EXPECT_TRUE(Contains(args, "--port", "8081"));
  EXPECT_FALSE(runtime.contains("ports"));
  EXPECT_EQ(runtime["resources"]["limits"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(runtime["resources"]["requests"]["nvidia.com/gpu"], "1");
  EXPECT_EQ(sidecar["ports"],
            (json{{{"name", "http"}, {"containerPort", 8080}, {"protocol", "TCP"}}}));
  EXPECT_EQ(Args(sidecar), (std::vector<std::string>{"--config", "/etc/kinfer/sidecar.yaml"}));
  EXPECT_EQ(sidecar["readinessProbe"]["httpGet"]["path"], "/ready");
  EXPECT_EQ(sidecar["livenessProbe"]["httpGet"]["path"], "/health");
  EXPECT_EQ(Named(pod["volumes"], "sidecar-config")["configMap"]["name"], "smollm2-sidecar");
  const json& model = Named(pod["volumes"], "model");
  EXPECT_EQ(model["persistentVolumeClaim"], (json{{"claimName", "models"}, {"readOnly", true}}));
  EXPECT_TRUE(HasNamed(pod["initContainers"], "verify-model"));
  EXPECT_EQ(Named(pod["initContainers"], "verify-model")["image"], options.default_runtime_image);
  // Graceful scale-down: 5 s preStop + the longest class timeout (batch, 120 s) + 10 s margin.
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], 135);
  EXPECT_EQ(sidecar["lifecycle"]["preStop"]["exec"]["command"][2], "sleep 5");
  EXPECT_NE(runtime["lifecycle"]["preStop"]["exec"]["command"][2].get<std::string>().find(":1F91 "),
            std::string::npos);
  EXPECT_FALSE(pod.contains("nodeSelector"));
  EXPECT_FALSE(pod.contains("tolerations"));
}

TEST(PodTemplateTest, FullPodLayout) {
  const api::InferenceService isvc = Parse("full.yaml");
  PlannerOptions options;
  options.model_fetcher_image = "curlimages/curl:8.10.1";
  const json pod = BuildPodTemplate(isvc, options)["spec"];
  const json& runtime = Named(pod["containers"], "runtime");
  EXPECT_EQ(runtime["image"], "registry.example.com/kinfer/kinfer-runtime:0.1.0");
  EXPECT_EQ(Named(pod["containers"], "sidecar")["image"],
            "registry.example.com/kinfer/kinfer-sidecar:0.1.0");
  const auto args = Args(runtime);
  EXPECT_TRUE(Contains(args, "--model", "/models/model/model.gguf"));
  EXPECT_TRUE(Contains(args, "--ctx-size", "8192"));
  EXPECT_TRUE(Contains(args, "--threads", "4"));
  EXPECT_EQ(args[args.size() - 2], "--log-level");  // extraArgs last
  // A GPU pod: the KV cache takes kvCacheFraction of what the weights leave.
  EXPECT_TRUE(Contains(args, "--kv-cache-fraction", "0.85"));
  // speculative: ngram, 4 tokens: on for every request, no draft model.
  EXPECT_NE(std::find(args.begin(), args.end(), "--spec-default=true"), args.end());
  EXPECT_TRUE(Contains(args, "--spec-tokens", "4"));
  EXPECT_EQ(std::find(args.begin(), args.end(), "--draft-model"), args.end());
  EXPECT_EQ(runtime["resources"]["limits"],
            (json{{"nvidia.com/gpu", "1"}, {"cpu", "4"}, {"memory", "16Gi"}}));
  // The model over https: an emptyDir filled and checked by an init container.
  EXPECT_EQ(Named(pod["volumes"], "model")["emptyDir"], json::object());
  const json& fetch = Named(pod["initContainers"], "fetch-model");
  EXPECT_EQ(fetch["image"], "curlimages/curl:8.10.1");
  EXPECT_EQ(Named(fetch["env"], "MODEL_SHA256")["value"], isvc.spec.model.sha256);
  EXPECT_EQ(Named(fetch["env"], "MODEL_FILE")["value"], "/models/model/model.gguf");
  // The fallback model: its own runtime on 127.0.0.1:8082, its PVC checked first.
  const json& fallback = Named(pod["containers"], "runtime-fallback");
  EXPECT_TRUE(Contains(Args(fallback), "--port", "8082"));
  EXPECT_TRUE(
      Contains(Args(fallback), "--model", "/models/fallback/smollm2-135m-instruct-q4_1.gguf"));
  EXPECT_TRUE(HasNamed(pod["initContainers"], "verify-fallback-model"));
  EXPECT_NE(
      fallback["lifecycle"]["preStop"]["exec"]["command"][2].get<std::string>().find(":1F92 "),
      std::string::npos);
  // API keys from the Secret, merged by an init container.
  EXPECT_EQ(Named(pod["volumes"], "api-keys")["secret"]["secretName"], "gemma3-chat-api-keys");
  EXPECT_TRUE(HasNamed(pod["initContainers"], "sidecar-config"));
  // Scheduling passthrough.
  EXPECT_EQ(pod["nodeSelector"], (json{{"nvidia.com/gpu.product", "NVIDIA-L4"}}));
  EXPECT_EQ(pod["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_TRUE(pod["affinity"].contains("podAntiAffinity"));
  EXPECT_EQ(pod["priorityClassName"], "inference-high");
  // batch has a 300 s timeout: 5 + 300 + 10.
  EXPECT_EQ(pod["terminationGracePeriodSeconds"], 315);
}

TEST(PodTemplateTest, SpeculativeDecodingWithADraftModelMountsItIntoTheRuntime) {
  // An explicit draftModel: its own volume, checked by an init container, mounted read-only.
  const api::InferenceService own = Parse("minimal.yaml", [](json& s) {
    s["runtime"]["speculative"] = {
        {"enabled", true},
        {"method", "draft"},
        {"numSpeculativeTokens", 3},
        {"draftModel", {{"name", "draft"}, {"uri", "file:///mnt/models/draft-q8.gguf"}}}};
  });
  json pod = BuildPodTemplate(own, {})["spec"];
  const json& runtime = Named(pod["containers"], "runtime");
  EXPECT_TRUE(Contains(Args(runtime), "--draft-model", "/models/draft/draft-q8.gguf"));
  EXPECT_TRUE(Contains(Args(runtime), "--spec-tokens", "3"));
  EXPECT_TRUE(HasNamed(runtime["volumeMounts"], "draft-model"));
  EXPECT_TRUE(HasNamed(pod["volumes"], "draft-model"));
  EXPECT_TRUE(HasNamed(pod["initContainers"], "verify-draft-model"));

  // No draftModel: the fallback model's volume drafts.
  const api::InferenceService fb =
      Parse("full.yaml", [](json& s) { s["runtime"]["speculative"]["method"] = "draft"; });
  pod = BuildPodTemplate(fb, {})["spec"];
  const json& rt = Named(pod["containers"], "runtime");
  EXPECT_TRUE(
      Contains(Args(rt), "--draft-model", "/models/fallback/smollm2-135m-instruct-q4_1.gguf"));
  EXPECT_TRUE(HasNamed(rt["volumeMounts"], "fallback-model"));
  EXPECT_FALSE(HasNamed(pod["volumes"], "draft-model"));

  // Off: no flag at all, so turning it off rolls the pods back to plain decoding.
  const api::InferenceService off = Parse("minimal.yaml");
  const auto args = Args(Named(BuildPodTemplate(off, {})["spec"]["containers"], "runtime"));
  for (const std::string& a : args) EXPECT_EQ(a.rfind("--spec", 0), std::string::npos) << a;
}

TEST(PodTemplateTest, GraceCoversTheDrainTimeoutToo) {
  const api::InferenceService isvc = Parse("minimal.yaml", [](json& s) {
    s["sidecar"] = {{"timeouts", {{"drain", "10m"}}},
                    {"classes", {{{"name", "standard"}, {"timeout", "1.2s"}}}}};
  });
  EXPECT_EQ(TerminationGracePeriodSeconds(isvc.spec, {}), 5 + 600 + 10);
  const api::InferenceService short_one = Parse("minimal.yaml", [](json& s) {
    s["sidecar"] = {{"timeouts", {{"drain", "0s"}}},
                    {"classes", {{{"name", "standard"}, {"timeout", "1.2s"}}}}};
  });
  PlannerOptions options;
  options.sidecar_pre_stop_seconds = 3;
  options.drain_margin_seconds = 7;
  EXPECT_EQ(TerminationGracePeriodSeconds(short_one.spec, options), 3 + 2 + 7);
}

TEST(PodTemplateTest, ALongerSidecarClientWriteTimeoutReachesTheRuntime) {
  auto runtime_args = [](const std::string& client_write) {
    const api::InferenceService isvc = Parse("minimal.yaml", [&](json& s) {
      s["sidecar"] = {{"timeouts", {{"clientWrite", client_write}}}};
    });
    return Args(Named(BuildPodTemplate(isvc, {})["spec"]["containers"], "runtime"));
  };
  EXPECT_TRUE(Contains(runtime_args("2m"), "--write-timeout", "120"));
  EXPECT_TRUE(Contains(runtime_args("30.5s"), "--write-timeout", "31"));
  const auto same = runtime_args("30s");  // the runtime's default already covers it
  EXPECT_EQ(std::find(same.begin(), same.end(), "--write-timeout"), same.end());
}

TEST(PodTemplateTest, ALargerSidecarBodyLimitReachesTheRuntime) {
  auto runtime_args = [](const json& max_body_bytes) {
    const api::InferenceService isvc = Parse("minimal.yaml", [&](json& s) {
      s["sidecar"] = {{"maxBodyBytes", max_body_bytes}};
    });
    return Args(Named(BuildPodTemplate(isvc, {})["spec"]["containers"], "runtime"));
  };
  // Above the runtime's 1 MiB default the runtime takes what the sidecar lets through, which it
  // would otherwise answer 413.
  EXPECT_TRUE(Contains(runtime_args("2MiB"), "--max-body-bytes", "2097152"));
  EXPECT_TRUE(Contains(runtime_args(1048577), "--max-body-bytes", "1048577"));
  EXPECT_TRUE(Contains(runtime_args("4GiB"), "--max-body-bytes", "4294967296"));
  EXPECT_TRUE(Contains(Args(Named(BuildPodTemplate(Parse("full.yaml"), {})["spec"]["containers"],
                                  "runtime")),
                       "--max-body-bytes", "2097152"));
  for (const json& within : {json("1MiB"), json("64KiB"), json(1048576)}) {
    const auto args = runtime_args(within);  // the runtime's default already covers it
    EXPECT_EQ(std::find(args.begin(), args.end(), "--max-body-bytes"), args.end()) << within;
  }
}

// The fallback runtime is documented to run on CPU: without --device cpu, kinfer-runtime's
// default (auto) would take GPU 0 in an image with NVIDIA_VISIBLE_DEVICES=all. It serves the
// requests the sidecar degrades, so it takes the primary's sidecar-coupled flags too.
TEST(PodTemplateTest, FallbackRuntimeRunsOnCpuWithTheSidecarCoupledFlags) {
  const json pod = BuildPodTemplate(Parse("full.yaml"), {})["spec"];
  const auto fallback = Args(Named(pod["containers"], "runtime-fallback"));
  EXPECT_TRUE(Contains(fallback, "--device", "cpu"));
  EXPECT_TRUE(Contains(fallback, "--write-timeout", "45"));  // clientWrite: 45s
  EXPECT_TRUE(Contains(fallback, "--max-body-bytes", "2097152"));  // maxBodyBytes: 2MiB
  EXPECT_TRUE(Contains(fallback, "--model-name", "smollm2-135m-instruct"));
  const auto primary = Args(Named(pod["containers"], "runtime"));  // a GPU pod: auto finds it
  EXPECT_EQ(std::find(primary.begin(), primary.end(), "--device"), primary.end());
  EXPECT_TRUE(Contains(primary, "--write-timeout", "45"));
  EXPECT_TRUE(Contains(primary, "--max-body-bytes", "2097152"));

  // Defaults: CPU still, and no coupled flag the runtime's defaults already cover.
  const json plain = BuildPodTemplate(Parse("minimal.yaml", [](json& s) {
                                        s["fallbackModel"] = {{"name", "small"},
                                                              {"uri", "pvc://models/s.gguf"}};
                                      }),
                                      {})["spec"];
  EXPECT_EQ(Args(Named(plain["containers"], "runtime-fallback")),
            (std::vector<std::string>{"--model", "/models/fallback/s.gguf", "--model-name",
                                      "small", "--host", "127.0.0.1", "--port", "8082",
                                      "--device", "cpu"}));
}

TEST(PodTemplateTest, ARuntimeWithoutGpusIsToldToUseTheCpu) {
  const auto cpu =
      Args(Named(BuildPodTemplate(Parse("minimal.yaml",
                                        [](json& s) { s["resources"] = {{"gpus", 0}}; }),
                                  {})["spec"]["containers"],
                 "runtime"));
  EXPECT_TRUE(Contains(cpu, "--device", "cpu"));
  const auto gpu = Args(Named(BuildPodTemplate(Parse("minimal.yaml"), {})["spec"]["containers"],
                              "runtime"));
  EXPECT_EQ(std::find(gpu.begin(), gpu.end(), "--device"), gpu.end());
}

TEST(PodTemplateTest, CpuOnlyAndOtherAccelerators) {
  const json cpu_pod = BuildPodTemplate(Parse("manual-replicas.yaml"), {})["spec"];
  const json& runtime = Named(cpu_pod["containers"], "runtime");
  EXPECT_EQ(runtime["resources"]["limits"], (json{{"cpu", "4"}, {"memory", "2Gi"}}));
  EXPECT_TRUE(Contains(Args(runtime), "--threads", "4"));
  const auto cpu_args = Args(runtime);  // no GPU: the runtime's own KV pool size, on the CPU
  EXPECT_TRUE(Contains(cpu_args, "--device", "cpu"));
  EXPECT_EQ(std::find(cpu_args.begin(), cpu_args.end(), "--kv-cache-fraction"), cpu_args.end());
  const json amd =
      BuildPodTemplate(Parse("minimal.yaml",
                             [](json& s) {
                               s["resources"] = {{"gpus", 2}, {"gpuResourceName", "amd.com/gpu"}};
                             }),
                       {})["spec"];
  EXPECT_EQ(Named(amd["containers"], "runtime")["resources"]["limits"],
            (json{{"amd.com/gpu", "2"}}));
}

// Pod Security "restricted": every container and init container, and the pod; no token.
TEST(PodTemplateTest, PodsMeetPodSecurityRestricted) {
  for (const char* sample : {"minimal.yaml", "full.yaml"}) {
    const json pod = BuildPodTemplate(Parse(sample), {})["spec"];
    EXPECT_EQ(pod["automountServiceAccountToken"], false) << sample;
    EXPECT_EQ(pod["securityContext"]["runAsNonRoot"], true) << sample;
    EXPECT_EQ(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault") << sample;
    for (const char* list : {"containers", "initContainers"}) {
      for (const json& c : pod[list]) {
        EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false) << c["name"];
        EXPECT_EQ(c["securityContext"]["capabilities"]["drop"], json({"ALL"})) << c["name"];
      }
    }
  }
}

TEST(PodTemplateTest, HostPathModelMountsItsDirectory) {
  const json pod = BuildPodTemplate(
      Parse("minimal.yaml", [](json& s) { s["model"]["uri"] = "file:///data/models/m.gguf"; }),
      {})["spec"];
  EXPECT_EQ(Named(pod["volumes"], "model")["hostPath"],
            (json{{"path", "/data/models"}, {"type", "Directory"}}));
  EXPECT_TRUE(
      Contains(Args(Named(pod["containers"], "runtime")), "--model", "/models/model/m.gguf"));
}

TEST(PodTemplateTest, ServiceAndDeploymentShape) {
  const api::InferenceService isvc = Parse("minimal.yaml");
  const json svc = BuildService(isvc);
  EXPECT_EQ(svc["spec"]["type"], "ClusterIP");
  EXPECT_EQ(svc["spec"]["selector"], (json{{"serving.kinfer.dev/inferenceservice", "smollm2"}}));
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 8080);
  const json d = BuildDeployment(isvc, 3, "abc", BuildPodTemplate(isvc, {}));
  EXPECT_EQ(d["spec"]["replicas"], 3);
  EXPECT_EQ(d["spec"]["selector"]["matchLabels"], svc["spec"]["selector"]);
  EXPECT_EQ(d["spec"]["template"]["metadata"]["labels"]["serving.kinfer.dev/inferenceservice"],
            "smollm2");
  EXPECT_EQ(d["spec"]["template"]["metadata"]["annotations"][kTemplateHashAnnotation], "abc");
  EXPECT_EQ(d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
  const json pdb = BuildPodDisruptionBudget(isvc);
  EXPECT_EQ(pdb["spec"]["maxUnavailable"], 1);
}

// ---- the pod's shell scripts, run with /bin/sh ----

class ScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kinfer-pod-scripts-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  }
  std::string Read(const fs::path& path) { return testing::ReadTextFile(path.string()); }

  // Runs `script` with /bin/sh, with /dev/termination-log and the fixed paths moved into dir_;
  // returns the exit status.
  int Run(std::string script, const std::map<std::string, std::string>& env, int timeout_s = 20) {
    auto replace = [&](const std::string& from, const std::string& to) {
      for (size_t at = script.find(from); at != std::string::npos;
           at = script.find(from, at + to.size())) {
        script.replace(at, from.size(), to);
      }
    };
    replace("/dev/termination-log", (dir_ / "termination-log").string());
    replace("/etc/kinfer/", (dir_ / "etc/").string());
    replace("/proc/net/tcp6", (dir_ / "tcp6").string());
    replace("/proc/net/tcp", (dir_ / "tcp").string());
    Write(dir_ / "script.sh", script);
    std::string command = "timeout " + std::to_string(timeout_s) + " env";
    for (const auto& [k, v] : env) command += " " + k + "='" + v + "'";
    command += " /bin/sh " + (dir_ / "script.sh").string() + " > /dev/null 2>&1";
    const int rc = std::system(command.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }

  std::string Sha256(const fs::path& path) {
    const fs::path out = dir_ / "sha";
    std::system(("sha256sum " + path.string() + " | cut -d' ' -f1 > " + out.string()).c_str());
    std::string s = Read(out);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }

  fs::path dir_;
};

std::string InitScript(const api::InferenceService& isvc, const std::string& name) {
  return Named(BuildPodTemplate(isvc, {})["spec"]["initContainers"], name)["command"][2];
}

TEST_F(ScriptTest, VerifyModelChecksTheFileAndItsHash) {
  const std::string script = InitScript(Parse("minimal.yaml"), "verify-model");
  const fs::path model = dir_ / "models/m.gguf";
  Write(model, "GGUF weights");
  const std::string sha = Sha256(model);
  EXPECT_EQ(
      Run(script,
          {{"MODEL_URI", "pvc://models/m.gguf"}, {"MODEL_FILE", model}, {"MODEL_SHA256", sha}}),
      0);
  EXPECT_EQ(
      Run(script,
          {{"MODEL_URI", "pvc://models/m.gguf"}, {"MODEL_FILE", model}, {"MODEL_SHA256", ""}}),
      0);
  EXPECT_EQ(Run(script, {{"MODEL_URI", "pvc://models/m.gguf"},
                         {"MODEL_FILE", model},
                         {"MODEL_SHA256", std::string(64, '0')}}),
            kExitModelChecksumMismatch);
  EXPECT_EQ(Read(dir_ / "termination-log").rfind("ModelChecksumMismatch:", 0), 0u);
  EXPECT_EQ(Run(script, {{"MODEL_URI", "pvc://models/x.gguf"},
                         {"MODEL_FILE", dir_ / "models/x.gguf"},
                         {"MODEL_SHA256", sha}}),
            kExitModelNotFound);
  EXPECT_EQ(Read(dir_ / "termination-log").rfind("ModelNotFound:", 0), 0u);
}

TEST_F(ScriptTest, FetchModelDownloadsChecksAndSkipsAGoodCopy) {
  const std::string script = InitScript(Parse("full.yaml"), "fetch-model");
  const fs::path source = dir_ / "origin/m.gguf", dest = dir_ / "models/model.gguf";
  Write(source, "GGUF weights over http");
  fs::create_directories(dest.parent_path());
  const std::string sha = Sha256(source);
  const std::string uri = "file://" + source.string();  // curl and wget read it like an http URL
  EXPECT_EQ(Run(script,
                {{"MODEL_URI", uri}, {"MODEL_FILE", dest}, {"MODEL_SHA256", std::string(64, 'a')}}),
            kExitModelChecksumMismatch);
  EXPECT_FALSE(fs::exists(dest));
  EXPECT_FALSE(fs::exists(dest.string() + ".part"));
  EXPECT_EQ(Run(script, {{"MODEL_URI", uri}, {"MODEL_FILE", dest}, {"MODEL_SHA256", sha}}), 0);
  EXPECT_EQ(Read(dest), "GGUF weights over http");
  fs::remove(source);  // a restarted init container keeps the checked copy
  EXPECT_EQ(Run(script, {{"MODEL_URI", uri}, {"MODEL_FILE", dest}, {"MODEL_SHA256", sha}}), 0);
  fs::remove(dest);
  EXPECT_EQ(Run(script, {{"MODEL_URI", uri}, {"MODEL_FILE", dest}, {"MODEL_SHA256", sha}}),
            kExitModelDownloadFailed);
  EXPECT_EQ(Read(dir_ / "termination-log").rfind("ModelDownloadFailed:", 0), 0u);
}

TEST_F(ScriptTest, SidecarConfigWithApiKeysLoadsInTheSidecar) {
  const api::InferenceService isvc = Parse("full.yaml");
  const std::string yaml = At(BuildConfigMap(isvc), {"data", kSidecarConfigKey});
  Write(dir_ / "etc/base/sidecar.yaml", yaml);
  Write(
      dir_ / "etc/api-keys/api_keys.yaml",
      "sk-team-a-0123: {class: critical, tenant: team-a}\n\"sk-b\":\n  class: batch");  // no final
                                                                                        // newline
  fs::create_directories(dir_ / "etc/out");
  ASSERT_EQ(Run(InitScript(isvc, "sidecar-config"), {}), 0);
  auto config = LoadSidecarConfigYaml(Read(dir_ / "etc/out/sidecar.yaml"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_EQ(config->api_keys.size(), 2u);
  EXPECT_EQ(config->api_keys.at("sk-team-a-0123").tenant, "team-a");
  EXPECT_EQ(config->api_keys.at("sk-b").class_name, "batch");
  // A Secret written as a YAML document ("---" first, "..." last) loads the same.
  Write(dir_ / "etc/api-keys/api_keys.yaml",
        "---\nsk-team-a-0123: {class: critical, tenant: team-a}\n...\n");
  ASSERT_EQ(Run(InitScript(isvc, "sidecar-config"), {}), 0);
  config = LoadSidecarConfigYaml(Read(dir_ / "etc/out/sidecar.yaml"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->api_keys.size(), 1u);
}

TEST_F(ScriptTest, RuntimePreStopWaitsForTheSidecarToDrain) {
  const json pod = BuildPodTemplate(Parse("minimal.yaml"), {})["spec"];
  const std::string script =
      Named(pod["containers"], "runtime")["lifecycle"]["preStop"]["exec"]["command"][2];
  const std::string header = "  sl  local_address rem_address   st tx_queue rx_queue\n";
  const std::string listening =
      "   0: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000\n";
  const std::string stream = "   1: 0100007F:1F91 0100007F:D2F0 01 00000000:00000000 00:00000000\n";
  const std::string other =
      "   2: 0100007F:1F900 0100007F:1F91 01 00000000:00000000 00:00000000\n"
      "   3: 0100007F:1F91 0100007F:D2F1 06 00000000:00000000 00:00000000\n";
  Write(dir_ / "tcp6", header);
  // Sidecar gone, no stream open (an idle pod): returns at once.
  Write(dir_ / "tcp", header + other);
  EXPECT_EQ(Run(script, {}, 5), 0);
  // The sidecar still listens (its preStop sleep): waits.
  Write(dir_ / "tcp", header + listening);
  EXPECT_EQ(Run(script, {}, 2), 124);
  // The sidecar drains (listener closed) but a stream to the runtime is open: waits.
  Write(dir_ / "tcp", header + stream);
  EXPECT_EQ(Run(script, {}, 2), 124);
}

}  // namespace
}  // namespace kinfer::reconcile
