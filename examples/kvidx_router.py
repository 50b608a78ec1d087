"""kvidx_router.py — a prefix-cache-aware router for vLLM's production-stack, on kvidx.

KvidxRouter has the shape of production-stack's RoutingInterface (vllm_router/routers/
routing_logic.py): route_request(endpoints, engine_stats, request_stats, request,
request_json=None) -> the chosen endpoint's URL. It tokenizes nothing: the prompt's token ids
come as token_ids=..., or as an OpenAI completions request whose "prompt" is a list of token
ids (request_json["prompt"]). Endpoints are anything with a .url ("http://10.0.0.1:8000");
their kvidx pod names are "ip:port", as kvidx-ingestd names pods.

Policy: the endpoint whose pod holds the longest tier-weighted prefix (kvidx's score, which
counts unconfirmed predictions too) wins if it matches at least min_blocks blocks; ties and
misses go to the least loaded endpoint (request_stats' in-flight requests), then round robin.
The decision is committed (kvidx_commit), so the next request with this prefix finds the
prediction before vLLM's events confirm it; report_outcome() passes vLLM's cached_tokens on.

One kvidx.Reader per thread and per process, opened on first use (so it works in forked
workers and thread pools without setup). Run it with Debian's python3 and the kvidx module
on PYTHONPATH (`make python`, then PYTHONPATH=build/python).
"""
import itertools
import os
import threading
from urllib.parse import urlsplit

import kvidx

DEFAULT_PORTS = {"http": 80, "https": 443}


def pod_name(url):
    """kvidx pod name of an endpoint URL: "http://10.0.0.1:8000/v1" -> "10.0.0.1:8000"."""
    u = urlsplit(url if "//" in url else "//" + url)
    port = u.port or DEFAULT_PORTS.get(u.scheme, 80)
    host = u.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class KvidxRouter:
    """route_request(endpoints, engine_stats, request_stats, request, ...) -> url."""

    def __init__(self, index=None, model=None, min_blocks=1, commit=True, weights=None):
        self.index, self.model = index, model
        self.min_blocks, self.commit, self.weights = min_blocks, commit, weights
        self._local = threading.local()
        self._rr = itertools.count()
        self._corr = itertools.count(1)
        self.last = None  # the last decision (url, pod, blocks, spec_blocks, corr_id), for logs

    def reader(self):
        """This thread's Reader, opened after any fork (one per thread and process)."""
        loc = self._local
        if getattr(loc, "pid", None) != os.getpid():
            loc.reader, loc.pid = kvidx.Reader(self.index), os.getpid()
        return loc.reader

    @staticmethod
    def _load(url, request_stats):
        s = (request_stats or {}).get(url)
        if s is None:
            return 0
        return getattr(s, "in_prefill_requests", 0) + getattr(s, "in_decoding_requests", 0)

    def route_request(self, endpoints, engine_stats, request_stats, request, request_json=None,
                      token_ids=None, lora=None, salt=None):
        if not endpoints:
            raise ValueError("no endpoints to route to")
        urls = [e.url if hasattr(e, "url") else str(e) for e in endpoints]
        body = request_json or {}
        if token_ids is None:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
                token_ids = prompt
        model = self.model or body.get("model") or ""
        r = self.reader()
        names = [pod_name(u) for u in urls]
        rows = {}
        keys = None
        if token_ids is not None:
            keys = r.keys(token_ids, model, lora=lora, salt=salt)
            rows = {s.pod: s for s in r.score(keys, pods=names, weights=self.weights)}
        best = None
        for i, name in enumerate(names):
            s = rows.get(name)
            if s is None or s.blocks < self.min_blocks:
                continue
            if best is None or s.score > rows[names[best]].score or (
                    s.score == rows[names[best]].score and
                    self._load(urls[i], request_stats) < self._load(urls[best], request_stats)):
                best = i
        if best is None:  # no prefix anywhere: least loaded, ties in turn
            loads = [self._load(u, request_stats) for u in urls]
            least = [i for i, x in enumerate(loads) if x == min(loads)]
            best = least[next(self._rr) % len(least)]
        url, name = urls[best], names[best]
        s = rows.get(name)
        corr = next(self._corr)
        if self.commit and keys is not None and len(keys) and s is not None:
            r.commit(keys[:kvidx.MAX_COMMIT_KEYS], s.index, corr_id=corr, matched_blocks=s.blocks,
                     matched_spec=s.spec_blocks)
        self.last = (url, name, s.blocks if s else 0, s.spec_blocks if s else 0, corr)
        return url

    def report_outcome(self, corr_id, url, cached_tokens, prompt_tokens):
        """vLLM's usage.prompt_tokens_details.cached_tokens for a routed request."""
        try:
            return self.reader().report_outcome(corr_id, pod_name(url), cached_tokens, prompt_tokens)
        except KeyError:
            return False
