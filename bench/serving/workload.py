"""What to send and when: arrival times, request lengths, and prompt text.

Arrivals (open loop: a request is sent at its time whether or not earlier ones have finished):
- `poisson`: gaps drawn from Gamma(shape=burstiness, scale=1/(rate*burstiness)), as vLLM's
  benchmark_serving; burstiness 1 is a Poisson process, < 1 burstier, > 1 more regular.
- `fixed`: one request every 1/rate seconds.
- rate `inf`: every request at time 0.
- a trace (Azure LLM inference CSV, or Mooncake-style JSONL): the trace's own arrival times,
  relative to its first request, multiplied by `time_scale` (2 = twice as slow), with input and
  output lengths multiplied by `length_scale` (at least 1 token), then clipped to the caps.

Prompt text: the MT-Bench questions (shared/data/mt_bench/question.jsonl) laid end to end and cut
(or repeated) to each request's input length. Token counts come from the server's `/tokenize` and
`/detokenize` when it has them (llama.cpp's server and kinfer-runtime do), else from an estimate of
4 characters a token; the report says which.
"""
import csv
import datetime
import json
import math
import pathlib
import random

from . import http_client

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
# The shared data folder when present, else the copy kept for the tests (tests/fixtures/mt_bench).
MT_BENCH = next((p for p in (DATA / "mt_bench" / "question.jsonl",
                             ROOT / "tests" / "fixtures" / "mt_bench" / "question.jsonl")
                 if p.exists()), DATA / "mt_bench" / "question.jsonl")
CHARS_PER_TOKEN = 4


def arrival_times(n, rate, kind="poisson", burstiness=1.0, seed=0):
    """n send times (seconds from the start) for an open-loop process."""
    if n <= 0:
        return []
    if rate == math.inf or rate <= 0:
        return [0.0] * n
    if kind == "fixed":
        return [i / rate for i in range(n)]
    if kind != "poisson":
        raise ValueError(f"unknown arrival process {kind!r}")
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.gammavariate(burstiness, theta)
    return out


def _parse_azure_ts(s):
    # "2023-11-16 18:15:46.6805900": 7 fractional digits, more than datetime takes
    day, _, frac = s.strip().partition(".")
    t = datetime.datetime.strptime(day, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


def load_trace(path, limit=None, start=0):
    """[(t_s from the first request, input_len, output_len)] from an Azure CSV or a JSONL trace."""
    path = pathlib.Path(path)
    rows = []
    if path.suffix == ".csv":
        with open(path, newline="") as f:
            for i, r in enumerate(csv.DictReader(f)):
                if i < start:
                    continue
                if limit is not None and len(rows) >= limit:
                    break
                rows.append((_parse_azure_ts(r["TIMESTAMP"]), int(r["ContextTokens"]),
                             int(r["GeneratedTokens"])))
    else:
        with open(path) as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                if i < start:
                    continue
                if limit is not None and len(rows) >= limit:
                    break
                r = json.loads(line)
                rows.append((float(r["timestamp"]) / 1000.0, int(r["input_length"]),
                             int(r["output_length"])))
    if not rows:
        return []
    t0 = rows[0][0]
    return [(t - t0, i, o) for t, i, o in rows]


def scale_trace(rows, time_scale=1.0, length_scale=1.0, max_input=None, max_output=None):
    """Applies time and length scaling and caps; returns [(t_s, input_len, output_len)]."""
    out = []
    for t, i, o in rows:
        i2 = max(1, int(round(i * length_scale)))
        o2 = max(1, int(round(o * length_scale)))
        if max_input:
            i2 = min(i2, max_input)
        if max_output:
            o2 = min(o2, max_output)
        out.append((t * time_scale, i2, o2))
    return out


def mt_bench_questions(path=MT_BENCH):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class PromptMaker:
    """Cuts MT-Bench text to a token length. `mode` is "server /tokenize" or "estimate (...)"."""

    def __init__(self, questions):
        self.questions = questions
        self.texts = [t for q in questions for t in q["turns"]]
        self.mode = None
        self._ids = None       # token ids of all texts laid end to end (server mode)
        self._starts = None    # where each question's first turn starts in _ids
        self._base_url = None
        self._cache = {}

    async def setup(self, base_url, use_server=True):
        self._base_url = base_url.rstrip("/")
        if use_server:
            try:
                ids, starts = [], []
                for q in self.questions:
                    for j, text in enumerate(q["turns"]):
                        st, body = await http_client.get_json(
                            self._base_url + "/tokenize",
                            {"content": text + "\n\n", "add_special": False})
                        if st != 200 or not isinstance(body, dict) or "tokens" not in body:
                            raise ValueError(f"/tokenize answered {st}")
                        if j == 0:
                            starts.append(len(ids))
                        ids.extend(t if isinstance(t, int) else t["id"] for t in body["tokens"])
                st, body = await http_client.get_json(self._base_url + "/detokenize",
                                                      {"tokens": ids[:8]})
                if st != 200 or not isinstance(body, dict) or "content" not in body:
                    raise ValueError(f"/detokenize answered {st}")
                self._ids, self._starts = ids, starts
                self.mode = "server /tokenize"
                return
            except (http_client.HttpError, ValueError, OSError, TimeoutError) as e:
                self.mode = f"estimate ({CHARS_PER_TOKEN} chars/token; /tokenize unavailable: {e})"
                return
        self.mode = f"estimate ({CHARS_PER_TOKEN} chars/token)"

    async def prompt(self, index, n_tokens):
        """Text of about n_tokens tokens, starting at question (index mod #questions)."""
        key = (index % len(self.questions), n_tokens)
        if key in self._cache:
            return self._cache[key]
        if self._ids is not None:
            start = self._starts[key[0]]
            ids = (self._ids[start:] + self._ids) * (n_tokens // len(self._ids) + 2)
            st, body = await http_client.get_json(self._base_url + "/detokenize",
                                                  {"tokens": ids[:n_tokens]})
            if st != 200:
                raise http_client.HttpError(f"/detokenize answered {st}")
            text = body["content"]
        else:
            start = sum(len(t) + 2 for t in self.texts[:2 * key[0]])
            corpus = "\n\n".join(self.texts) + "\n\n"
            need = n_tokens * CHARS_PER_TOKEN
            text = (corpus[start:] + corpus * (need // len(corpus) + 2))[:need]
        self._cache[key] = text
        return text
