"""Bad input over raw HTTP: each case gets its 4xx with an OpenAI-style JSON error body, and the
server keeps answering afterwards."""
import json
import time

import pytest
import requests

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]


def post_raw(server, path, data: bytes, content_type="application/json"):
    return requests.post(server.url + path, data=data, headers={"Content-Type": content_type},
                         timeout=30)


def check_error(server, r, status, param=None, code=None, err_type="invalid_request_error"):
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    body = r.json()
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] == err_type
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    assert requests.get(server.url + "/health", timeout=5).status_code == 200
    return err


CASES = [
    # (name, path, body bytes, status, param)
    ("malformed_json", CHAT, b'{"messages": [', 400, None),
    ("not_an_object", CHAT, b'[1, 2]', 400, None),
    ("missing_messages", CHAT, json.dumps({"model": "x"}).encode(), 400, "messages"),
    ("empty_messages", CHAT, json.dumps({"messages": []}).encode(), 400, "messages"),
    ("messages_wrong_type", CHAT, json.dumps({"messages": "hi"}).encode(), 400, "messages"),
    ("message_without_role", CHAT, json.dumps({"messages": [{"content": "x"}]}).encode(), 400,
     "messages[0].role"),
    ("max_tokens_string", CHAT, json.dumps({"messages": MSG, "max_tokens": "5"}).encode(), 400,
     "max_tokens"),
    ("max_tokens_zero", CHAT, json.dumps({"messages": MSG, "max_tokens": 0}).encode(), 400,
     "max_tokens"),
    ("temperature_out_of_range", CHAT, json.dumps({"messages": MSG, "temperature": 5}).encode(),
     400, "temperature"),
    ("n_zero", CHAT, json.dumps({"messages": MSG, "n": 0}).encode(), 400, "n"),
    ("n_past_openai_limit", CHAT, json.dumps({"messages": MSG, "n": 129}).encode(), 400, "n"),
    ("logit_bias_not_an_object", CHAT, json.dumps({"messages": MSG, "logit_bias": [[1, 5]]})
     .encode(), 400, "logit_bias"),
    ("logit_bias_key_not_an_id", CHAT, json.dumps({"messages": MSG, "logit_bias": {"a": 5}})
     .encode(), 400, "logit_bias"),
    ("logit_bias_out_of_range", CHAT, json.dumps({"messages": MSG, "logit_bias": {"1": 101}})
     .encode(), 400, "logit_bias"),
    ("logit_bias_out_of_vocab", CHAT, json.dumps({"messages": MSG,
                                                  "logit_bias": {"99999999": 5}}).encode(), 400,
     "logit_bias"),
    ("json_schema_unenforceable", CHAT, json.dumps({"messages": MSG, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "integer", "multipleOf": 3}}}}).encode(), 400,
     "response_format.json_schema.schema"),
    ("json_schema_missing", CHAT, json.dumps({"messages": MSG, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x"}}}).encode(), 400,
     "response_format.json_schema.schema"),
    ("tool_choice_unknown_tool", CHAT, json.dumps({"messages": MSG, "tools": [
        {"type": "function", "function": {"name": "f"}}],
        "tool_choice": {"type": "function", "function": {"name": "g"}}}).encode(), 400,
     "tool_choice"),
    ("too_many_stops", CHAT, json.dumps({"messages": MSG, "stop": list("abcde")}).encode(), 400,
     "stop"),
    ("missing_prompt", COMPLETIONS, json.dumps({"max_tokens": 3}).encode(), 400, "prompt"),
    ("empty_prompt", COMPLETIONS, json.dumps({"prompt": ""}).encode(), 400, "prompt"),
    ("empty_prompt_list", COMPLETIONS, json.dumps({"prompt": []}).encode(), 400, "prompt"),
    ("prompt_ids_out_of_vocab", COMPLETIONS, json.dumps({"prompt": [1, 99999999]}).encode(), 400,
     "prompt"),
    ("scoring_on_chat", CHAT, json.dumps({"messages": MSG, "echo": True,
                                          "max_tokens": 0}).encode(), 400, "max_tokens"),
    ("continue_without_assistant_turn", CHAT, json.dumps(
        {"messages": MSG, "continue_final_message": True}).encode(), 400, "messages"),
    ("non_utf8_body", CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None),
    ("number_past_double", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], '
     b'"temperature": 1e999}', 400, None),
    ("nested_too_deep", CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "x": ' +
     b"[" * 100000 + b"]" * 100000 + b"}", 400, None),
    # The Responses API checked no nesting: its echo of `metadata` overflowed the stack.
    ("responses_nested_too_deep", "/v1/responses", b'{"input": "hi", "metadata": {"a": ' +
     b"[" * 100000 + b"]" * 100000 + b"}}", 400, None),
    ("guided_json_string_too_deep", CHAT, json.dumps(
        {"messages": MSG, "guided_json": "[" * 100000 + "]" * 100000}).encode(), 400,
     "guided_json"),
]


@pytest.mark.parametrize("name,path,body,status,param", CASES, ids=[c[0] for c in CASES])
def test_bad_request(server, name, path, body, status, param):
    check_error(server, post_raw(server, path, body), status, param)


@pytest.mark.parametrize("path", [CHAT, "/v1/responses"])
def test_deeply_nested_tool_call_arguments_are_text_not_a_crash(server, path):
    """A past tool call's `arguments` is JSON inside a string, out of sight of the body's nesting
    check: 80,000 nested arrays there overflowed the stack when the turn was written out. Past
    the nesting limit it stays text; here it is then too long for the context (a 400)."""
    deep = "[" * 80000 + "]" * 80000
    if path == CHAT:
        body = {"messages": [MSG[0], {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": deep}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}], "max_tokens": 1}
    else:
        body = {"input": [{"role": "user", "content": "hi"},
                          {"type": "function_call", "call_id": "c1", "name": "f",
                           "arguments": deep},
                          {"type": "function_call_output", "call_id": "c1", "output": "ok"}],
                "max_output_tokens": 16}
    r = requests.post(server.url + path, json=body, timeout=60)
    check_error(server, r, 400, code="context_length_exceeded")
    assert requests.get(server.url + "/health", timeout=5).status_code == 200


def test_a_decoded_newline_in_the_path_cannot_forge_a_log_line(server):
    """The access log writes the decoded path: a %0a in it is written \\x0a on the same line,
    never as a line of its own that looks like another request's entry."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/v1/x%0aFORGED-ENTRY%20POST%20/v1/chat/completions%20-%3E%20200")
    assert conn.getresponse().status == 404
    conn.close()
    time.sleep(0.2)
    with open(server.log_path, errors="replace") as f:
        lines = f.read().splitlines()
    assert not any(line.startswith("FORGED-ENTRY") for line in lines)
    assert any("/v1/x\\x0aFORGED-ENTRY" in line for line in lines), lines[-5:]


def test_scoring_on_chat_says_it_is_for_completions_only(server):
    r = requests.post(server.url + CHAT, json={"messages": [{"role": "user", "content": "hi"}],
                                               "echo": True, "max_tokens": 0}, timeout=30)
    assert r.status_code == 400
    assert "/v1/completions only" in r.json()["error"]["message"], r.text


def test_unknown_model_is_404_model_not_found(server):
    r = requests.post(server.url + CHAT, json={"model": "gpt-4", "messages": MSG})
    err = check_error(server, r, 404, "model", "model_not_found")
    assert "gpt-4" in err["message"]
    r = requests.get(server.url + "/v1/models/gpt-4")
    check_error(server, r, 404, "model", "model_not_found")


def test_context_window_exceeded_names_both_numbers(server):
    r = requests.post(server.url + COMPLETIONS,
                      json={"model": server.model, "prompt": "Hello there", "max_tokens": 100000})
    err = check_error(server, r, 400, "max_tokens", "context_length_exceeded")
    assert str(server.ctx_size) in err["message"]
    assert "100000" in err["message"]


def test_long_prompt_beyond_context(server):
    r = requests.post(server.url + COMPLETIONS,
                      json={"prompt": "word " * (server.ctx_size + 100), "max_tokens": 1})
    err = check_error(server, r, 400, code="context_length_exceeded")
    assert str(server.ctx_size) in err["message"]


def test_body_over_limit_is_413(server):
    big = json.dumps({"prompt": "x" * (1 << 20) + "y"}).encode()
    check_error(server, post_raw(server, COMPLETIONS, big), 413)


def test_wrong_method_is_405(server):
    r = requests.get(server.url + CHAT)
    check_error(server, r, 405)
    assert r.headers["Allow"] == "POST"
    check_error(server, requests.post(server.url + "/health"), 405)


def test_trace_and_options_are_405_not_echoed(server):
    # cpprestsdk's own TRACE handler echoed the request, Authorization header included.
    for method in ("TRACE", "OPTIONS"):
        r = requests.request(method, server.url + CHAT,
                             headers={"Authorization": "Bearer sk-secret"}, timeout=10)
        check_error(server, r, 405)
        assert "sk-secret" not in r.text
        assert r.headers["Allow"] == "POST"


def test_unknown_path_is_404(server):
    check_error(server, requests.get(server.url + "/v1/nothing"), 404)
    check_error(server, requests.post(server.url + "/v2/chat/completions", json={}), 404)


def test_openai_client_raises_bad_request(client, server):
    import openai
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=server.model, messages=[], max_tokens=3)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=MSG, max_tokens=3)


def test_http10_stream_is_not_chunked_and_ends_by_closing(server):
    # RFC 9112 7.1: no chunked coding to an HTTP/1.0 client (the runtime streams through the same
    # connection code as the sidecar, common/http/server_session.cc).
    import socket
    from urllib.parse import urlparse
    body = json.dumps({"prompt": "hi", "max_tokens": 3, "stream": True}).encode()
    u = urlparse(server.url)
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, rest = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), data
    assert b"transfer-encoding" not in head.lower(), head
    assert rest.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]"), rest


def test_x_request_id_is_echoed_and_logged(server):
    # As Envoy and vLLM's --enable-request-id-headers: the caller's id comes back on every answer
    # (a success, a stream, an error) and ends the access log line.
    r = requests.post(server.url + COMPLETIONS, headers={"x-request-id": "trace-ok-1"},
                      json={"prompt": "Hi", "max_tokens": 1})
    assert r.status_code == 200 and r.headers["x-request-id"] == "trace-ok-1"
    with requests.post(server.url + COMPLETIONS, headers={"x-request-id": "trace-stream-2"},
                       json={"prompt": "Hi", "max_tokens": 2, "stream": True}, stream=True) as r:
        assert r.status_code == 200 and r.headers["x-request-id"] == "trace-stream-2"
        assert b"[DONE]" in r.content
    r = requests.post(server.url + COMPLETIONS, headers={"x-request-id": "trace-bad-3"},
                      json={"prompt": "Hi", "max_tokens": -1})
    check_error(server, r, 400)
    assert r.headers["x-request-id"] == "trace-bad-3"
    assert "x-request-id" not in requests.get(server.url + "/health").headers
    deadline = time.time() + 5
    while "x-request-id=trace-bad-3" not in server.log_tail(200) and time.time() < deadline:
        time.sleep(0.05)
    log = server.log_tail(200)
    assert "-> 200" in log and "x-request-id=trace-ok-1" in log, log
    assert "-> 400" in log and "x-request-id=trace-bad-3" in log, log
