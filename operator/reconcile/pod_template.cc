// The pod template of an InferenceService's Deployment (see desired_objects.h for the layout and
// the drain sequence).
#include <string>

#include "operator/api/sidecar_config_yaml.h"
#include "operator/reconcile/desired_objects.h"

namespace kinfer::reconcile {

namespace {

using nlohmann::json;

// Model init containers: exit codes are pod_summary.h's, and the first line of
// /dev/termination-log names the reason the operator reports. Values come in through the
// environment, never spliced into the script.
constexpr char kFetchScript[] = R"(set -u
fail() { echo "$1" > /dev/termination-log; echo "$1" >&2; exit "$2"; }
check() { echo "$MODEL_SHA256  $1" | sha256sum -c - > /dev/null 2>&1; }
if [ -f "$MODEL_FILE" ] && check "$MODEL_FILE"; then exit 0; fi
tmp="$MODEL_FILE.part"
if command -v curl > /dev/null 2>&1; then
  curl -fsSL --retry 5 --retry-delay 2 -o "$tmp" "$MODEL_URI"
else
  wget -q -O "$tmp" "$MODEL_URI"
fi || fail "ModelDownloadFailed: cannot download $MODEL_URI" 4
check "$tmp" || { rm -f "$tmp"; fail "ModelChecksumMismatch: $MODEL_URI does not have sha256 $MODEL_SHA256" 3; }
mv "$tmp" "$MODEL_FILE"
)";

constexpr char kVerifyScript[] = R"(set -u
fail() { echo "$1" > /dev/termination-log; echo "$1" >&2; exit "$2"; }
[ -f "$MODEL_FILE" ] || fail "ModelNotFound: $MODEL_URI ($MODEL_FILE in the pod) is not a file" 5
if [ -n "$MODEL_SHA256" ]; then
  echo "$MODEL_SHA256  $MODEL_FILE" | sha256sum -c - > /dev/null 2>&1 ||
    fail "ModelChecksumMismatch: $MODEL_URI does not have sha256 $MODEL_SHA256" 3
fi
)";

// Appends the Secret's api_keys mapping to the generated config (keys stay out of ConfigMaps).
// YAML document markers (a file written as "---" first, as many tools write it) are left out:
// indented under api_keys they were a syntax error, and the sidecar never started.
constexpr char kSidecarConfigScript[] = R"(set -e
out=/etc/kinfer/out/sidecar.yaml
cat /etc/kinfer/base/sidecar.yaml > "$out.tmp"
echo 'api_keys:' >> "$out.tmp"
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in ---|'--- '*|...|'... '*) continue ;; esac
  printf '  %s\n' "$line"
done < /etc/kinfer/api-keys/api_keys.yaml >> "$out.tmp"
mv "$out.tmp" "$out"
)";

std::string Hex4(int port) {
  static const char kDigits[] = "0123456789ABCDEF";
  std::string s(4, '0');
  for (int i = 3; i >= 0; --i, port >>= 4) s[static_cast<size_t>(i)] = kDigits[port & 15];
  return s;
}

// A runtime's preStop: wait until the sidecar has stopped listening (it got SIGTERM) and then
// until no connection to this runtime's port is open (the sidecar finished its streams and
// exited). Reads /proc/net/tcp{,6} of the pod's network namespace; the grace period bounds it.
std::string RuntimePreStopScript(int runtime_port) {
  const std::string listen = " [0-9A-F]+:" + Hex4(api::kSidecarPort) + " [0-9A-F]+:[0-9A-F]+ 0A ";
  const std::string open = " [0-9A-F]+:" + Hex4(runtime_port) + " [0-9A-F]+:[0-9A-F]+ 01 ";
  return "while grep -Eq '" + listen +
         "' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 1; done\n"
         "while grep -Eq '" +
         open + "' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 1; done\n";
}

json Env(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

json ModelVolume(const api::ModelSpec& m, const std::string& volume) {
  switch (m.source) {
    case api::ModelSource::kPvc:
      return {{"name", volume},
              {"persistentVolumeClaim", {{"claimName", m.pvc_claim}, {"readOnly", true}}}};
    case api::ModelSource::kHostPath:
      return {{"name", volume},
              {"hostPath", {{"path", m.path.substr(0, m.path.rfind('/'))}, {"type", "Directory"}}}};
    case api::ModelSource::kHttp:
      break;
  }
  return {{"name", volume}, {"emptyDir", json::object()}};
}

// verify-VOLUME (pvc, file) or fetch-VOLUME (http).
json ModelInitContainer(const api::ModelSpec& m, const std::string& volume,
                        const std::string& mount_dir, const std::string& image) {
  const bool fetch = m.source == api::ModelSource::kHttp;
  return {{"name", (fetch ? "fetch-" : "verify-") + volume},
          {"image", image},
          {"command", {"/bin/sh", "-c", fetch ? kFetchScript : kVerifyScript}},
          {"env",
           {Env("MODEL_URI", m.uri), Env("MODEL_SHA256", m.sha256),
            Env("MODEL_FILE", ModelFilePath(m, mount_dir))}},
          {"volumeMounts", {{{"name", volume}, {"mountPath", mount_dir}, {"readOnly", !fetch}}}}};
}

json RuntimeContainer(const std::string& name, const std::string& image,
                      std::vector<std::string> args, json resources, const std::string& volume,
                      const std::string& mount_dir, int port) {
  json c = {
      {"name", name},
      {"image", image},
      {"command", {"kinfer-runtime"}},
      {"args", std::move(args)},
      {"volumeMounts", {{{"name", volume}, {"mountPath", mount_dir}, {"readOnly", true}}}},
      {"lifecycle",
       {{"preStop", {{"exec", {{"command", {"/bin/sh", "-c", RuntimePreStopScript(port)}}}}}}}}};
  if (!resources.empty()) c["resources"] = std::move(resources);
  return c;
}

json RuntimeResources(const api::ResourcesSpec& r) {
  json amounts = json::object();
  if (r.gpus > 0) amounts[r.gpu_resource_name] = std::to_string(r.gpus);
  if (!r.cpu.empty()) amounts["cpu"] = r.cpu;
  if (!r.memory.empty()) amounts["memory"] = r.memory;
  if (amounts.empty()) return json::object();
  return {{"limits", amounts}, {"requests", amounts}};
}

}  // namespace

std::string ModelFilePath(const api::ModelSpec& model, const std::string& mount_dir) {
  switch (model.source) {
    case api::ModelSource::kPvc:
      return mount_dir + "/" + model.path;
    case api::ModelSource::kHostPath:
      return mount_dir + model.path.substr(model.path.rfind('/'));
    case api::ModelSource::kHttp:
      break;
  }
  return mount_dir + "/model.gguf";
}

std::optional<std::string> DraftModelFilePath(const api::InferenceServiceSpec& spec) {
  const auto& sp = spec.runtime.speculative;
  if (!sp || !sp->enabled || sp->method != "draft") return std::nullopt;
  if (sp->draft_model) return ModelFilePath(*sp->draft_model, kDraftMountDir);
  if (spec.fallback_model) return ModelFilePath(*spec.fallback_model, kFallbackMountDir);
  return std::nullopt;  // refused by validation (InvalidSpec) before it gets here
}

json BuildPodTemplate(const api::InferenceService& isvc, const PlannerOptions& options) {
  const api::InferenceServiceSpec& spec = isvc.spec;
  const std::string runtime_image =
      spec.runtime.image.empty() ? options.default_runtime_image : spec.runtime.image;
  const std::string sidecar_image =
      spec.sidecar.image.empty() ? options.default_sidecar_image : spec.sidecar.image;
  const std::string fetcher_image =
      options.model_fetcher_image.empty() ? runtime_image : options.model_fetcher_image;

  json init = json::array(), containers = json::array(), volumes = json::array();
  init.push_back(ModelInitContainer(spec.model, "model", "/models/model", fetcher_image));
  volumes.push_back(ModelVolume(spec.model, "model"));
  containers.push_back(RuntimeContainer("runtime", runtime_image, RuntimeArgs(spec),
                                        RuntimeResources(spec.resources), "model", "/models/model",
                                        api::kRuntimePort));
  // Speculative decoding with a draft model: the runtime container reads it too.
  if (DraftModelFilePath(spec)) {
    const auto& draft = spec.runtime.speculative->draft_model;
    const std::string volume = draft ? "draft-model" : "fallback-model";
    if (draft) {
      init.push_back(ModelInitContainer(*draft, volume, kDraftMountDir, fetcher_image));
      volumes.push_back(ModelVolume(*draft, volume));
    }
    containers.back()["volumeMounts"].push_back(
        {{"name", volume}, {"mountPath", draft ? kDraftMountDir : kFallbackMountDir},
         {"readOnly", true}});
  }
  if (spec.fallback_model) {
    const api::ModelSpec& fb = *spec.fallback_model;
    init.push_back(ModelInitContainer(fb, "fallback-model", kFallbackMountDir, fetcher_image));
    volumes.push_back(ModelVolume(fb, "fallback-model"));
    // The fallback model runs in its own kinfer-runtime, on CPU (a pod's GPUs belong to one
    // container); the sidecar degrades to it through degrade.fallback_upstream.
    containers.push_back(RuntimeContainer("runtime-fallback", runtime_image,
                                          FallbackRuntimeArgs(spec), json::object(),
                                          "fallback-model", kFallbackMountDir,
                                          api::kFallbackRuntimePort));
  }

  json config_items = json::array();
  config_items.push_back({{"key", kSidecarConfigKey}, {"path", kSidecarConfigKey}});
  if (spec.sidecar.api_keys_secret_name.empty()) {
    volumes.push_back(
        {{"name", "sidecar-config"},
         {"configMap", {{"name", ConfigMapName(isvc.metadata)}, {"items", config_items}}}});
  } else {
    volumes.push_back(
        {{"name", "sidecar-config-base"},
         {"configMap", {{"name", ConfigMapName(isvc.metadata)}, {"items", config_items}}}});
    json secret_items = json::array();
    secret_items.push_back({{"key", kApiKeysSecretKey}, {"path", kApiKeysSecretKey}});
    volumes.push_back(
        {{"name", "api-keys"},
         {"secret", {{"secretName", spec.sidecar.api_keys_secret_name}, {"items", secret_items}}}});
    volumes.push_back({{"name", "sidecar-config"}, {"emptyDir", {{"medium", "Memory"}}}});
    init.push_back(
        {{"name", "sidecar-config"},
         {"image", sidecar_image},
         {"command", {"/bin/sh", "-c", kSidecarConfigScript}},
         {"volumeMounts",
          {{{"name", "sidecar-config-base"}, {"mountPath", "/etc/kinfer/base"}, {"readOnly", true}},
           {{"name", "api-keys"}, {"mountPath", "/etc/kinfer/api-keys"}, {"readOnly", true}},
           {{"name", "sidecar-config"}, {"mountPath", "/etc/kinfer/out"}}}}});
  }

  const json http_get_port = "http";
  containers.push_back(
      {{"name", "sidecar"},
       {"image", sidecar_image},
       {"command", {"kinfer-sidecar"}},
       {"args", {"--config", std::string("/etc/kinfer/") + kSidecarConfigKey}},
       {"ports", {{{"name", "http"}, {"containerPort", api::kSidecarPort}, {"protocol", "TCP"}}}},
       // Ready = the runtime has loaded the model, the breaker is not open, not draining.
       {"readinessProbe",
        {{"httpGet", {{"path", "/ready"}, {"port", http_get_port}}},
         {"periodSeconds", 5},
         {"timeoutSeconds", 2},
         {"failureThreshold", 2}}},
       // Live = the sidecar's event loop answers; a slow model load does not restart the pod.
       {"livenessProbe",
        {{"httpGet", {{"path", "/health"}, {"port", http_get_port}}},
         {"periodSeconds", 10},
         {"timeoutSeconds", 5},
         {"failureThreshold", 6}}},
       {"resources",
        {{"requests",
          {{"cpu", options.sidecar_cpu_request}, {"memory", options.sidecar_memory_request}}}}},
       {"volumeMounts",
        {{{"name", "sidecar-config"}, {"mountPath", "/etc/kinfer"}, {"readOnly", true}}}},
       // Endpoints drop the pod while the sidecar still serves; then SIGTERM starts its drain.
       {"lifecycle",
        {{"preStop",
          {{"exec",
            {{"command",
              {"/bin/sh", "-c",
               "sleep " + std::to_string(options.sidecar_pre_stop_seconds)}}}}}}}}});

  // Pod Security "restricted" as the images allow it (they run as 65532): no privilege
  // escalation, no capabilities, the runtime's seccomp profile, and no service-account token
  // (nothing in the pod talks to the API server). A namespace that enforces "restricted" admits
  // the pods; an image of one's own must run as a numeric non-root user too.
  const json container_security = {{"allowPrivilegeEscalation", false},
                                   {"capabilities", {{"drop", {"ALL"}}}}};
  for (json* list : {&init, &containers}) {
    for (json& c : *list) c["securityContext"] = container_security;
  }
  json pod_spec = {{"terminationGracePeriodSeconds", TerminationGracePeriodSeconds(spec, options)},
                   {"enableServiceLinks", false},
                   {"automountServiceAccountToken", false},
                   {"securityContext",
                    {{"runAsNonRoot", true}, {"seccompProfile", {{"type", "RuntimeDefault"}}}}},
                   {"initContainers", std::move(init)},
                   {"containers", std::move(containers)},
                   {"volumes", std::move(volumes)}};
  if (!spec.node_selector.empty()) pod_spec["nodeSelector"] = spec.node_selector;
  if (spec.tolerations.is_array() && !spec.tolerations.empty())
    pod_spec["tolerations"] = spec.tolerations;
  if (spec.affinity.is_object() && !spec.affinity.empty()) pod_spec["affinity"] = spec.affinity;
  if (!spec.priority_class_name.empty()) pod_spec["priorityClassName"] = spec.priority_class_name;

  return {{"metadata",
           {{"labels", Labels(isvc.metadata)},
            {"annotations", {{"kubectl.kubernetes.io/default-container", "sidecar"}}}}},
          {"spec", std::move(pod_spec)}};
}

}  // namespace kinfer::reconcile
