#include "operator/reconcile/pod_summary.h"

#include <string>

#include "operator/reconcile/object_diff.h"

namespace kinfer::reconcile {

namespace {

using nlohmann::json;

enum class Problem {
  kNone,
  kChecksum,
  kNotFound,
  kDownload,
  kImagePull,
  kContainerConfig,
  kCrashLoop,
  kUnschedulable
};

std::string Str(const json& v) { return v.is_string() ? v.get<std::string>() : std::string(); }

// The exit code and message of a terminated state (current or last), if any.
// A container's failed exit: its current state's, or, while it waits to run again (a restart's
// back-off), its last state's. A container that has since completed, or runs again, has none:
// the kubelet keeps the old failure in lastState after a retry succeeds.
bool Terminated(const json& status, int* code, std::string* message) {
  auto failed = [&](const json& t) {
    if (!t.is_object() || !t.contains("exitCode") || !t["exitCode"].is_number_integer()) return false;
    *code = t["exitCode"].get<int>();
    *message = Str(t.value("message", json()));
    return *code != 0;
  };
  const json& now = At(status, {"state", "terminated"});
  if (now.is_object()) return failed(now);
  if (At(status, {"state", "running"}).is_object()) return false;
  return failed(At(status, {"lastState", "terminated"}));
}

Problem ContainerProblem(const json& status, bool init, std::string* detail) {
  const std::string name = Str(status.value("name", json()));
  int code = 0;
  std::string message;
  const bool model_init = init && (name.starts_with("fetch-") || name.starts_with("verify-"));
  if (model_init && Terminated(status, &code, &message)) {
    Problem p = code == kExitModelChecksumMismatch ? Problem::kChecksum
                : code == kExitModelNotFound       ? Problem::kNotFound
                : code == kExitModelDownloadFailed ? Problem::kDownload
                                                   : Problem::kNone;
    if (p != Problem::kNone) {
      *detail =
          "container " + name + ": " + (message.empty() ? "exit " + std::to_string(code) : message);
      while (!detail->empty() && detail->back() == '\n') detail->pop_back();
      return p;
    }
  }
  const std::string waiting = Str(At(status, {"state", "waiting", "reason"}));
  if (waiting == "ErrImagePull" || waiting == "ImagePullBackOff" || waiting == "InvalidImageName") {
    *detail = "container " + name + ": " + waiting + " " +
              Str(At(status, {"state", "waiting", "message"}));
    return Problem::kImagePull;
  }
  if (waiting == "CreateContainerConfigError" || waiting == "CreateContainerError") {
    *detail = "container " + name + ": " + waiting + " " +
              Str(At(status, {"state", "waiting", "message"}));
    return Problem::kContainerConfig;
  }
  if (waiting == "CrashLoopBackOff") {
    *detail = "container " + name + ": CrashLoopBackOff";
    if (Terminated(status, &code, &message)) *detail += " (exit " + std::to_string(code) + ")";
    return Problem::kCrashLoop;
  }
  return Problem::kNone;
}

}  // namespace

bool PodTerminated(const json& pod) {
  const json& phase = At(pod, {"status", "phase"});
  return phase.is_string() && (phase == "Failed" || phase == "Succeeded");
}

void AddPod(const json& pod, PodSummary* s) {
  if (!pod.is_object() || PodTerminated(pod)) return;
  if (!At(pod, {"metadata", "deletionTimestamp"}).is_null()) {
    ++s->terminating;
    return;
  }
  ++s->total;
  Problem worst = Problem::kNone;
  std::string worst_detail;
  const json& conditions = At(pod, {"status", "conditions"});
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (!c.is_object()) continue;
      const std::string type = Str(c.value("type", json()));
      const std::string status = Str(c.value("status", json()));
      if (type == "Ready" && status == "True") ++s->ready;
      if (type == "PodScheduled" && status == "False" &&
          Str(c.value("reason", json())) == "Unschedulable") {
        worst = Problem::kUnschedulable;
        worst_detail = "Unschedulable: " + Str(c.value("message", json()));
      }
    }
  }
  for (const auto& [key, init] :
       {std::pair{"initContainerStatuses", true}, std::pair{"containerStatuses", false}}) {
    const json& statuses = At(pod, {"status", key});
    if (!statuses.is_array()) continue;
    for (const json& cs : statuses) {
      if (!cs.is_object()) continue;
      std::string detail;
      const Problem p = ContainerProblem(cs, init, &detail);
      if (p != Problem::kNone && (worst == Problem::kNone || p < worst)) {
        worst = p;
        worst_detail = detail;
      }
    }
  }
  switch (worst) {
    case Problem::kNone:
      return;
    case Problem::kChecksum:
      ++s->model_checksum_mismatch;
      break;
    case Problem::kNotFound:
      ++s->model_not_found;
      break;
    case Problem::kDownload:
      ++s->model_download_failed;
      break;
    case Problem::kImagePull:
      ++s->image_pull_failing;
      break;
    case Problem::kContainerConfig:
      ++s->container_config_error;
      break;
    case Problem::kCrashLoop:
      ++s->crash_looping;
      break;
    case Problem::kUnschedulable:
      ++s->unschedulable;
      break;
  }
  if (s->first_problem.empty()) {
    s->first_problem = "pod " + Str(At(pod, {"metadata", "name"})) + ": " + worst_detail;
  }
}

PodSummary SummarizePods(const std::vector<json>& pods) {
  PodSummary s;
  for (const json& pod : pods) AddPod(pod, &s);
  return s;
}

}  // namespace kinfer::reconcile
