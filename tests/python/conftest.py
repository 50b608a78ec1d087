"""conftest.py — fixtures of the Python binding's tests: a scripted index (tests/testidx.c,
as a child process) and the C tools that give the reference answers (kvidx-hash for keys,
`testidx score` for kvidx_score()). The tools are found through KVIDX_BIN (set by `make test`)."""
import os
import queue
import subprocess
import threading
import uuid

import pytest

BIN = os.environ.get("KVIDX_BIN") or os.path.join(os.path.dirname(__file__), "../../build/bin")
DEADLINE = 10.0  # how long any wait for the writer may take before the test fails


def tool(name):
    path = os.path.join(BIN, name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built (run make test, or set KVIDX_BIN)")
    return path


class Writer:
    """testidx write NAME: an index of the test's own, driven one command per line."""

    def __init__(self, algo="cbor-fnv", seed="", block_size=16):
        self.name = "t-py-" + uuid.uuid4().hex[:12]
        self.algo, self.seed, self.block_size = algo, seed, block_size
        self.proc = subprocess.Popen([tool("testidx"), "write", self.name, algo, seed, str(block_size)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.replies, self.events = queue.Queue(), queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self._reply() == "ready"

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            (self.events if line.startswith(("route ", "outcome ")) else self.replies).put(line)
        self.replies.put(None)

    def _reply(self):
        try:
            line = self.replies.get(timeout=DEADLINE)
        except queue.Empty:
            pytest.fail("testidx did not answer")
        assert line is not None, "testidx exited"
        return line

    def cmd(self, *words):
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        line = self._reply()
        assert not line.startswith("error"), f"{words[0]}: {line}"
        return int(line.split()[1])

    def pod(self, name, model="m"):
        return self.cmd("pod", name, model)

    def store(self, pod, tier, keys):
        return self.cmd("store", pod, tier, *("%x" % k for k in keys))

    def spec(self, pod, ttl_ms, keys):
        return self.cmd("spec", pod, ttl_ms, *("%x" % k for k in keys))

    def event(self, kind):
        """The next route/outcome line the writer printed, as a list of ints."""
        while True:
            try:
                line = self.events.get(timeout=DEADLINE)
            except queue.Empty:
                pytest.fail(f"no {kind} reached the writer")
            words = line.split()
            if words[0] == kind:
                return [int(w) for w in words[1:]]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=DEADLINE)


@pytest.fixture
def writer():
    w = Writer()
    yield w
    w.close()


@pytest.fixture
def make_writer():
    made = []

    def make(**kw):
        made.append(Writer(**kw))
        return made[-1]
    yield make
    for w in made:
        w.close()


def hash_keys(tokens, model="", algo="cbor-fnv", seed="", block_size=16, lora=None, salt=None, mm=()):
    """kvidx-hash's keys for tokens, as a list of ints."""
    args = [tool("kvidx-hash"), "--algo", algo, "--seed", seed, "--model", model,
            "--block-size", str(block_size)]
    if lora is not None:
        args += ["--lora", lora]
    if salt is not None:
        args += ["--salt", salt]
    for start, length, ident in mm:
        args += ["--mm", f"{start}:{length}:{ident}"]
    out = subprocess.run(args, input=" ".join(map(str, tokens)), capture_output=True, text=True, check=True)
    return [int(line, 16) for line in out.stdout.split()]


def c_score(name, keys, cand=None):
    """kvidx_score()'s rows for keys (testidx score), as dicts."""
    cands = ",".join(map(str, cand)) if cand else "-"
    out = subprocess.run([tool("testidx"), "score", name, cands, *("%x" % k for k in keys)],
                         capture_output=True, text=True, check=True)
    rows = []
    for line in out.stdout.splitlines():
        f = dict(w.split("=", 1) for w in line.split())
        rows.append({k: (float(v) if k == "score" else v if k == "name" else int(v)) for k, v in f.items()})
    return rows
