"""A batch that mixes every kind of draw (plain; with penalties, a logit_bias or min_tokens,
which go with the draw; with logprobs, which come back with the token; JSON mode, whose grammar
goes with the draw as a mask of the tokens that may come next), through the official openai
client: each request gets the text and logprobs it gets alone, and no step is mixed
(kinfer_runtime_engine_steps_mixed_total: before the masks went with the draw, the JSON rows'
logits came back to the host in such steps)."""
import threading

import requests

from conftest import metric_value

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


def test_a_batch_of_every_kind_gives_each_request_its_own_text(client, server):
    alone = {kind: _ask(client, server.model, kind) for kind in KINDS}
    before = _mixed_steps(server)
    together = {}
    threads = [threading.Thread(target=lambda k=k: together.__setitem__(k, _ask(client, server.model, k)))
               for k in KINDS for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert together == alone
    assert alone["logprobs"][1] is not None and len(alone["logprobs"][1]) > 10
    assert all(len(top) == 2 and lp <= 0 for _, lp, top in alone["logprobs"][1])
    # Twelve requests of 40 tokens at once, JSON rows among the others: every row drawn by the
    # backend, its mask with it.
    assert _mixed_steps(server) - before == 0
