"""test_example_router.py — examples/kvidx_router.py, production-stack's RoutingInterface shape,
on a scripted index: prefix wins, tier weights, predictions from its own commits, the
fallback to the least loaded endpoint, endpoint URLs mapped to pod names, outcomes."""
import json
import os
import sys
import threading
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../examples"))

import kvidx  # noqa: E402
from conftest import hash_keys  # noqa: E402
from kvidx_router import KvidxRouter, pod_name  # noqa: E402

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


def eps(*urls):
    return [SimpleNamespace(url=u, model_names=["m"]) for u in urls]


def load(prefill=0, decoding=0):
    return SimpleNamespace(in_prefill_requests=prefill, in_decoding_requests=decoding)


def test_pod_names():
    assert pod_name("http://10.0.0.1:8000") == "10.0.0.1:8000"
    assert pod_name("http://10.0.0.1:8000/v1/") == "10.0.0.1:8000"
    assert pod_name("https://user@host.example") == "host.example:443"
    assert pod_name("10.0.0.9:7") == "10.0.0.9:7"
    assert pod_name("http://[fd00::1]:8000") == "[fd00::1]:8000"


def test_routes_to_the_longest_prefix(writer):
    a, b = writer.pod("10.0.0.1:8000"), writer.pod("10.0.0.2:8000")
    writer.pod("10.0.0.3:8000")
    t = list(range(1, 16 * 8 + 1))
    keys = hash_keys(t, model="m")
    writer.store(a, "gpu", keys[:2])
    writer.store(b, "gpu", keys[:5])
    router = KvidxRouter(index=writer.name, commit=False)
    rt = router.route(eps(A, B, C), {}, {}, None, request_json={"model": "m", "prompt": t})
    assert (rt.url, rt.pod, rt.blocks) == (B, "10.0.0.2:8000", 5)
    assert router.route_request(eps(A, B, C), {}, {}, None, request_json={"model": "m", "prompt": t}) == B
    # B not offered: A has the longest prefix among the endpoints given.
    assert router.route_request(eps(A, C), {}, {}, None, token_ids=t, request_json={"model": "m"}) == A
    # CPU blocks weigh less: 5 blocks on the CPU (4.0) lose to A's... 2 GPU + 3 CPU (4.4).
    writer.cmd("remove", b, "gpu", *("%x" % k for k in keys[:5]))
    writer.store(b, "cpu", keys[:5])
    writer.store(a, "cpu", keys[2:5])
    assert router.route_request(eps(B, A), {}, {}, None, request_json={"model": "m", "prompt": t}) == A


def test_fallback_least_loaded_then_in_turn(writer):
    for n in (1, 2, 3):
        writer.pod(f"10.0.0.{n}:8000")
    router = KvidxRouter(index=writer.name, model="m", commit=False)
    t = list(range(1000, 1064))
    stats = {A: load(3, 1), B: load(0, 1), C: load(1, 0)}
    got = [router.route_request(eps(A, B, C), {}, stats, None, token_ids=t) for _ in range(4)]
    assert sorted(set(got)) == [B, C] and got[0] != got[1]
    # No token ids (a chat request with no messages, nothing to tokenize): still routed.
    assert router.route_request(eps(A), {}, {}, None, request_json={"messages": []}) == A
    # An endpoint the index does not know is routable, just never matched.
    assert router.route_request(eps("http://10.9.9.9:1"), {}, {}, None, token_ids=t) == "http://10.9.9.9:1"


def test_commits_make_the_next_request_stick(writer):
    a, b = writer.pod("10.0.0.1:8000"), writer.pod("10.0.0.2:8000")
    router = KvidxRouter(index=writer.name, model="m")
    t = list(range(5000, 5000 + 16 * 6))
    rt = router.route(eps(A, B), {}, {}, None, token_ids=t)
    first, corr = rt.url, rt.corr_id
    route = writer.event("route")
    assert route[:3] == [corr, a if first == A else b, 6] and route[3] == 6
    # No event confirmed anything, yet a follow-up with this prefix goes to the same pod, and
    # does so even when the other endpoint is less loaded.
    stats = {first: load(2, 2)}
    again = router.route(eps(A, B), {}, stats, None, token_ids=t + [1, 2, 3])
    assert again.url == first
    assert (again.blocks, again.spec_blocks) == (6, 6)
    assert router.report_outcome(rt, first, 64, 96) is True
    assert writer.event("outcome") == [corr, a if first == A else b, 64, 96]
    assert router.report_outcome(corr, "http://10.9.9.9:1", 0, 1) is False


def test_each_request_keeps_its_own_id(writer):
    """Issue 22, item 5: the id is the request's (its X-Request-Id, else one made up), returned
    with the route; two threads routing at once each get their own, never a shared field."""
    import threading
    a = writer.pod("10.0.0.1:8000")
    router = KvidxRouter(index=writer.name, model="m")
    t = list(range(7000, 7000 + 16 * 2))
    req = SimpleNamespace(headers={"x-request-id": "chatcmpl-abc"})
    rt = router.route(eps(A), {}, {}, req, token_ids=t)
    assert (rt.request_id, rt.corr_id) == ("chatcmpl-abc", kvidx.corr_id("chatcmpl-abc"))
    assert writer.event("route")[:2] == [rt.corr_id, a]
    got = {}

    def one(i):
        got[i] = router.route(eps(A), {}, {}, None, token_ids=t, request_id=f"r-{i}")

    th = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    assert {i: r.corr_id for i, r in got.items()} == {i: kvidx.corr_id(f"r-{i}") for i in range(4)}
    made_up = router.route(eps(A), {}, {}, None, token_ids=t)
    assert made_up.request_id.startswith(f"kvidx-{os.getpid()}-")
    assert router.report_outcome(rt, A, 16, 32) is True
    assert writer.event("outcome")[:2] == [rt.corr_id, a]


class _Tokenizer:
    """A vLLM /tokenize stand-in on loopback: one token per byte (as kvidx-fakepod's)."""

    def __init__(self):
        import http.server
        seen = self.seen = []

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append((self.path, body))
                text = body.get("prompt") or "".join(
                    f"<|{m['role']}|>\n{m['content']}\n" for m in body["messages"]) + "<|assistant|>\n"
                out = json.dumps({"tokens": list(text.encode())}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def test_text_and_chat_requests_are_tokenized_and_scored(writer):
    """Issue 22, item 10: a text prompt and chat messages are keyed through the endpoint's
    /tokenize (before: nothing was tokenized, such requests were never scored or committed)."""
    tok = _Tokenizer()
    try:
        pod = writer.pod(pod_name(tok.url))
        router = KvidxRouter(index=writer.name, model="m")
        text = "The quick brown fox jumps over the lazy dog, twice."  # 51 bytes: 3 blocks
        rt = router.route(eps(tok.url), {}, {}, None, request_json={"model": "m", "prompt": text})
        assert tok.seen[0] == ("/tokenize", {"prompt": text, "model": "m"})
        assert writer.event("route")[:3] == [rt.corr_id, pod, 3]
        again = router.route(eps(tok.url), {}, {}, None, request_json={"model": "m", "prompt": text})
        assert (again.blocks, again.spec_blocks) == (3, 3)  # its own prediction found
        assert writer.event("route")[:3] == [again.corr_id, pod, 3]
        msgs = [{"role": "user", "content": "x" * 40}]
        router.route(eps(tok.url), {}, {}, None, request_json={"model": "m", "messages": msgs})
        assert tok.seen[-1][1]["messages"] == msgs and tok.seen[-1][1]["add_generation_prompt"]
        assert writer.event("route")[2] == 4  # "<|user|>\n" + 40 + "\n<|assistant|>\n": 64 tokens
    finally:
        tok.close()
