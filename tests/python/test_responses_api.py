"""OpenAI's Responses API (POST /v1/responses) against the real kinfer-runtime and model, with the
official openai client: client.responses.create, its stream helper (which checks the event order
and item identities as it accumulates), parse with a pydantic model, function tools and their
results carried back, and the 400s for what a stateless server cannot do."""
import json

import jsonschema
import openai
import pydantic
import pytest
import requests

from conftest import metric_value

SYSTEM = "You are a helpful assistant."
TOOLS = [{"type": "function", "name": "get_weather", "description": "Get the current weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]


def test_text_is_the_chat_answer(client, server):
    # Greedy, a Response's text and usage are the chat endpoint's for the same conversation.
    r = client.responses.create(model=server.model, instructions=SYSTEM, temperature=0,
                                input="What is the capital of France?", max_output_tokens=32)
    chat = client.chat.completions.create(
        model=server.model, temperature=0, max_tokens=32,
        messages=[{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": "What is the capital of France?"}])
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status == "completed" and r.model == server.model
    assert r.output_text == chat.choices[0].message.content
    assert "Paris" in r.output_text
    assert [o.type for o in r.output] == ["message"]
    assert r.output[0].role == "assistant" and r.output[0].status == "completed"
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.instructions == SYSTEM and r.store is False


def test_streamed_text_adds_up_to_the_whole_response(client, server):
    args = dict(model=server.model, instructions=SYSTEM, temperature=0,
                input="Tell me about the sea in two sentences.", max_output_tokens=40)
    whole = client.responses.create(**args)
    deltas, types = [], []
    with client.responses.stream(**args) as stream:
        for ev in stream:
            types.append(ev.type)
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        final = stream.get_final_response()
    assert types[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert len(deltas) >= 5 and "".join(deltas) == whole.output_text
    assert final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_a_cut_answer_is_incomplete(client, server):
    r = client.responses.create(model=server.model, instructions=SYSTEM, temperature=0,
                                input="Tell me a long story.", max_output_tokens=5)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5
    types = [ev.type for ev in client.responses.create(
        model=server.model, instructions=SYSTEM, temperature=0, input="Tell me a long story.",
        max_output_tokens=5, stream=True)]
    assert types[-1] == "response.incomplete"


def test_function_calls_and_their_results(client, server):
    args = dict(model=server.model, instructions=SYSTEM, temperature=0, tools=TOOLS,
                input="What is the weather like in Paris today?", tool_choice="required",
                parallel_tool_calls=False, max_output_tokens=80)
    r = client.responses.create(**args)
    assert [o.type for o in r.output] == ["function_call"]
    call = r.output[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    jsonschema.validate(json.loads(call.arguments), TOOLS[0]["parameters"])
    assert json.loads(call.arguments)["city"] == "Paris"
    # Streamed: the call's arguments in pieces that add up to the whole response's.
    pieces = []
    with client.responses.stream(**args) as stream:
        for ev in stream:
            if ev.type == "response.function_call_arguments.delta":
                pieces.append(ev.delta)
        final = stream.get_final_response()
    assert len(pieces) >= 3 and "".join(pieces) == call.arguments
    assert final.output[0].type == "function_call" and final.output[0].arguments == call.arguments
    # The call and its result go back in as items; the model then answers in text.
    follow = client.responses.create(
        model=server.model, instructions=SYSTEM, temperature=0, tools=TOOLS, tool_choice="none",
        max_output_tokens=40,
        input=[{"role": "user", "content": "What is the weather like in Paris today?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id,
                "output": "22 degrees celsius and sunny"}])
    assert [o.type for o in follow.output] == ["message"] and follow.output_text


def test_logprobs_come_with_the_output_text(client, server):
    # include message.output_text.logprobs with top_logprobs: the chat endpoint's numbers, per
    # token, whole and streamed.
    args = dict(model=server.model, instructions=SYSTEM, temperature=0,
                input="What is the capital of France?", max_output_tokens=12,
                include=["message.output_text.logprobs"], top_logprobs=2)
    r = client.responses.create(**args)
    lps = r.output[0].content[0].logprobs
    chat = client.chat.completions.create(
        model=server.model, temperature=0, max_tokens=12, logprobs=True, top_logprobs=2,
        messages=[{"role": "system", "content": SYSTEM},
                  {"role": "user", "content": "What is the capital of France?"}])
    want = chat.choices[0].logprobs.content
    assert [x.token for x in lps] == [x.token for x in want]
    assert all(abs(a.logprob - b.logprob) < 1e-6 for a, b in zip(lps, want))
    assert all(len(x.top_logprobs) == 2 for x in lps)
    events = list(client.responses.create(stream=True, **args))
    streamed = [lp for ev in events if ev.type == "response.output_text.delta"
                for lp in ev.logprobs]
    done = [ev for ev in events if ev.type == "response.output_text.done"][0].logprobs
    # Each delta carries its text's tokens; the done event has them all, the end-of-turn token's
    # too (it gives no text), as the whole response does.
    assert [x.token for x in done] == [x.token for x in lps]
    assert [x.token for x in streamed] == [x.token for x in lps][:len(streamed)]
    assert len(streamed) >= len(lps) - 1


class City(pydantic.BaseModel):
    country: str
    capital: str


def test_text_format_json_schema_parses_into_the_model(client, server):
    r = client.responses.parse(model=server.model, instructions=SYSTEM, temperature=0,
                               input="What is the capital of France?", text_format=City,
                               max_output_tokens=60)
    assert r.status == "completed"
    assert isinstance(r.output_parsed, City)
    assert json.loads(r.output_text) == r.output_parsed.model_dump()


def test_what_a_stateless_server_cannot_do_is_a_400_naming_the_field(client, server):
    cases = [({"previous_response_id": "resp_123"}, "previous_response_id"),
             ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
             ({"input": [{"role": "user", "content": [{"type": "input_image",
                                                         "image_url": "https://x/y.png"}]}]},
              "input[0].content[0].type"),
             ({"max_output_tokens": 0}, "max_output_tokens"),
             ({"include": ["reasoning.encrypted_content"]}, "include"),
             ({"include": ["message.output_text.logprobs"], "top_logprobs": 21}, "top_logprobs"),
             ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
             ({"max_output_tokens": 100000}, "max_output_tokens"),
             ({"reasoning": {"effort": "high"}}, "reasoning"),
             ({"metadata": [1]}, "metadata"),
             ({"metadata": {"k": 5}}, "metadata"),
             ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata")]
    for extra, param in cases:
        body = {"model": server.model, "input": "Hi", **extra}
        resp = requests.post(server.url + "/v1/responses", json=body, timeout=30)
        assert resp.status_code == 400, (extra, resp.text)
        err = resp.json()["error"]
        assert err["param"] == param, (extra, err)
        assert err["type"] == "invalid_request_error" and err["message"]
        # The message names the Responses field too, never the chat one it was translated to.
        assert "max_completion_tokens" not in err["message"] and "'max_tokens'" not in err["message"], err
        if param == "max_output_tokens":
            assert "'max_output_tokens'" in err["message"], err
            assert "messages" not in err["message"], err  # the prompt is the input here
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="Hi")
    # Nothing is stored, so nothing can be retrieved or deleted: a 404 that says so.
    for call in (lambda: client.responses.retrieve("resp_123"),
                 lambda: client.responses.delete("resp_123")):
        with pytest.raises(openai.NotFoundError) as e:
            call()
        assert "stores no responses" in e.value.body["message"]


def test_a_reasoning_object_that_asks_for_no_reasoning_is_accepted(client, server):
    for reasoning in ({}, {"effort": None}, {"effort": "none"}, {"summary": "auto"},
                      {"effort": None, "summary": None}):
        r = client.responses.create(model=server.model, input="Hi", max_output_tokens=2,
                                    reasoning=reasoning)
        assert r.status in ("completed", "incomplete"), reasoning


def test_responses_are_counted_under_their_route(client, server):
    before = metric_value(requests.get(server.url + "/metrics", timeout=30).text,
                          "kinfer_runtime_http_requests_total", 'route="responses",code="200"')
    client.responses.create(model=server.model, input="Hi", max_output_tokens=2)
    after = metric_value(requests.get(server.url + "/metrics", timeout=30).text,
                         "kinfer_runtime_http_requests_total", 'route="responses",code="200"')
    assert after == before + 1
