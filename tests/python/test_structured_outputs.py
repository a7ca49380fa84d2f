"""Structured outputs against the real kinfer-runtime and model, with the official openai client:
response_format json_schema (and the client's pydantic `parse`), vLLM's guided_json and
guided_choice. Outputs are checked with the `jsonschema` validator, not with kinfer's own code."""
import datetime
import json
import uuid
from typing import List, Literal, Optional

import jsonschema
import openai
import pydantic
import pytest

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer"},
        "email": {"type": ["string", "null"]},
        "hobbies": {"type": "array", "items": {"enum": ["chess", "music", "hiking"]},
                    "maxItems": 3},
        "height_m": {"type": "number"},
    },
    "required": ["name", "age", "hobbies"],
    "additionalProperties": False,
}
TREE = {
    "$defs": {"Node": {"type": "object", "properties": {
        "label": {"type": "string", "maxLength": 24},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 2}},
        "required": ["label", "children"], "additionalProperties": False}},
    "$ref": "#/$defs/Node",
}
CHOICE = {"anyOf": [{"type": "object", "properties": {"answer": {"const": "yes"},
                                                      "why": {"type": "string"}},
                     "required": ["answer", "why"]},
                    {"type": "array", "items": {"type": "boolean"}, "minItems": 2}]}


def _json_schema(name, schema):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.mark.parametrize("name,schema", [("person", PERSON), ("tree", TREE), ("choice", CHOICE)])
def test_hot_sampling_only_ever_writes_what_the_schema_accepts(client, server, name, schema):
    # A prompt that asks for nothing in particular, sampled hot: whatever the model ends (finish
    # "stop") validates; an output cut by max_tokens is not claimed to.
    ended = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model=server.model, messages=[SYSTEM, {"role": "user", "content": "Tell me about you."}],
            temperature=0.8, seed=seed, max_tokens=200, response_format=_json_schema(name, schema))
        choice = r.choices[0]
        if choice.finish_reason == "stop":
            ended += 1
            jsonschema.validate(json.loads(choice.message.content), schema)
        else:
            assert choice.finish_reason == "length"
    assert ended >= 1, name


def test_greedy_answer_follows_the_schemas_key_order_and_streams_the_same(client, server):
    # "country" first, although "capital" would sort first: the schema's order is kept.
    schema = {"type": "object", "properties": {"country": {"type": "string"},
                                               "capital": {"type": "string"}},
              "required": ["country", "capital"], "additionalProperties": False}
    args = dict(model=server.model, temperature=0, max_tokens=60,
                messages=[SYSTEM, {"role": "user", "content": "What is the capital of France? "
                                                              "Answer in JSON."}],
                response_format=_json_schema("capital", schema))
    whole = client.chat.completions.create(**args)
    assert whole.choices[0].finish_reason == "stop"
    text = whole.choices[0].message.content
    obj = json.loads(text)
    jsonschema.validate(obj, schema)
    assert list(obj) == ["country", "capital"]
    assert obj["capital"] == "Paris", obj
    streamed = "".join(c.choices[0].delta.content or ""
                       for c in client.chat.completions.create(stream=True, **args) if c.choices)
    assert streamed == text
    # Speculative drafts are verified under the same constraint: the same greedy text.
    spec = client.chat.completions.create(extra_body={"speculative": True}, **args)
    assert spec.choices[0].message.content == text


class Hobby(pydantic.BaseModel):
    name: str
    hours_per_week: int


class Profile(pydantic.BaseModel):
    name: str
    kind: Literal["human", "robot"]
    hobbies: List[Hobby] = pydantic.Field(max_length=2)  # maxItems: a 135M model loops on lists
    motto: Optional[str]


def test_openai_clients_pydantic_parse(client, server):
    # The client turns the model class into a strict json_schema ($defs, $ref, anyOf with null,
    # enum from Literal, maxItems) and parses the answer back into it; it raises
    # LengthFinishReasonError for an answer cut by max_tokens.
    parsed = 0
    for seed in range(3):
        try:
            r = client.chat.completions.parse(
                model=server.model, temperature=0.8, seed=seed, max_tokens=250,
                messages=[SYSTEM, {"role": "user", "content": "Describe a robot with two hobbies."}],
                response_format=Profile)
        except openai.LengthFinishReasonError:
            continue
        profile = r.choices[0].message.parsed
        assert isinstance(profile, Profile)
        assert profile.kind in ("human", "robot") and len(profile.hobbies) <= 2
        parsed += 1
    assert parsed >= 1


class Booking(pydantic.BaseModel):
    starts: datetime.datetime
    day: datetime.date
    booking_id: uuid.UUID
    length: datetime.timedelta


def test_pydantic_parse_of_datetime_date_uuid_and_timedelta_fields(client, server):
    # pydantic sends these as {"type": "string", "format": "date-time" | "date" | "uuid" |
    # "duration"}; held to the formats, a hot sample always parses back (before, "stop" answers
    # could hold any string and parse raised a ValidationError).
    parsed = 0
    for seed in range(4):
        try:
            r = client.chat.completions.parse(
                model=server.model, temperature=1.0, seed=seed, max_tokens=200,
                messages=[SYSTEM, {"role": "user", "content": "Book a two-hour meeting room."}],
                response_format=Booking)
        except openai.LengthFinishReasonError:
            continue
        assert r.choices[0].finish_reason == "stop"
        booking = r.choices[0].message.parsed
        assert isinstance(booking, Booking), r.choices[0].message.content
        assert booking.starts.tzinfo is not None  # RFC 3339: the offset is required
        parsed += 1
    assert parsed >= 1


def test_guided_choice_and_guided_json(client, server):
    messages = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    # Greedy, the model continues this prompt with " Paris." unconstrained; held to the choices it
    # writes " Paris" and ends.
    r = client.completions.create(model=server.model, prompt="The capital of France is",
                                  temperature=0, max_tokens=10,
                                  extra_body={"guided_choice": [" London", " Paris", " Berlin"]})
    assert r.choices[0].text == " Paris"
    assert r.choices[0].finish_reason == "stop"
    for seed in range(4):  # sampled: always one of them, whole
        c = client.chat.completions.create(
            model=server.model, messages=messages, temperature=1.0, seed=seed, max_tokens=10,
            extra_body={"guided_choice": ["London", "Paris", "Berlin"]})
        assert c.choices[0].message.content in ("London", "Paris", "Berlin")
        assert c.choices[0].finish_reason == "stop"
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}
    for seed in range(3):
        c = client.completions.create(model=server.model, prompt="Three numbers:", seed=seed,
                                      temperature=1.0, max_tokens=60,
                                      extra_body={"guided_json": schema})
        if c.choices[0].finish_reason == "stop":
            jsonschema.validate(json.loads(c.choices[0].text), schema)


def test_patterns_and_guided_regex_hold_the_text(client, server):
    # JSON Schema's pattern on a string property, checked by jsonschema (which applies it).
    schema = {"type": "object", "properties": {
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "date": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"},
        "rating": {"type": "integer", "minimum": 1, "maximum": 5},
        "offset": {"type": "integer", "exclusiveMinimum": -12, "exclusiveMaximum": 15}},
        "required": ["zip", "date", "rating", "offset"], "additionalProperties": False}
    ended = 0
    for seed in range(3):
        r = client.chat.completions.create(
            model=server.model, seed=seed, temperature=1.0, max_tokens=60,
            messages=[SYSTEM, {"role": "user", "content": "Give a zip code and a date."}],
            response_format=_json_schema("zipdate", schema))
        if r.choices[0].finish_reason == "stop":
            ended += 1
            jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    assert ended >= 1
    # vLLM's guided_regex (and structured_outputs.regex): the whole output matches.
    import re
    for extra in ({"guided_regex": r"(Yes|No), [a-z ]{3,20}\."},
                  {"structured_outputs": {"regex": r"(Yes|No), [a-z ]{3,20}\."}}):
        for seed in range(2):
            c = client.chat.completions.create(
                model=server.model, seed=seed, temperature=1.0, max_tokens=30, extra_body=extra,
                messages=[SYSTEM, {"role": "user", "content": "Is Paris in France?"}])
            if c.choices[0].finish_reason == "stop":
                assert re.fullmatch(r"(Yes|No), [a-z ]{3,20}\.", c.choices[0].message.content)


def test_a_schema_it_cannot_enforce_is_a_400_naming_the_keyword(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "x"}], max_tokens=5,
            response_format=_json_schema("zip", {"type": "object", "properties": {
                "zip": {"type": "integer", "multipleOf": 5}}}))
    err = e.value.body
    assert err["param"] == "response_format.json_schema.schema"
    assert "'multipleOf' is not supported (at #/properties/zip)" in err["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "x"}], max_tokens=5,
            response_format={"type": "json_schema", "json_schema": {"name": "n"}})
    assert e.value.body["param"] == "response_format.json_schema.schema"
