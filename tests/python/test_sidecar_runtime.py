"""The embedded default's whole stack: the official openai client -> kinfer-sidecar -> the real
kinfer-runtime serving the bundled model."""
import openai
import pytest
import requests

from sidecar_harness import Sidecar

PROMPT = [{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def stack(server):
    sc = Sidecar(server.url)
    yield sc
    sc.stop()


@pytest.fixture(scope="module")
def sidecar_client(stack):
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="sk-test", max_retries=0)


def test_openai_client_through_sidecar(stack, sidecar_client, server):
    r = sidecar_client.chat.completions.create(model=server.model, messages=PROMPT,
                                               temperature=0, max_tokens=32)
    assert "Paris" in r.choices[0].message.content
    # Served again from the sidecar's cache: the same deterministic answer, marked as a hit.
    raw = sidecar_client.chat.completions.with_raw_response.create(
        model=server.model, messages=PROMPT, temperature=0, max_tokens=32)
    assert raw.headers["x-kinfer-cache"] == "hit"
    assert raw.parse().choices[0].message.content == r.choices[0].message.content
    assert raw.parse().id != r.id and raw.parse().id.startswith("chatcmpl-")


def test_openai_streaming_through_sidecar(stack, sidecar_client, server):
    stream = sidecar_client.chat.completions.create(model=server.model, messages=PROMPT,
                                                    temperature=0, max_tokens=24, stream=True)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "Paris" in text
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    stats = requests.get(stack.url + "/stats", timeout=5).json()
    assert stats["ttft_seconds"]["count"] >= 1 and stats["ttft_seconds"]["p99"] > 0


def test_runtime_errors_pass_through(stack, sidecar_client):
    with pytest.raises(openai.NotFoundError):
        sidecar_client.chat.completions.create(model="no-such-model", messages=PROMPT,
                                               max_tokens=4)
    assert requests.get(stack.url + "/ready", timeout=5).status_code == 200


def test_n_choices_through_sidecar(stack, sidecar_client, server):
    # The sidecar passes n through: both choices, whole and streamed, each with its index.
    args = dict(model=server.model, messages=PROMPT, temperature=0.8, seed=5, max_tokens=8, n=2)
    whole = sidecar_client.chat.completions.create(**args)
    assert [c.index for c in whole.choices] == [0, 1]
    streamed = {}
    for chunk in sidecar_client.chat.completions.create(stream=True, **args):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + (c.delta.content or "")
    assert streamed == {c.index: c.message.content for c in whole.choices}


def test_scoring_a_prompt_through_sidecar(stack, sidecar_client, server):
    # max_tokens 0 with echo (the legacy scoring request) passes the sidecar's checks and policies.
    r = sidecar_client.completions.create(model=server.model, prompt="The capital of France is",
                                          max_tokens=0, echo=True, logprobs=1, temperature=0)
    assert r.choices[0].text == "The capital of France is"
    assert r.usage.completion_tokens == 0
    assert r.choices[0].logprobs.token_logprobs[0] is None
    assert all(x <= 0 for x in r.choices[0].logprobs.token_logprobs[1:])


def test_structured_output_through_sidecar(stack, sidecar_client, client, server):
    # The sidecar forwards response_format as it is: the runtime holds the answer to the schema,
    # and a schema it refuses is the runtime's 400, passed through.
    import json
    schema = {"type": "object", "properties": {"capital": {"type": "string"}},
              "required": ["capital"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}}
    args = dict(model=server.model, messages=PROMPT, temperature=0, max_tokens=40,
                response_format=fmt)
    r = sidecar_client.chat.completions.create(**args)
    obj = json.loads(r.choices[0].message.content)
    assert list(obj) == ["capital"] and isinstance(obj["capital"], str)
    assert r.choices[0].message.content == client.chat.completions.create(
        **args).choices[0].message.content  # the runtime's own answer
    bad = {"type": "json_schema", "json_schema": {"name": "c", "schema": {"type": "integer",
                                                                         "multipleOf": 2}}}
    with pytest.raises(openai.BadRequestError) as e:
        sidecar_client.chat.completions.create(model=server.model, messages=PROMPT,
                                               max_tokens=4, response_format=bad)
    assert "'multipleOf' is not supported" in e.value.body["message"]


def test_tool_calls_through_sidecar_and_its_cache(stack, sidecar_client, server):
    # A deterministic tool-call answer is cached like any other; a hit gets tool-call ids of its
    # own (clients match tool results to calls by id).
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    args = dict(model=server.model, temperature=0, max_tokens=60, tools=tools,
                tool_choice="required",
                messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    first = sidecar_client.chat.completions.create(**args).choices[0]
    assert first.finish_reason == "tool_calls"
    raw = sidecar_client.chat.completions.with_raw_response.create(**args)
    assert raw.headers["x-kinfer-cache"] == "hit"
    again = raw.parse().choices[0]
    assert [c.function for c in again.message.tool_calls] == \
        [c.function for c in first.message.tool_calls]
    assert {c.id for c in again.message.tool_calls}.isdisjoint(
        {c.id for c in first.message.tool_calls})


def test_responses_api_through_sidecar_policies_and_cache(stack, sidecar_client, server):
    # /v1/responses takes the policy path, as chat does: a deterministic Response is cached (a hit
    # gets ids of its own), a stream is relayed with its time to first token, and it is counted.
    def generation_requests():
        text = requests.get(stack.url + "/metrics", timeout=5).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("kinfer_sidecar_requests_total{"))
    before = generation_requests()
    args = dict(model=server.model, instructions="You are a helpful assistant.", temperature=0,
                input="What is the capital of France?", max_output_tokens=32)
    first = sidecar_client.responses.create(**args)
    assert "Paris" in first.output_text
    raw = sidecar_client.responses.with_raw_response.create(**args)
    assert raw.headers["x-kinfer-cache"] == "hit"
    again = raw.parse()
    assert again.output_text == first.output_text
    assert again.id != first.id and again.id.startswith("resp_")
    assert again.output[0].id != first.output[0].id
    with sidecar_client.responses.stream(**{**args, "input": "Name a colour."}) as s:
        deltas = [ev.delta for ev in s if ev.type == "response.output_text.delta"]
        final = s.get_final_response()
    assert "".join(deltas) == final.output_text and final.status in ("completed", "incomplete")
    assert generation_requests() >= before + 3
