"""llama.cpp-compatible /tokenize and /detokenize."""
import requests


def test_round_trip(server):
    text = "Hello, world! Ünïcödé and 日本語 text."
    toks = requests.post(server.url + "/tokenize", json={"content": text}).json()["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    back = requests.post(server.url + "/detokenize", json={"tokens": toks}).json()["content"]
    assert back == text


def test_with_pieces_and_special_tokens(server):
    r = requests.post(server.url + "/tokenize",
                      json={"content": "<|im_start|>user", "with_pieces": True}).json()
    pieces = r["tokens"]
    assert all(set(p) == {"id", "piece"} for p in pieces)
    # parse_special defaults to true: the control token is one token.
    assert pieces[0]["piece"] == "<|im_start|>"
    plain = requests.post(server.url + "/tokenize",
                          json={"content": "<|im_start|>user", "parse_special": False}).json()
    assert len(plain["tokens"]) > len(pieces)


def test_empty_content_and_bad_ids(server):
    assert requests.post(server.url + "/tokenize", json={"content": ""}).json() == {"tokens": []}
    assert requests.post(server.url + "/detokenize", json={"tokens": []}).json() == {"content": ""}
    r = requests.post(server.url + "/detokenize", json={"tokens": [10**8]})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "tokens"
    r = requests.post(server.url + "/tokenize", json={"text": "x"})
    assert r.status_code == 400
