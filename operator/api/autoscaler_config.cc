#include "operator/api/autoscaler_config.h"

#include <chrono>

namespace kinfer::api {

autoscale::AutoscalerConfig MakeAutoscalerConfig(const InferenceServiceSpec& spec) {
  const AutoscalingSpec& a = spec.autoscaling;
  autoscale::AutoscalerConfig c;
  c.min_replicas = a.min_replicas;
  c.max_replicas = a.max_replicas;
  c.target_load_per_replica = a.target_queue_depth_per_replica;
  c.target_requests_per_second_per_replica = a.target_requests_per_second_per_replica;
  c.stable_window = std::chrono::seconds(a.stable_window_seconds);
  c.panic_window_percent = a.panic_window_percent;
  c.panic_threshold = a.panic_threshold;
  c.slo_ttft_p99_seconds = spec.slo_ttft_p99_seconds.value_or(0.0);
  c.scale_down_delay = std::chrono::seconds(a.scale_down_delay_seconds);
  c.max_scale_up_rate = a.max_scale_up_rate;
  c.max_scale_down_rate = a.max_scale_down_rate;
  return c;
}

}  // namespace kinfer::api
