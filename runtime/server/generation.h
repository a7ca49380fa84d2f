// The generation endpoints, POST /v1/chat/completions and POST /v1/completions: parse and
// validate (openai_protocol.h), build the prompt tokens, submit to the Engine (one engine request
// per choice: ChoiceStreams reads the n of them as one), and answer with a
// whole JSON response or an SSE stream; record the request's metrics.
//
// Threading: HandleGeneration runs on the HTTP adapter's per-request thread and blocks on the
// request's RequestStream until the engine finishes (non-streaming) or returns a response whose
// stream function does so on the same thread (streaming). A client disconnect seen by the
// stream's sink, or `stopping` becoming true, cancels the engine request.
#pragma once

#include <atomic>

#include "runtime/server/http_types.h"
#include "runtime/server/openai_protocol.h"
#include "runtime/server/server_metrics.h"

namespace kinfer {

class CancelRegistry;
class ServedModel;

struct GenerationContext {
  ServedModel* model = nullptr;  // loaded; outlives the request
  RuntimeMetrics* metrics = nullptr;
  const std::atomic<bool>* stopping = nullptr;  // server shutting down: cancel and end
  CancelRegistry* cancels = nullptr;            // generations by x-kinfer-request-id (POST /cancel)
};

HttpResponse HandleGeneration(ApiKind kind, const HttpRequest& request,
                              const GenerationContext& ctx);

// POST /v1/responses: OpenAI's Responses API, served by HandleGeneration as a chat request
// (responses_api.h translates both ways). Same threading.
HttpResponse HandleResponses(const HttpRequest& request, const GenerationContext& ctx);

}  // namespace kinfer
