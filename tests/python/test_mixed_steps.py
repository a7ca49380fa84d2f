"""A batch that mixes every kind of draw (plain; with penalties, a logit_bias or min_tokens,
which go with the draw; with logprobs, which come back with the token; JSON mode, whose grammar
goes with the draw as a mask of the tokens that may come next), through the official openai
client: each request gets the text and logprobs it gets alone, and no step is mixed
(kinfer_runtime_engine_steps_mixed_total: before the masks went with the draw, the JSON rows'
logits came back to the host in such steps)."""
import threading

import openai
import pytest
import requests

from conftest import metric_value, start_runtime, stop_runtime

PROMPT = [{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "Write a short poem about the sea."}]
KINDS = {
    "plain": {},
    "penalized": {"frequency_penalty": 0.8, "presence_penalty": 0.3},
    "biased": {"logit_bias": {"11": 3}},
    "logprobs": {"logprobs": True, "top_logprobs": 2},
    "held": {"extra_body": {"min_tokens": 40}},
    "json": {"response_format": {"type": "json_object"}},
}


def _ask(client, model, kind):
    r = client.chat.completions.create(model=model, messages=PROMPT, temperature=0, max_tokens=40,
                                       **KINDS[kind])
    c = r.choices[0]
    if c.logprobs is None:
        return c.message.content, None
    return c.message.content, [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs])
                               for t in c.logprobs.content]


def _mixed_steps(server):
    return metric_value(requests.get(server.url + "/metrics", timeout=10).text,
                        "kinfer_runtime_engine_steps_mixed_total")


def _counter(server, name):
    return metric_value(requests.get(server.url + "/metrics", timeout=10).text, name)


def _together(client, model):
    """Every kind twice, all at once: each kind's two answers must agree."""
    got = {}
    threads = [threading.Thread(target=lambda k=k, i=i: got.__setitem__((k, i), _ask(client, model, k)))
               for k in KINDS for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(got) == 2 * len(KINDS)
    for k in KINDS:
        assert got[(k, 0)] == got[(k, 1)], k
    return {k: got[(k, 0)] for k in KINDS}


def test_a_batch_of_every_kind_gives_each_request_its_own_text(client, server):
    alone = {kind: _ask(client, server.model, kind) for kind in KINDS}
    before = _mixed_steps(server)
    together = _together(client, server.model)
    assert together == alone
    assert alone["logprobs"][1] is not None and len(alone["logprobs"][1]) > 10
    assert all(len(top) == 2 and lp <= 0 for _, lp, top in alone["logprobs"][1])
    # Twelve requests of 40 tokens at once, JSON rows among the others: every row drawn by the
    # backend, its mask with it.
    assert _mixed_steps(server) - before == 0


@pytest.fixture(scope="module")
def ahead_server():
    """A runtime that plans each step while the one before is computed and chains them, as it
    does on CUDA (on the CPU both are off unless asked)."""
    srv = start_runtime(["--plan-ahead", "on", "--chain-steps", "on"])
    yield srv
    stop_runtime(srv)


def test_planned_ahead_json_rows_get_their_masks_once_their_tokens_are_in(client, server, ahead_server):
    """Planned ahead, a JSON row's mask is added once the step before has drawn its input token
    (such a step is launched then, not chained): every kind together gets the text it gets alone
    step by step (the session's server), and steps are planned ahead while JSON rows decode
    (before 2026-12-06 a step with a constrained row was never planned ahead)."""
    alone = {kind: _ask(client, server.model, kind) for kind in KINDS}
    assert alone["json"][0].lstrip().startswith("{"), alone["json"]
    ahead = openai.OpenAI(base_url=ahead_server.url + "/v1", api_key="unused", max_retries=0,
                          timeout=120)
    before = _counter(ahead_server, "kinfer_runtime_engine_steps_planned_ahead_total")
    assert _ask(ahead, ahead_server.model, "json") == alone["json"]  # JSON alone: every step ahead
    alone_ahead = _counter(ahead_server, "kinfer_runtime_engine_steps_planned_ahead_total") - before
    assert alone_ahead >= 30, alone_ahead  # 40 tokens: all but the prompt's step (and any end)
    assert _together(ahead, ahead_server.model) == alone
