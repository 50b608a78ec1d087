"""test_example_router.py — examples/kvidx_router.py, production-stack's RoutingInterface shape,
on a scripted index: prefix wins, tier weights, predictions from its own commits, the
fallback to the least loaded endpoint, endpoint URLs mapped to pod names, outcomes."""
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../examples"))

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
    assert router.route_request(eps(A, B, C), {}, {}, None, request_json={"model": "m", "prompt": t}) == B
    assert router.last[1:3] == ("10.0.0.2:8000", 5)
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
    # No token ids (a chat request it cannot key): still routed.
    assert router.route_request(eps(A), {}, {}, None, request_json={"messages": []}) == A
    # An endpoint the index does not know is routable, just never matched.
    assert router.route_request(eps("http://10.9.9.9:1"), {}, {}, None, token_ids=t) == "http://10.9.9.9:1"


def test_commits_make_the_next_request_stick(writer):
    a, b = writer.pod("10.0.0.1:8000"), writer.pod("10.0.0.2:8000")
    router = KvidxRouter(index=writer.name, model="m")
    t = list(range(5000, 5000 + 16 * 6))
    first = router.route_request(eps(A, B), {}, {}, None, token_ids=t)
    corr = router.last[4]
    route = writer.event("route")
    assert route[:3] == [corr, a if first == A else b, 6] and route[3] == 6
    # No event confirmed anything, yet a follow-up with this prefix goes to the same pod, and
    # does so even when the other endpoint is less loaded.
    stats = {first: load(2, 2)}
    again = router.route_request(eps(A, B), {}, stats, None, token_ids=t + [1, 2, 3])
    assert again == first
    assert router.last[2:4] == (6, 6)
    assert router.report_outcome(corr, first, 64, 96) is True
    assert writer.event("outcome") == [corr, a if first == A else b, 64, 96]
    assert router.report_outcome(corr, "http://10.9.9.9:1", 0, 1) is False
