"""The official openai client against kinfer-runtime: chat, completions, streaming, models."""
import pytest
import requests

# With no system message, SmolLM2's chat template inserts its default one ("You are a helpful AI
# assistant named SmolLM, ...") and this 135M model then answers "L'Étoile, la Cité, ..." under
# greedy decoding -- llama.cpp (llama-cpp-python 0.3.36) gives the same 37 prompt tokens and the
# same text. With a plain system message it answers "The capital of France is Paris."
PROMPT = [{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "What is the capital of France?"}]


def test_models_list(client, server):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == [server.model]
    assert client.models.retrieve(server.model).id == server.model


def test_chat_greedy_answers_paris(client, server):
    r = client.chat.completions.create(model=server.model, messages=PROMPT, temperature=0,
                                       max_tokens=32)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == server.model
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert "Paris" in choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5
    assert 0 < r.usage.completion_tokens <= 32
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_streaming_matches_non_streaming(client, server):
    whole = client.chat.completions.create(model=server.model, messages=PROMPT, temperature=0,
                                           max_tokens=24)
    stream = client.chat.completions.create(model=server.model, messages=PROMPT, temperature=0,
                                            max_tokens=24, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [whole.choices[0].finish_reason]
    assert text == whole.choices[0].message.content
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens
    assert len(chunks) >= 4  # role chunk, several deltas, finish chunk, usage chunk


def test_completion_and_streaming_completion(client, server):
    r = client.completions.create(model=server.model, prompt="The capital of France is",
                                  temperature=0, max_tokens=8)
    assert r.object == "text_completion"
    assert r.id.startswith("cmpl-")
    assert len(r.choices[0].text) > 0
    assert r.usage.completion_tokens <= 8
    parts = list(client.completions.create(model=server.model, prompt="The capital of France is",
                                           temperature=0, max_tokens=8, stream=True))
    text = "".join(p.choices[0].text for p in parts if p.choices)
    assert text == r.choices[0].text
    assert parts[-1].choices[0].finish_reason == r.choices[0].finish_reason


def test_completion_with_token_ids_equals_text_prompt(client, server):
    ids = requests.post(server.url + "/tokenize",
                        json={"content": "Once upon a time", "add_special": True}).json()["tokens"]
    a = client.completions.create(model=server.model, prompt=ids, temperature=0, max_tokens=6)
    b = client.completions.create(model=server.model, prompt="Once upon a time", temperature=0,
                                  max_tokens=6)
    assert a.choices[0].text == b.choices[0].text
    assert a.usage.prompt_tokens == b.usage.prompt_tokens == len(ids)


SEEDED = dict(messages=[{"role": "user", "content": "Tell me a story."}], temperature=1.0,
              max_tokens=16, seed=1234)


def test_seed_makes_sampling_deterministic(client, server):
    # The same seeded temperature-1 request gives the same text whatever ran before it: after an
    # unrelated prompt, twice in a row, and after another seed.
    client.completions.create(model=server.model, prompt="Unrelated words.", max_tokens=1)
    texts = [client.chat.completions.create(model=server.model, **SEEDED).choices[0].message.content
             for _ in range(2)]
    other = client.chat.completions.create(model=server.model, **{**SEEDED, "seed": 99})
    texts.append(client.chat.completions.create(model=server.model, **SEEDED)
                 .choices[0].message.content)
    assert texts[0] == texts[1] == texts[2]
    assert len(texts[0]) > 0
    assert other.choices[0].message.content != texts[0]


def test_stop_sequence_ends_generation(client, server):
    r = client.completions.create(model=server.model, prompt="1, 2, 3, 4, 5, 6,", temperature=0,
                                  max_tokens=30, stop=[" 9"])
    assert " 9" not in r.choices[0].text
    assert r.choices[0].finish_reason == "stop"


def test_chat_logprobs_shape(client, server):
    r = client.chat.completions.create(model=server.model, messages=PROMPT, temperature=0,
                                       max_tokens=4, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for tok in content:
        assert tok.logprob <= 0
        assert len(tok.top_logprobs) == 2
        assert tok.top_logprobs[0].logprob >= tok.top_logprobs[1].logprob
    # Greedy: the chosen token is the most likely one.
    assert content[0].token == content[0].top_logprobs[0].token


def test_completion_logprobs_shape(client, server):
    r = client.completions.create(model=server.model, prompt="Hello", temperature=0, max_tokens=3,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0


def token_id(server, text):
    """The id of `text`'s first token (the bundled model's tokenizer, through /tokenize)."""
    r = requests.post(server.url + "/tokenize", json={"content": text, "with_pieces": True},
                      timeout=30)
    r.raise_for_status()
    first = r.json()["tokens"][0]
    return first["id"], first["piece"]


def test_logit_bias_bans_the_greedy_token_and_forces_another(client, server):
    # -100 on the greedy first token hands the step to the runner-up the logprobs named.
    plain = client.chat.completions.create(model=server.model, messages=PROMPT, temperature=0,
                                           max_tokens=1, logprobs=True, top_logprobs=2)
    first = plain.choices[0].logprobs.content[0]
    runner_up = first.top_logprobs[1].token
    best_id, best_piece = token_id(server, first.token)
    assert best_piece == first.token
    banned = client.chat.completions.create(model=server.model, messages=PROMPT, temperature=0,
                                            max_tokens=1, logit_bias={str(best_id): -100})
    assert banned.choices[0].message.content == runner_up != first.token
    # +100 on an unlikely token makes every step choose it, streamed or not, sampled or greedy.
    forced_id, piece = token_id(server, " banana")
    for temperature in (0, 1.0):
        r = client.completions.create(model=server.model, prompt="The capital of France is",
                                      max_tokens=3, temperature=temperature, seed=3,
                                      logit_bias={str(forced_id): 100})
        assert r.choices[0].text == piece * 3
    chunks = client.completions.create(model=server.model, prompt="The capital of France is",
                                       max_tokens=3, temperature=0, stream=True,
                                       logit_bias={str(forced_id): 100})
    assert "".join(c.choices[0].text for c in chunks if c.choices) == piece * 3


def test_n_choices_are_the_seeded_requests_seed_plus_index(client, server):
    # Choice i of a seeded n-choice request is the one-choice request with seed + i: each choice
    # is reproducible, and they differ.
    args = dict(model=server.model, messages=PROMPT, temperature=1.0, max_tokens=12)
    r = client.chat.completions.create(n=3, seed=41, **args)
    assert [c.index for c in r.choices] == [0, 1, 2]
    singles = [client.chat.completions.create(n=1, seed=41 + i, **args) for i in range(3)]
    for c, one in zip(r.choices, singles):
        assert c.message.content == one.choices[0].message.content
        assert c.finish_reason == one.choices[0].finish_reason
    assert len({c.message.content for c in r.choices}) > 1
    # Usage: the prompt once, every choice's tokens.
    assert r.usage.prompt_tokens == singles[0].usage.prompt_tokens
    assert r.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)


def test_n_choices_stream_interleaved_each_with_its_index(client, server):
    args = dict(model=server.model, prompt="Once upon a time", temperature=0.9, max_tokens=10,
                seed=7)
    whole = client.completions.create(n=2, **args)
    texts, finishes, usage = {}, {}, None
    for chunk in client.completions.create(n=2, stream=True,
                                           stream_options={"include_usage": True}, **args):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason is not None:
                assert c.index not in finishes  # one finish per choice
                finishes[c.index] = c.finish_reason
    assert texts == {c.index: c.text for c in whole.choices}
    assert finishes == {c.index: c.finish_reason for c in whole.choices}
    assert usage.completion_tokens == whole.usage.completion_tokens
    # Chat: every choice gets its role chunk first, and greedy choices are all the same answer.
    roles, content = {}, {}
    for chunk in client.chat.completions.create(model=server.model, messages=PROMPT, n=2,
                                                temperature=0, max_tokens=8, stream=True):
        for c in chunk.choices:
            if c.delta.role:
                assert c.index not in content
                roles[c.index] = c.delta.role
            content[c.index] = content.get(c.index, "") + (c.delta.content or "")
    assert roles == {0: "assistant", 1: "assistant"}
    assert content[0] == content[1] and "Paris" in content[0]


def test_response_format_json_object_gives_one_json_object(client, server):
    # A prompt that asks for no JSON at all, sampled hot: the output is still one JSON object
    # whenever the model ends it (finish_reason "stop"); cut by max_tokens, it is a prefix of one.
    import json
    ended = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": "Tell me a story."}],
            temperature=1.0, seed=seed, max_tokens=120, response_format={"type": "json_object"})
        choice = r.choices[0]
        text = choice.message.content
        assert text.lstrip().startswith("{"), text
        if choice.finish_reason == "stop":
            ended += 1
            assert isinstance(json.loads(text), dict), text
    assert ended >= 1
    # Greedy and streamed: the same object as the whole response.
    args = dict(model=server.model, messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Give the capital of France as JSON with keys country and "
                                    "capital."}],
                temperature=0, max_tokens=100, response_format={"type": "json_object"})
    whole = client.chat.completions.create(**args)
    assert whole.choices[0].finish_reason == "stop"
    obj = json.loads(whole.choices[0].message.content)
    assert obj.get("capital") == "Paris", obj
    streamed = "".join(c.choices[0].delta.content or ""
                       for c in client.chat.completions.create(stream=True, **args) if c.choices)
    assert streamed == whole.choices[0].message.content
    # Speculative decoding verifies its drafts under the same constraint: the same greedy text.
    spec = client.chat.completions.create(extra_body={"speculative": True}, **args)
    assert spec.choices[0].message.content == whole.choices[0].message.content


def test_stop_token_ids_and_min_tokens(client, server):
    # Greedy, the model answers in a few tokens and ends with its end-of-turn token.
    args = dict(model=server.model, messages=PROMPT, temperature=0, max_tokens=40)
    plain = client.chat.completions.create(**args)
    assert plain.choices[0].finish_reason == "stop"
    short = plain.usage.completion_tokens
    assert short < 20
    # stop_token_ids (vLLM's): the answer ends at " Paris", which is not returned.
    paris_id, piece = token_id(server, " Paris")
    assert piece == " Paris"
    cut = client.chat.completions.create(extra_body={"stop_token_ids": [paris_id]}, **args)
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == plain.choices[0].message.content.split(" Paris")[0]
    # min_tokens (vLLM's): neither the end-of-turn token nor a stop id may end it before 20.
    longer = client.chat.completions.create(
        extra_body={"min_tokens": 20, "stop_token_ids": [paris_id]}, **args)
    assert longer.usage.completion_tokens >= 20
    assert longer.choices[0].message.content.startswith(
        plain.choices[0].message.content.split(" Paris")[0])
    # ... nor a stop string (as vLLM): " Paris" comes back inside the text, and the answer goes on.
    held = client.chat.completions.create(extra_body={"min_tokens": 20}, stop=[" Paris"], **args)
    assert held.usage.completion_tokens >= 20
    assert held.choices[0].message.content.startswith(plain.choices[0].message.content)
    # Without min_tokens the stop string ends the answer before it.
    assert client.chat.completions.create(stop=[" Paris"], **args).choices[0].message.content == \
        plain.choices[0].message.content.split(" Paris")[0]
    # min_tokens above max_tokens is a 400 naming it.
    r = requests.post(server.url + "/v1/chat/completions",
                      json={"messages": PROMPT, "max_tokens": 5, "min_tokens": 6}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens"


def test_completion_echo_with_prompt_logprobs(client, server):
    # The legacy echo + logprobs scoring that evaluation harnesses use: one entry per prompt token
    # (the first unscored), then the completion's. Each prompt entry is what the model gives that
    # token after the tokens before it: the same alternatives as a completion of that prefix.
    text = "The capital of France is Paris. The capital of Germany is Berlin."
    ids = requests.post(server.url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"]
    # A plain request first puts the prompt in the prefix cache; the echo must still score it all.
    client.completions.create(model=server.model, prompt=ids, max_tokens=1, temperature=0)
    r = client.completions.create(model=server.model, prompt=ids, max_tokens=2, temperature=0,
                                  logprobs=2, echo=True)
    c = r.choices[0]
    assert c.text.startswith(text) and len(c.text) > len(text)
    lp = c.logprobs
    assert len(lp.tokens) == len(ids) + r.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x is not None and x <= 0 for x in lp.token_logprobs[1:])
    assert "".join(lp.tokens[:len(ids)]) == text
    assert lp.text_offset[len(ids)] == len(text)
    for k in (3, 7, len(ids) - 2):
        q = client.completions.create(model=server.model, prompt=ids[:k], max_tokens=1,
                                      temperature=0, logprobs=2)
        want = q.choices[0].logprobs.top_logprobs[0]  # its top 2 (and its greedy token, one)
        got = lp.top_logprobs[k]  # the top 2 and the prompt's own token at k
        assert got.keys() == want.keys() | {lp.tokens[k]}, (k, got, want)
        for tok in want:
            assert abs(got[tok] - want[tok]) < 1e-4, (k, tok)
    # Streamed: the echo comes first, as one chunk with the prompt's logprobs.
    chunks = [ch for ch in client.completions.create(
        model=server.model, prompt=text, max_tokens=2, temperature=0, logprobs=1, echo=True,
        stream=True) if ch.choices]
    assert chunks[0].choices[0].text == text
    assert chunks[0].choices[0].logprobs.token_logprobs[1:] == lp.token_logprobs[1:len(ids)]
    assert "".join(ch.choices[0].text for ch in chunks) == c.text
    # max_tokens 0 (the legacy scoring request): the prompt and its logprobs, nothing generated.
    score = client.completions.create(model=server.model, prompt=ids, max_tokens=0, temperature=0,
                                      logprobs=2, echo=True)
    assert score.choices[0].text == text
    assert score.choices[0].finish_reason == "length"
    assert score.usage.completion_tokens == 0
    assert score.choices[0].logprobs.token_logprobs == lp.token_logprobs[:len(ids)]
    # Echo without logprobs: the prompt, then the completion.
    plain = client.completions.create(model=server.model, prompt=text, max_tokens=2,
                                      temperature=0, echo=True)
    assert plain.choices[0].text == c.text and plain.choices[0].logprobs is None


def test_text_offsets_are_characters_and_split_characters_are_bytes(client, server):
    # OpenAI's and vLLM's text_offset index the text's characters: text[offset:] starts with the
    # token's text. Tokens that are part of a character (the emoji's bytes) are "bytes:\\xNN"
    # strings, so that k alternatives stay k distinct keys.
    text = "Café crème brûlée, with 😀 and 😃 for dessert"
    for stream in (False, True):
        r = client.completions.create(model=server.model, prompt=text, max_tokens=3,
                                      temperature=0, logprobs=5, echo=True, stream=stream)
        if stream:
            full, tokens, offsets = "", [], []
            for ch in r:
                if ch.choices:
                    full += ch.choices[0].text
                    if ch.choices[0].logprobs:
                        tokens += ch.choices[0].logprobs.tokens
                        offsets += ch.choices[0].logprobs.text_offset
        else:
            c = r.choices[0]
            full, tokens, offsets = c.text, c.logprobs.tokens, c.logprobs.text_offset
            tops = c.logprobs.top_logprobs
            # No two alternatives share a key: 5 each, and the token itself when it is not
            # among them (OpenAI: "up to logprobs+1 elements").
            for t, tok in zip(tops[1:], tokens[1:]):
                assert tok in t and len(t) in (5, 6), (tok, t)
                if len(t) == 6:  # then it is no top-5 token: every other is at least as likely
                    assert all(v >= t[tok] for v in t.values()), (tok, t)
        assert full.startswith(text)
        assert offsets == sorted(offsets) and offsets[-1] <= len(full)
        split = [i for i, t in enumerate(tokens) if t.startswith("bytes:")]
        assert split, tokens  # the emoji are split over byte tokens
        for tok, off in zip(tokens, offsets):
            if not tok.startswith("bytes:"):
                assert full[off:off + len(tok)] == tok, (stream, tok, off, full[off:off + 12])


def test_echo_of_token_ids_matches_its_tokens(client, server):
    # An id prompt with a special token: the echoed text holds what the echoed tokens say.
    ids = requests.post(server.url + "/tokenize", json={"content": "<|im_start|>Hi there",
                                                        "add_special": False,
                                                        "parse_special": True},
                        timeout=30).json()["tokens"]
    r = client.completions.create(model=server.model, prompt=ids, max_tokens=2, temperature=0,
                                  logprobs=0, echo=True)
    c = r.choices[0]
    assert c.text.startswith("<|im_start|>Hi there"), c.text
    assert "".join(c.logprobs.tokens) == c.text
    assert c.logprobs.text_offset[-1] < len(c.text)
    assert ids[0] != requests.post(server.url + "/tokenize", json={"content": "<"},
                                   timeout=30).json()["tokens"][0]  # it is one special token


def test_vllm_prompt_logprobs(client, server):
    # vLLM's prompt_logprobs: per prompt token after the first, its logprob and rank with the
    # `prompt_logprobs` most likely alternatives; the same numbers as the echo's scoring.
    text = "The capital of France is Paris. The capital of Germany is Berlin."
    ids = requests.post(server.url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"]
    r = client.completions.create(model=server.model, prompt=ids, max_tokens=2, temperature=0,
                                  extra_body={"prompt_logprobs": 3})
    pl = r.choices[0].model_extra["prompt_logprobs"]
    assert len(pl) == len(ids) and pl[0] is None
    echo = client.completions.create(model=server.model, prompt=ids, max_tokens=2, temperature=0,
                                     logprobs=3, echo=True).choices[0].logprobs
    for k in range(1, len(ids)):
        entry = pl[k]
        mine = entry[str(ids[k])]
        assert abs(mine["logprob"] - echo.token_logprobs[k]) < 1e-4, k
        assert mine["decoded_token"] == echo.tokens[k]
        # The alternatives: ranks 1..3 (the prompt token among them when it ranks there).
        ranks = sorted(e["rank"] for tid, e in entry.items() if tid != str(ids[k]))
        assert len(entry) in (3, 4)
        if mine["rank"] <= 3:
            assert len(entry) == 3 and sorted(ranks + [mine["rank"]]) == [1, 2, 3]
        else:
            assert ranks == [1, 2, 3]
        best = max(entry.values(), key=lambda e: e["logprob"])
        assert best["rank"] == 1
        # The echo's top_logprobs: the same entries (the token and its top 3), as vLLM's.
        assert sorted(e["decoded_token"] for e in entry.values()) == \
            sorted(echo.top_logprobs[k].keys())
    # "Paris" after "The capital of France is" is the model's first choice.
    paris = [k for k in range(len(ids)) if echo.tokens[k] == " Paris"][0]
    assert pl[paris][str(ids[paris])]["rank"] == 1
    # Chat: one list for the response (its rendered prompt), as vLLM.
    chat = client.chat.completions.create(model=server.model, messages=PROMPT, max_tokens=3,
                                          temperature=0, extra_body={"prompt_logprobs": 0})
    cl = chat.model_extra["prompt_logprobs"]
    assert len(cl) == chat.usage.prompt_tokens and cl[0] is None
    assert all(len(e) == 1 and list(e.values())[0]["rank"] >= 1 for e in cl[1:])
    # Not with stream, and at most 20: 400s naming it.
    for extra in ({"prompt_logprobs": 2, "stream": True}, {"prompt_logprobs": 21},
                  {"prompt_logprobs": -1}):
        resp = requests.post(server.url + "/v1/completions",
                             json={"prompt": text, "max_tokens": 1, **extra}, timeout=30)
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt_logprobs"


def test_completions_batch_of_prompts(client, server):
    # OpenAI's batch form: choice k * n + j answers prompt k (its choice j); usage counts every
    # prompt. Greedy, so each answer is the prompt's answer alone.
    prompts = ["The capital of France is", "1, 2, 3, 4,", "Once upon a time"]
    singles = [client.completions.create(model=server.model, prompt=p, max_tokens=6,
                                         temperature=0) for p in prompts]
    r = client.completions.create(model=server.model, prompt=prompts, n=2, max_tokens=6,
                                  temperature=0)
    assert [c.index for c in r.choices] == list(range(6))
    for c in r.choices:
        assert c.text == singles[c.index // 2].choices[0].text
    assert r.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert r.usage.completion_tokens == 2 * sum(s.usage.completion_tokens for s in singles)
    # Streamed with echo: each choice starts with its own prompt.
    texts = {}
    for chunk in client.completions.create(model=server.model, prompt=prompts, max_tokens=6,
                                           temperature=0, echo=True, stream=True):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
    assert texts == {k: p + singles[k].choices[0].text for k, p in enumerate(prompts)}


def test_continue_final_message_prefills_the_answer(client, server):
    # vLLM's continue_final_message: the last assistant turn is continued as it is. The prompt is
    # then the conversation rendered by the model's template (SmolLM2's ChatML) up to that text,
    # so greedy, the answer is the completion of exactly that text.
    prefix = "The capital of France is"
    conversation = PROMPT + [{"role": "assistant", "content": prefix}]
    r = client.chat.completions.create(model=server.model, messages=conversation, temperature=0,
                                       max_tokens=8, extra_body={"continue_final_message": True})
    rendered = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n" + prefix)
    c = client.completions.create(model=server.model, prompt=rendered, temperature=0, max_tokens=8)
    assert r.choices[0].message.content == c.choices[0].text
    assert "Paris" in r.choices[0].message.content
    assert r.usage.prompt_tokens == c.usage.prompt_tokens
    # With echo (vLLM's chat echo), the answer starts with the continued turn's text, streamed too.
    e = client.chat.completions.create(model=server.model, messages=conversation, temperature=0,
                                       max_tokens=8,
                                       extra_body={"continue_final_message": True, "echo": True})
    assert e.choices[0].message.content == prefix + r.choices[0].message.content
    streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model=server.model, messages=conversation, temperature=0, max_tokens=8, stream=True,
        extra_body={"continue_final_message": True, "echo": True}) if ch.choices)
    assert streamed == e.choices[0].message.content
    # add_generation_prompt false: the prompt ends after the last turn, without the assistant's
    # header ("<|im_start|>assistant\n").
    plain = client.chat.completions.create(model=server.model, messages=PROMPT, max_tokens=1)
    bare = client.chat.completions.create(model=server.model, messages=PROMPT, max_tokens=1,
                                          extra_body={"add_generation_prompt": False})
    header = requests.post(server.url + "/tokenize", timeout=30,
                           json={"content": "<|im_start|>assistant\n"}).json()["tokens"]
    assert plain.usage.prompt_tokens - bare.usage.prompt_tokens == len(header)


def test_best_of_returns_the_most_likely_generations(client, server):
    # best_of generations (seeded: generation j draws with seed + j, as n does), the n with the
    # highest mean token logprob returned, best first; usage counts them all.
    prompt, seed = "Once upon a time", 7
    singles = [client.completions.create(model=server.model, prompt=prompt, max_tokens=12,
                                         temperature=1.0, seed=seed + j, logprobs=0)
               for j in range(4)]

    def mean(c):
        lp = c.choices[0].logprobs.token_logprobs
        return sum(lp) / len(lp)
    ranked = sorted(range(4), key=lambda j: -mean(singles[j]))
    one = client.completions.create(model=server.model, prompt=prompt, max_tokens=12,
                                    temperature=1.0, seed=seed, best_of=4)
    assert [c.text for c in one.choices] == [singles[ranked[0]].choices[0].text]
    assert one.choices[0].logprobs is None  # not asked for: used for the ranking only
    assert one.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    two = client.completions.create(model=server.model, prompt=prompt, max_tokens=12,
                                    temperature=1.0, seed=seed, n=2, best_of=4, logprobs=1)
    assert [c.text for c in two.choices] == [singles[j].choices[0].text for j in ranked[:2]]
    assert [c.index for c in two.choices] == [0, 1]
    assert two.choices[0].logprobs.token_logprobs == singles[ranked[0]].choices[0].logprobs.token_logprobs
    for body, param in (({"n": 3, "best_of": 2}, "best_of"), ({"best_of": 129}, "best_of"),
                        ({"best_of": 2, "stream": True}, "best_of")):
        r = requests.post(server.url + "/v1/completions", timeout=30,
                          json={"prompt": prompt, "max_tokens": 2, **body})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)


def test_continuous_usage_stats_count_as_they_go(client, server):
    # vLLM's stream_options.continuous_usage_stats: every chunk carries the usage so far.
    chunks = list(client.chat.completions.create(
        model=server.model, messages=PROMPT, temperature=0, max_tokens=12, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    with_choices = [c for c in chunks if c.choices]
    counts = [c.usage.completion_tokens for c in with_choices]
    assert counts[0] == 0 and counts == sorted(counts)  # the role chunk, then growing
    final = chunks[-1]
    assert not final.choices and counts[-1] == final.usage.completion_tokens
    assert all(c.usage.prompt_tokens == final.usage.prompt_tokens for c in with_choices)
    assert all(c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
               for c in with_choices)
    # Without include_usage it is off, as vLLM's.
    plain = list(client.chat.completions.create(
        model=server.model, messages=PROMPT, temperature=0, max_tokens=4, stream=True,
        stream_options={"include_usage": False, "continuous_usage_stats": True}))
    assert all(c.usage is None for c in plain)
