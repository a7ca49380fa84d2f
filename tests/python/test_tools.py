"""Function calling (tools, tool_choice, parallel_tool_calls) against the real kinfer-runtime and
model, with the official openai client. Calls are checked against each tool's own parameters
schema with the `jsonschema` validator."""
import json

import jsonschema
import openai
import pytest

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string"},
                          "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city"]}
TIME = {"type": "object", "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather",
                                      "description": "Get the current weather in a city",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time",
                                      "description": "Get the current time in a time zone",
                                      "parameters": TIME}},
]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
ASK = [SYSTEM, {"role": "user", "content": "What is the weather like in Paris today?"}]


def check_calls(message, allowed=SCHEMAS):
    assert message.content is None
    assert message.tool_calls
    for call in message.tool_calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in allowed
        jsonschema.validate(json.loads(call.function.arguments), allowed[call.function.name])


def test_required_tool_choice_calls_a_tool_with_valid_arguments(client, server):
    r = client.chat.completions.create(model=server.model, messages=ASK, tools=TOOLS,
                                       tool_choice="required", temperature=0, max_tokens=120)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    check_calls(choice.message)
    # Greedy, the bundled model asks for the weather where the user asked.
    first = choice.message.tool_calls[0]
    assert first.function.name == "get_weather"
    assert json.loads(first.function.arguments)["city"] == "Paris"
    # One call at a time when parallel_tool_calls is false.
    one = client.chat.completions.create(model=server.model, messages=ASK, tools=TOOLS,
                                         tool_choice="required", parallel_tool_calls=False,
                                         temperature=0, max_tokens=120)
    assert one.choices[0].finish_reason == "tool_calls"
    assert len(one.choices[0].message.tool_calls) == 1


def test_stop_strings_do_not_cut_a_call(client, server):
    # A stop string matched inside the tool wrapper cut the call mid-way: the message's content
    # was the wrapper's raw text ('{') with no call, and a stream's arguments were not JSON.
    stops = ["\n", "}", '"', "Paris"]
    r = client.chat.completions.create(model=server.model, messages=ASK, tools=TOOLS,
                                       tool_choice="required", temperature=0, max_tokens=120,
                                       stop=stops)
    assert r.choices[0].finish_reason == "tool_calls"
    check_calls(r.choices[0].message)
    args = ""
    finish = None
    for chunk in client.chat.completions.create(model=server.model, messages=ASK, tools=TOOLS,
                                                tool_choice="required", temperature=0,
                                                max_tokens=120, stop=stops, stream=True):
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                if call.index == 0:
                    args += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert json.loads(args) == json.loads(r.choices[0].message.tool_calls[0].function.arguments)


def test_a_stream_of_calls_only_has_no_content(client, server):
    # "required" (or a named function) can only answer with calls: the role chunk's content is
    # null, as OpenAI's, so the stream helpers accumulate content None, as the whole response has.
    with client.chat.completions.stream(model=server.model, messages=ASK, tools=TOOLS,
                                        tool_choice="required", temperature=0,
                                        max_tokens=120) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    assert "content.delta" not in kinds
    assert final.choices[0].message.content is None
    check_calls(final.choices[0].message)


def test_a_named_tool_choice_calls_that_tool_only(client, server):
    for seed in range(3):
        r = client.chat.completions.create(
            model=server.model, messages=ASK, tools=TOOLS, seed=seed, temperature=1.0,
            max_tokens=120, tool_choice={"type": "function", "function": {"name": "get_time"}})
        choice = r.choices[0]
        if choice.finish_reason == "length":
            continue
        assert choice.finish_reason == "tool_calls"
        check_calls(choice.message, {"get_time": TIME})
        assert len(choice.message.tool_calls) == 1


def test_auto_answers_or_calls_and_either_is_well_formed(client, server):
    # tool_choice defaults to "auto" with tools: sampled hot, every finished answer is either text
    # (finish "stop", no calls) or calls that validate (finish "tool_calls").
    finished = 0
    for seed in range(4):
        r = client.chat.completions.create(model=server.model, messages=ASK, tools=TOOLS,
                                           seed=seed, temperature=1.0, max_tokens=150)
        choice = r.choices[0]
        if choice.finish_reason == "tool_calls":
            check_calls(choice.message)
            finished += 1
        elif choice.finish_reason == "stop":
            assert choice.message.tool_calls is None and isinstance(choice.message.content, str)
            assert not choice.message.content.lstrip().startswith('{"response"')
            finished += 1
    assert finished >= 2


def test_streamed_calls_are_the_whole_responses_calls(client, server):
    args = dict(model=server.model, messages=ASK, tools=TOOLS, tool_choice="required",
                temperature=0, max_tokens=120)
    whole = client.chat.completions.create(**args).choices[0].message.tool_calls
    calls, finish, pieces = {}, [], {}
    for chunk in client.chat.completions.create(stream=True, **args):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                if tc.index not in calls:
                    # A call's first chunk: its id, type and name, before any argument.
                    assert tc.id.startswith("call_") and tc.type == "function"
                    assert tc.function.name and tc.function.arguments == ""
                    calls[tc.index] = {"name": tc.function.name, "arguments": ""}
                    pieces[tc.index] = 0
                else:
                    # Then its arguments, piece by piece (no id or name again).
                    assert tc.id is None and tc.function.name is None
                    calls[tc.index]["arguments"] += tc.function.arguments
                    pieces[tc.index] += 1
            if c.finish_reason:
                finish.append(c.finish_reason)
    assert finish == ["tool_calls"]
    assert [calls[k] for k in sorted(calls)] == [
        {"name": c.function.name, "arguments": c.function.arguments} for c in whole]
    # Arguments are streamed as they are generated, not in one chunk at the end.
    assert all(n >= 3 for n in pieces.values()), pieces


def test_a_call_cut_by_max_tokens_is_the_same_streamed_or_not(client, server):
    # As OpenAI gives a call that max_tokens cut: the call as far as it got, finish "length";
    # the whole response and the stream agree (the whole one was the raw wrapper text before).
    tools = [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {
            "c": {"type": "string", "maxLength": 3}}, "required": ["c"]}}}]
    args = dict(model=server.model, messages=[{"role": "user", "content": "Call f with c=ab"}],
                tools=tools, tool_choice={"type": "function", "function": {"name": "f"}},
                temperature=0)
    for max_tokens in (12, 20, 32):
        whole = client.chat.completions.create(max_tokens=max_tokens, **args).choices[0]
        calls, content, finish = {}, "", None
        for chunk in client.chat.completions.create(stream=True, max_tokens=max_tokens, **args):
            for c in chunk.choices:
                content += c.delta.content or ""
                for tc in c.delta.tool_calls or []:
                    call = calls.setdefault(tc.index, {"name": "", "arguments": ""})
                    call["name"] += tc.function.name or ""
                    call["arguments"] += tc.function.arguments or ""
                finish = c.finish_reason or finish
        assert whole.finish_reason == finish == "length", (max_tokens, whole)
        got = [{"name": c.function.name, "arguments": c.function.arguments}
               for c in whole.message.tool_calls or []]
        assert got == [calls[k] for k in sorted(calls)], (max_tokens, got, calls)
        assert (whole.message.content or "") == content, (max_tokens, whole.message.content)
    assert got and got[0]["name"] == "f"  # at 32 tokens the call has started


def test_a_direct_answer_streams_its_text_as_it_comes(client, server):
    # With tools and tool_choice "auto", greedy, the bundled model answers this one in text: the
    # text arrives over several chunks (not held until the end) and equals the whole answer's.
    args = dict(model=server.model, tools=TOOLS, temperature=0, max_tokens=80,
                messages=[SYSTEM, {"role": "user", "content": "Say hello to me."}])
    whole = client.chat.completions.create(**args).choices[0]
    assert whole.finish_reason == "stop" and whole.message.tool_calls is None
    texts, finish = [], []
    for chunk in client.chat.completions.create(stream=True, **args):
        for c in chunk.choices:
            assert not c.delta.tool_calls
            if c.delta.content:
                texts.append(c.delta.content)
            if c.finish_reason:
                finish.append(c.finish_reason)
    assert finish == ["stop"]
    assert "".join(texts) == whole.message.content
    assert len(texts) >= 5, texts
    assert not any('"response"' in t for t in texts)


GREETING = {"type": "object",
            "properties": {"greeting": {"type": "string"},
                           "language": {"enum": ["English", "French"]}},
            "required": ["greeting", "language"], "additionalProperties": False}


def test_response_format_beside_tools_shapes_a_direct_answer(client, server):
    # tool_choice "auto" with a response_format: the model calls a tool or answers with JSON
    # under the schema (greedy, the bundled model answers this one), whole and streamed alike.
    args = dict(model=server.model, tools=TOOLS, temperature=0, max_tokens=80,
                messages=[SYSTEM, {"role": "user", "content": "Say hello to me."}],
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "greeting", "schema": GREETING}})
    whole = client.chat.completions.create(**args).choices[0]
    assert whole.finish_reason == "stop" and whole.message.tool_calls is None
    jsonschema.validate(json.loads(whole.message.content), GREETING)
    texts = [c.delta.content for chunk in client.chat.completions.create(stream=True, **args)
             for c in chunk.choices if c.delta.content]
    assert "".join(texts) == whole.message.content and len(texts) >= 3
    # json_object: any JSON object.
    obj = client.chat.completions.create(
        model=server.model, tools=TOOLS, temperature=0, max_tokens=80,
        messages=[SYSTEM, {"role": "user", "content": "What is the capital of France?"}],
        response_format={"type": "json_object"}).choices[0]
    assert obj.finish_reason == "stop"
    assert isinstance(json.loads(obj.message.content), dict)
    # "required" still calls a tool: the format is for direct answers only.
    call = client.chat.completions.create(tool_choice="required", **args).choices[0]
    assert call.finish_reason == "tool_calls"
    check_calls(call.message)


def test_streamed_logprobs_with_tools_cover_every_token(client, server):
    # Each generated token's logprob rides on one chunk: as many as the usage counts.
    args = dict(model=server.model, messages=ASK, tools=TOOLS, tool_choice="required",
                temperature=0, max_tokens=120, logprobs=True, top_logprobs=2)
    n, usage = 0, None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                **args):
        for c in chunk.choices:
            if c.logprobs and c.logprobs.content:
                n += len(c.logprobs.content)
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None and n == usage.completion_tokens


def test_a_conversation_carries_the_tool_result_back(client, server):
    # The assistant's calls and the tool's result go back in; the model then answers.
    first = client.chat.completions.create(model=server.model, messages=ASK, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=False,
                                           temperature=0, max_tokens=120).choices[0].message
    call = first.tool_calls[0]
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "22 degrees celsius and sunny"}]
    r = client.chat.completions.create(model=server.model, messages=messages, tools=TOOLS,
                                       tool_choice="none", temperature=0, max_tokens=40)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content


def test_bad_tools_are_400s_naming_the_field(client, server):
    cases = [
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
         "tool_choice"),
        (dict(tools=[{"type": "function", "function": {"name": "bad name"}}]),
         "tools[0].function.name"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 2}}}}}]),
         "tools[0].function.parameters"),
        (dict(tools=TOOLS, extra_body={"guided_regex": "a+"}), "tools"),
        (dict(tools=TOOLS, response_format={"type": "json_schema", "json_schema": {
            "name": "n", "schema": {"type": "number", "multipleOf": 2}}}),
         "response_format.json_schema.schema"),
    ]
    for extra, param in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=server.model, messages=ASK, max_tokens=5, **extra)
        assert e.value.body["param"] == param, (extra, e.value.body)
