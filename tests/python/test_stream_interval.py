"""kinfer-runtime --stream-interval N (vLLM's flag of that name), through the official openai
client: a stream's first token comes alone, then each chunk carries N tokens, the last whatever
is left; the text is the same as without it. A bad value is refused at start."""
import subprocess

from conftest import _binary, _model, start_runtime, stop_runtime

PROMPT = [{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "Count from 1 to 30, separated by commas."}]


def _stream(client, model, max_tokens):
    chunks = list(client.chat.completions.create(
        model=model, messages=PROMPT, temperature=0, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # continuous_usage_stats: each chunk says how many tokens were generated so far.
    counts = [c.usage.completion_tokens for c in chunks if c.choices]
    return text, counts, chunks[-1].usage.completion_tokens


def test_chunks_carry_n_tokens_and_the_same_text(client, server):
    import openai
    plain_text, plain_counts, plain_total = _stream(client, server.model, 22)
    srv = start_runtime(["--stream-interval", "4"])
    try:
        held = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        text, counts, total = _stream(held, srv.model, 22)
        whole = held.chat.completions.create(model=srv.model, messages=PROMPT, temperature=0,
                                             max_tokens=22)
    finally:
        stop_runtime(srv)
    assert text == plain_text == whole.choices[0].message.content
    assert total == plain_total == whole.usage.completion_tokens == 22
    # Without the flag: a chunk a token (after the role chunk).
    steps = [b - a for a, b in zip(plain_counts, plain_counts[1:]) if b != a]
    assert steps == [1] * 22, plain_counts
    # With it: the first token alone, then 4 at a time, the last chunk with the rest (22 = 1 +
    # 5 x 4 + 1).
    steps = [b - a for a, b in zip(counts, counts[1:]) if b != a]
    assert steps == [1, 4, 4, 4, 4, 4, 1], counts


def test_a_bad_stream_interval_is_refused_at_start():
    for bad in ("0", "-3", "x", "5000"):
        proc = subprocess.run([str(_binary()), "--model", str(_model()), "--stream-interval", bad],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "--stream-interval" in proc.stderr and "[1, 4096]" in proc.stderr, proc.stderr
