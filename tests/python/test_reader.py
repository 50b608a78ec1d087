"""test_reader.py — the Python binding (lib/python/kvidx.c) against the C API: attach errors,
keys equal to kvidx-hash's, scores equal to kvidx_score()'s on the same index, commits and
outcomes reaching the writer, thread misuse detected, the fork pattern."""
import array
import errno
import multiprocessing
import os
import random
import subprocess
import sys
import threading

import pytest

import kvidx
from conftest import DEADLINE, c_score, hash_keys, tool


def toks(n, start=1):
    return list(range(start, start + n))


# ---- attach, info, pods, argument errors ----

def test_attach_errors():
    with pytest.raises(kvidx.Error) as e:
        kvidx.Reader("t-py-no-such-index")
    assert e.value.errno == errno.ENOENT
    # The message names the index and says what to check (issue 22, item 8).
    assert "t-py-no-such-index" in e.value.strerror
    assert "kvidx-ingestd running" in e.value.strerror
    assert kvidx.strerror(errno.ENOENT) == os.strerror(errno.ENOENT)
    with pytest.raises(kvidx.Error) as e:
        kvidx.Reader("bad/name")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(TypeError):
        kvidx.Reader(42)


def test_kvidx_codes_have_kvidx_messages():
    assert "version" in kvidx.strerror(kvidx.EVERSION).lower()
    assert kvidx.strerror(kvidx.ENOPOD) != kvidx.strerror(kvidx.ENOSLOT)


def test_info_and_pods(make_writer):
    w = make_writer(algo="xxh64", seed="s33d", block_size=4)
    a, b = w.pod("10.0.0.1:8000", "llama"), w.pod("10.0.0.2:8000", "qwen")
    with kvidx.Reader(w.name) as r:
        info = r.info()
        assert (info["name"], info["algo"], info["seed"], info["block_size"]) == (w.name, "xxh64", "s33d", 4)
        assert info["writer_pid"] == w.proc.pid
        assert info["max_pods"] == 64
        assert r.pods() == [(a, "10.0.0.1:8000", "llama"), (b, "10.0.0.2:8000", "qwen")]
        assert r.pods()[1].name == "10.0.0.2:8000"
        assert r.pod_index("10.0.0.2:8000") == b
        with pytest.raises(KeyError):
            r.pod_index("10.9.9.9:1")
    assert r.closed
    with pytest.raises(ValueError):
        r.info()


def test_bad_arguments(writer):
    r = kvidx.Reader(writer.name)
    with pytest.raises(TypeError):
        r.keys(["a", "b"], "m")
    with pytest.raises(TypeError, match="uint32"):
        r.keys(array.array("i", [1, 2]), "m")  # signed
    with pytest.raises(TypeError, match="uint32"):
        r.keys(array.array("Q", [1, 2]), "m")  # wrong width
    with pytest.raises(OverflowError):
        r.keys([1, 2**32], "m")
    with pytest.raises(OverflowError):
        r.keys([-1], "m")
    with pytest.raises(TypeError, match="mm"):
        r.keys(toks(16), "m", mm=[(0, 4)])
    with pytest.raises(TypeError, match="uint64"):
        r.score(array.array("I", [1, 2]))
    with pytest.raises(KeyError):
        r.commit([1], "no-such-pod")
    with pytest.raises(KeyError):
        r.score([1], weights={"tpu": 1.0})


def test_strings_and_ranges_refused_not_wrapped(writer):
    a = writer.pod("10.0.0.1:8000")
    r = kvidx.Reader(writer.name)
    keys = r.keys(toks(32), "m")
    with pytest.raises(TypeError, match=r"pods=\['10.0.0.1:8000'\]"):
        r.score(keys, pods="10.0.0.1:8000")  # was [] (the string iterated as names)
    with pytest.raises(OverflowError, match="corr_id"):
        r.commit(keys, a, corr_id=2**64)  # was wrapped to 0
    with pytest.raises(OverflowError, match="corr_id"):
        r.commit(keys, a, corr_id=-1)
    with pytest.raises(TypeError, match="corr_id"):
        r.commit(keys, a, corr_id=1.5)
    with pytest.raises(OverflowError, match="count"):
        r.report_outcome(1, a, -16, 64)  # was 2**32 - 16
    with pytest.raises(OverflowError, match="count"):
        r.commit(keys, a, corr_id=1, matched_blocks=2**32)
    with pytest.raises(TypeError):
        r.report_outcome(1, a, True, 64)


def test_request_id_strings_are_correlation_ids(writer):
    a = writer.pod("10.0.0.1:8000")
    r = kvidx.Reader(writer.name)
    assert kvidx.corr_id("a") == 0xaf63dc4c8601ec8c  # kvidx_corr_id(), test_keys.c
    assert kvidx.corr_id(b"req-7") == kvidx.corr_id("req-7") != kvidx.corr_id("req-8")
    assert kvidx.corr_id("") == 0xcbf29ce484222325
    with pytest.raises(TypeError):
        kvidx.corr_id(7)
    keys = r.keys(toks(32), "m")
    assert r.commit(keys, a, corr_id="chatcmpl-42")  # what the README passes
    assert writer.event("route")[0] == kvidx.corr_id("chatcmpl-42")
    assert r.report_outcome("chatcmpl-42", a, 16, 32)
    assert writer.event("outcome")[:2] == [kvidx.corr_id("chatcmpl-42"), a]


def test_signatures_for_editors():
    import inspect
    assert str(inspect.signature(kvidx.Reader.commit)) == (
        "(self, /, keys, pod, corr_id=0, prefill_pod=None, matched_blocks=0, matched_spec=0, "
        "prompt_tokens=0)")
    for f in (kvidx.Reader.info, kvidx.Reader.pods, kvidx.Reader.keys, kvidx.Reader.score,
              kvidx.Reader.load, kvidx.Reader.report_outcome, kvidx.Reader.pod_index,
              kvidx.Reader.close, kvidx.corr_id, kvidx.strerror):
        inspect.signature(f)  # raises ValueError without a __text_signature__


# ---- keys ----

EXTRAS = [
    {},
    {"lora": "sql-adapter"},
    {"salt": "s3cret"},
    {"salt": ""},
    {"mm": [(20, 12, "img0")]},
    {"mm": [(40, 40, "img-long"), (2, 3, "a:b"), (2, 1, "same-start")]},  # spans, order, ':'
    {"mm": [(90, 50, "past-the-end"), (300, 4, "beyond")]},
    {"mm": [(17, 0, "zero-len"), (32, 0, "zero-on-boundary")]},
    {"mm": [(0, 8, "x"), (4, 16, "overlap")], "salt": "pepper", "lora": "adapter-1"},
]


@pytest.mark.parametrize("algo,seed,bs", [("cbor-fnv", "", 16), ("xxh64", "", 16), ("cbor-fnv", "42", 4),
                                          ("xxh64", "seed", 7)])
@pytest.mark.parametrize("extras", EXTRAS, ids=lambda e: "+".join(e) or "plain")
def test_keys_equal_kvidx_hash(make_writer, algo, seed, bs, extras):
    w = make_writer(algo=algo, seed=seed, block_size=bs)
    r = kvidx.Reader(w.name)
    t = [random.Random(7).randrange(2**32) for _ in range(100)]
    want = hash_keys(t, model="m", algo=algo, seed=seed, block_size=bs, **extras)
    assert len(want) == 100 // bs
    got = r.keys(t, "m", **extras)
    assert isinstance(got, array.array) and got.typecode == "Q"
    assert list(got) == want
    assert list(r.keys(array.array("I", t), "m", **extras)) == want
    assert list(r.keys(tuple(t), model="m", **extras)) == want
    if not extras:
        assert list(r.keys(t, "other")) != want


def test_keys_from_numpy(writer):
    np = pytest.importorskip("numpy")
    r = kvidx.Reader(writer.name)
    t = np.arange(1, 1 + 8192, dtype=np.uint32)
    want = hash_keys(t.tolist(), model="m")
    assert list(r.keys(t, "m")) == want
    assert list(r.keys(t[::2], "m")) == hash_keys(t[::2].tolist(), model="m")  # strided: converted
    with pytest.raises(TypeError, match="uint32"):
        r.keys(t.astype(np.int64), "m")  # a buffer of another type is refused, not cast
    assert list(r.score(np.array(want, dtype=np.uint64))) == list(r.score(want))


# ---- scoring against the C API ----

TIERS = ["gpu", "cpu", "disk", "other"]


def build_random_index(w, rng, npods=6, nprompts=5, nblocks=40):
    """Pods holding random prefixes of random prompts on random tiers, some predicted."""
    pods = [w.pod(f"10.0.1.{i}:8000") for i in range(npods)]
    prompts = []
    for p in range(nprompts):
        t = [rng.randrange(2**32) for _ in range(16 * nblocks)]
        keys = hash_keys(t, model="m")
        prompts.append((t, keys))
        for pod in rng.sample(pods, 4):
            n = rng.randrange(1, nblocks + 1)
            for tier in rng.sample(TIERS, rng.randrange(1, 3)):
                m = rng.randrange(1, n + 1)
                w.store(pod, tier, keys[:m])
            if rng.random() < 0.4:
                w.spec(pod, 60000, keys[n:n + rng.randrange(1, 10)])
            if rng.random() < 0.3:  # a gap
                w.cmd("remove", pod, "any", "%x" % keys[rng.randrange(n)])
    return pods, prompts


def as_c(row):
    return {"pod": row.index, "name": row.pod, "blocks": row.blocks, "spec": row.spec_blocks,
            "gpu": row.gpu_run, "cpu": row.cpu_run, "disk": row.disk_run, "other": row.other_run,
            "spec_run": row.spec_run, "score": row.score}


def test_scores_equal_c_api(writer):
    rng = random.Random(12)
    pods, prompts = build_random_index(writer, rng)
    r = kvidx.Reader(writer.name)
    nonzero = 0
    for t, keys in prompts:
        assert list(r.keys(t, "m")) == keys
        for cand in (None, pods[:3], [pods[5], pods[0]]):
            want = c_score(writer.name, keys, cand)
            got = r.score(r.keys(t, "m"), pods=cand)
            assert [as_c(x) for x in got] == want
            names = None if cand is None else [f"10.0.1.{p}:8000" for p in cand]
            assert r.score(keys, pods=names) == got
            nonzero += sum(1 for x in got if x.blocks)
    assert nonzero > 5, "the random index should match something"


def test_score_runs_and_weights(writer):
    a, b = writer.pod("10.0.0.1:8000"), writer.pod("10.0.0.2:8000")
    keys = hash_keys(toks(64), model="m")
    writer.store(a, "gpu", keys[:3])
    writer.store(a, "cpu", keys[:4])
    writer.spec(b, 60000, keys[:2])
    r = kvidx.Reader(writer.name)
    ra, rb = r.score(keys)
    assert (ra.pod, ra.blocks, ra.gpu_run, ra.cpu_run, ra.disk_run, ra.spec_run) == ("10.0.0.1:8000", 4, 3, 4, 0, 0)
    assert ra.score == pytest.approx(3 * 1.0 + 0.8)
    assert (rb.pod, rb.blocks, rb.spec_blocks, rb.spec_run, rb.gpu_run) == ("10.0.0.2:8000", 2, 2, 2, 0)
    ra, rb = r.score(keys, weights={"cpu": 0.25, "gpu": 0.5, "speculative": 0.0})
    assert ra.score == pytest.approx(3 * 0.5 + 0.25) and rb.score == 0.0
    assert [x.pod for x in r.score(keys, pods=["10.0.0.2:8000", "10.9.9.9:1"])] == ["10.0.0.2:8000"]
    assert r.score([], pods=[a]) == [(("10.0.0.1:8000"), a, 0, 0, 0, 0, 0, 0, 0, 0.0)]
    assert r.score(hash_keys(toks(64), model="other")) == []


# ---- commits, outcomes, a second process ----

SECOND = """
import sys, kvidx
r = kvidx.Reader(sys.argv[1])
keys = r.keys(list(range(1, 65)), "m")
print(" ".join("%s:%d:%d" % (s.pod, s.blocks, s.spec_blocks) for s in r.score(keys)))
"""


def test_commit_seen_by_second_process(writer):
    a = writer.pod("10.0.0.1:8000")
    r = kvidx.Reader(writer.name)
    keys = r.keys(toks(64), "m")
    assert r.score(keys) == []
    assert r.commit(keys, "10.0.0.1:8000", corr_id=77, matched_blocks=0) is True
    assert writer.event("route") == [77, a, 4, 4]
    out = subprocess.run([sys.executable, "-c", SECOND, writer.name], capture_output=True, text=True,
                         check=True, env=dict(os.environ), timeout=DEADLINE).stdout.split()
    assert out == ["10.0.0.1:8000:4:4"]
    # A second commit on the same keys adds nothing (trusted one TTL from the first).
    assert r.commit(keys, a, corr_id=78)
    assert writer.event("route") == [78, a, 4, 0]
    # A longer prompt is not refused for its length: its first MAX_COMMIT_KEYS keys go (343
    # messages: more than testidx's 256-entry ring holds, so dropped as full, not an error).
    assert r.commit(array.array("Q", range(kvidx.MAX_COMMIT_KEYS + 1)), a, corr_id=79) is False


def test_outcome_counted(writer):
    a = writer.pod("10.0.0.1:8000")
    r = kvidx.Reader(writer.name)
    assert r.report_outcome(91, "10.0.0.1:8000", cached_tokens=48, prompt_tokens=64) is True
    assert writer.event("outcome") == [91, a, 48, 64]
    assert r.report_outcome(92, a, 0, 10)
    assert writer.event("outcome") == [92, a, 0, 10]


def test_full_ring_is_false_not_an_error(writer):
    a = writer.pod("10.0.0.1:8000")
    writer.cmd("pause", a, 0)  # any command: the writer is alive
    r = kvidx.Reader(writer.name)
    writer.proc.send_signal(19)  # SIGSTOP: nothing drains the ring (256 entries in testidx)
    try:
        results = [r.report_outcome(i, a, 0, 1) for i in range(300)]
    finally:
        writer.proc.send_signal(18)  # SIGCONT
    assert results[0] is True and results[-1] is False
    assert results.index(False) <= 256


# ---- threads ----

def test_two_threads_on_one_reader_detected(writer):
    a = writer.pod("10.0.0.1:8000")
    keys = hash_keys(toks(16 * 2000), model="m")
    for i in range(0, len(keys), 500):
        writer.store(a, "gpu", keys[i:i + 500])
    r = kvidx.Reader(writer.name)
    big = array.array("Q", keys)
    stop, errors = threading.Event(), []

    def hammer():
        while not stop.is_set():
            try:
                r.score(big)
            except kvidx.ConcurrentUseError as e:
                errors.append(e)

    th = threading.Thread(target=hammer)
    th.start()
    try:
        for _ in range(20000):
            try:
                r.score(big)
            except kvidx.ConcurrentUseError as e:
                errors.append(e)
            if errors:
                break
    finally:
        stop.set()
        th.join()
    assert errors, "two threads scored on one Reader and nothing noticed"
    assert "two threads" in str(errors[0])
    assert r.score(big)[0].blocks == 2000  # still usable by one thread


def test_one_reader_per_thread_is_fine(writer):
    a = writer.pod("10.0.0.1:8000")
    keys = hash_keys(toks(16 * 64), model="m")
    writer.store(a, "gpu", keys)
    results = []

    def work():
        r = kvidx.Reader(writer.name)
        results.append(all(r.score(keys)[0].blocks == 64 for _ in range(200)))
    ths = [threading.Thread(target=work) for _ in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert results == [True] * 4


# ---- fork ----

_worker_reader = None


def _init_worker(name):
    global _worker_reader
    _worker_reader = kvidx.Reader(name)  # the documented pattern: open after fork


def _route(tokens):
    s = _worker_reader.score(_worker_reader.keys(tokens, "m"))
    return os.getpid(), [(x.pod, x.blocks) for x in s]


def test_fork_pattern(writer):
    a = writer.pod("10.0.0.1:8000")
    writer.store(a, "gpu", hash_keys(toks(48), model="m"))
    parent = kvidx.Reader(writer.name)
    with multiprocessing.get_context("fork").Pool(2, initializer=_init_worker, initargs=(writer.name,)) as pool:
        got = pool.map(_route, [toks(48)] * 8 + [toks(32)] * 8)
    assert [g[1] for g in got] == [[("10.0.0.1:8000", 3)]] * 8 + [[("10.0.0.1:8000", 2)]] * 8
    assert os.getpid() not in {g[0] for g in got}
    assert parent.score(parent.keys(toks(48), "m"))[0].blocks == 3


def test_inherited_reader_refused_in_child(writer):
    a = writer.pod("10.0.0.1:8000")
    writer.store(a, "gpu", hash_keys(toks(16), model="m"))
    r = kvidx.Reader(writer.name)
    slot_users = r.info()
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's Reader must refuse, then be dropped harmlessly
        code = 1
        try:
            r.info()
        except kvidx.Error as e:
            code = 0 if "another process" in str(e) else 2
        del_ok = True
        try:
            del r  # must not free the parent's registry slot
        except Exception:
            del_ok = False
        os.write(wr, bytes([code if del_ok else 3]))
        os._exit(0)
    os.close(wr)
    code = os.read(rd, 1)
    os.close(rd)
    os.waitpid(pid, 0)
    assert code == b"\x00"
    assert r.info()["generation"] == slot_users["generation"]
    assert r.score(r.keys(toks(16), "m"))[0].blocks == 1


def test_load_rows_equal_c():
    """The load view as Python reads it equals what the C reader reads (tests/gohelper.c
    build: random rows on an index with removed and reused pods; the Go test does the same)."""
    name = f"t-py-load-{os.getpid()}"
    helper = subprocess.Popen([tool("kvidx-gohelper"), "build", name, "7"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        rows = []
        for line in helper.stdout:
            if line.strip() == "END":
                break
            if line.startswith("W "):
                rows.append(line.split())
        r = kvidx.Reader(name)
        seen = 0
        for _, pod, want in rows:
            if want == "-":
                with pytest.raises(kvidx.Error) as e:
                    r.load(int(pod))
                continue
            got = r.load(int(pod))
            assert ",".join(str(v) for v in got) == want, f"pod {pod}"
            assert (got.inflight, got.prefill_tokens) == tuple(got)[:2]
            seen += 1
        assert seen >= 5 and len(rows) == 16
        r.close()
    finally:
        helper.stdin.close()
        helper.wait(timeout=DEADLINE)
