"""kvidx_router.py — a prefix-cache-aware router for vLLM's production-stack, on kvidx.

KvidxRouter has the shape of production-stack's RoutingInterface (vllm_router/routers/
routing_logic.py): route_request(endpoints, engine_stats, request_stats, request,
request_json=None) -> the chosen endpoint's URL. route() does the same and returns the whole
decision, a Route (url, pod, request_id, corr_id, blocks, spec_blocks), which the caller keeps
with its request and hands back to report_outcome().

Token ids: token_ids=..., or an OpenAI completions request whose "prompt" is a list of ids;
else the prompt text or the chat messages are tokenized by the tokenizer given (a callable
(url, body) -> list of ids, or None), by default vLLM's own POST /tokenize on the first
endpoint (vllm_tokenize below), so text and chat requests are scored too. Endpoints are
anything with a .url ("http://10.0.0.1:8000"); their kvidx pod names are "ip:port", as
kvidx-ingestd names pods.

Policy: the endpoint whose pod holds the longest tier-weighted prefix (kvidx's score, which
counts unconfirmed predictions too) wins if it matches at least min_blocks blocks; ties and
misses go to the least loaded endpoint (request_stats' in-flight requests), then round robin.
The decision is committed (kvidx_commit), so the next request with this prefix finds the
prediction before vLLM's events confirm it; report_outcome() passes vLLM's cached_tokens on.

Correlation: each request's id (request_id=, else the request's X-Request-Id header, else one
made up) becomes its correlation id through kvidx.corr_id(); ingestd keys routes by the
committing reader and that id, so workers never take each other's outcomes. Report the outcome
from the thread that routed the request (its Reader committed it).

One kvidx.Reader per thread and per process, opened on first use (so it works in forked
workers and thread pools without setup). Run it with Debian's python3 and the kvidx module
on PYTHONPATH (`make python`, then PYTHONPATH=build/python).
"""
import itertools
import json
import os
import threading
import urllib.request
from collections import namedtuple
from urllib.parse import urlsplit

import kvidx

DEFAULT_PORTS = {"http": 80, "https": 443}
TOKENIZE_TIMEOUT_S = 2.0

Route = namedtuple("Route", "url pod request_id corr_id blocks spec_blocks")


def pod_name(url):
    """kvidx pod name of an endpoint URL: "http://10.0.0.1:8000/v1" -> "10.0.0.1:8000"."""
    u = urlsplit(url if "//" in url else "//" + url)
    port = u.port or DEFAULT_PORTS.get(u.scheme, 80)
    host = u.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def vllm_tokenize(url, body):
    """Token ids of a completions prompt (text) or chat messages, from vLLM's POST /tokenize
    at url; None when the body has neither or the server does not answer with ids."""
    if isinstance(body.get("prompt"), str):
        req = {"prompt": body["prompt"]}
    elif isinstance(body.get("messages"), list) and body["messages"]:
        req = {"messages": body["messages"], "add_generation_prompt": True}
    else:
        return None
    if body.get("model"):
        req["model"] = body["model"]
    u = urlsplit(url if "//" in url else "http://" + url)
    http = urllib.request.Request(f"{u.scheme or 'http'}://{u.netloc}/tokenize",
                                  data=json.dumps(req).encode(), method="POST",
                                  headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(http, timeout=TOKENIZE_TIMEOUT_S) as resp:
            toks = json.load(resp).get("tokens")
    except (OSError, ValueError):
        return None
    return toks if isinstance(toks, list) and all(isinstance(t, int) for t in toks) else None


def _header(request, name):
    headers = getattr(request, "headers", None)
    return headers.get(name) if headers is not None else None


class KvidxRouter:
    """route_request(endpoints, engine_stats, request_stats, request, ...) -> url."""

    def __init__(self, index=None, model=None, min_blocks=1, commit=True, weights=None,
                 tokenizer=vllm_tokenize):
        self.index, self.model = index, model
        self.min_blocks, self.commit, self.weights = min_blocks, commit, weights
        self.tokenizer = tokenizer
        self._local = threading.local()
        self._rr = itertools.count()
        self._ids = itertools.count(1)

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

    def _token_ids(self, urls, body):
        prompt = body.get("prompt")
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return prompt
        return self.tokenizer(urls[0], body) if self.tokenizer else None

    def _pick(self, urls, names, rows, request_stats):
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
        return best

    def route(self, endpoints, engine_stats, request_stats, request, request_json=None,
              token_ids=None, lora=None, salt=None, request_id=None):
        """The decision for one request, as a Route; keep it for report_outcome()."""
        if not endpoints:
            raise ValueError("no endpoints to route to")
        urls = [e.url if hasattr(e, "url") else str(e) for e in endpoints]
        body = request_json or {}
        if token_ids is None:
            token_ids = self._token_ids(urls, body)
        model = self.model or body.get("model") or ""
        r = self.reader()
        names = [pod_name(u) for u in urls]
        rows, keys = {}, None
        if token_ids is not None:
            keys = r.keys(token_ids, model, lora=lora, salt=salt)
            rows = {s.pod: s for s in r.score(keys, pods=names, weights=self.weights)}
        best = self._pick(urls, names, rows, request_stats)
        url, name = urls[best], names[best]
        s = rows.get(name)
        rid = request_id or _header(request, "x-request-id") or \
            f"kvidx-{os.getpid()}-{next(self._ids)}"
        corr = kvidx.corr_id(rid)
        if self.commit and keys is not None and len(keys) and s is not None:
            r.commit(keys, s.index, corr_id=corr, matched_blocks=s.blocks,
                     matched_spec=s.spec_blocks, prompt_tokens=len(token_ids))
        return Route(url, name, rid, corr, s.blocks if s else 0, s.spec_blocks if s else 0)

    def route_request(self, endpoints, engine_stats, request_stats, request, request_json=None,
                      token_ids=None, lora=None, salt=None, request_id=None):
        """production-stack's RoutingInterface: the chosen endpoint's URL (route() for more)."""
        return self.route(endpoints, engine_stats, request_stats, request, request_json,
                          token_ids, lora, salt, request_id).url

    def report_outcome(self, route, url, cached_tokens, prompt_tokens):
        """vLLM's usage.prompt_tokens_details.cached_tokens for a routed request. route: the
        Route route() returned, or the request id (str) or correlation id (int)."""
        corr = route.corr_id if isinstance(route, Route) else route
        try:
            return self.reader().report_outcome(corr, pod_name(url), cached_tokens, prompt_tokens)
        except KeyError:
            return False
