# kvidx — one plain GNU Makefile.
# Targets: all (default) test python stress model bench bench-quick run install clean setup.
# Variables: CC CFLAGS PREFIX DESTDIR LIBDIR SAN=address|undefined|thread V=1 BUILD=dir.

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
SAN     ?=
OPT     ?= -O2
BUILD   ?= build$(if $(SAN),-$(SAN))

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wpointer-arith -Wcast-align -Wformat=2 -Wno-unused-parameter
CFLAGS  ?= $(OPT) -g
KV_CFLAGS = -std=gnu11 $(WARN) -D_GNU_SOURCE -fPIC -MMD -MP $(INC) \
            $(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer) $(CFLAGS)
KV_LDFLAGS := $(if $(SAN),-fsanitize=$(SAN)) $(LDFLAGS)

# Include paths per folder: a folder sees its own headers and the layers below it, so an
# upward include (lib/ including a tool's header, the codec including the library) fails to
# build. Layers, bottom up: lib/ + shm/ (libkvidx), tools/proto/ (wire protocols, standalone),
# tools/common/ (shared by the tools), then each tool; tests/ and bench/ see what they test.
INC_LIB    := -Ilib -Ishm
INC_COMMON := -Itools/common $(INC_LIB)
INC_TOOL   := -Itools/proto $(INC_COMMON)
$(BUILD)/lib/%.o:                  INC = $(INC_LIB)
$(BUILD)/shm/%.o:                  INC = -Ishm
$(BUILD)/tools/proto/%.o:          INC = -Itools/proto
$(BUILD)/tools/common/%.o:         INC = $(INC_COMMON)
$(BUILD)/tools/%.o:                INC = $(INC_TOOL)
$(BUILD)/tools/ingestd/%.o:        INC = -Itools/ingestd $(INC_TOOL)
$(BUILD)/tools/fakepod/%.o:        INC = -Itools/fakepod $(INC_TOOL)
$(BUILD)/tools/route/%.o:          INC = -Itools/route $(INC_TOOL)
$(BUILD)/tools/ttl/%.o:            INC = -Itools/ttl $(INC_TOOL)
$(BUILD)/tests/%.o:                INC = -Itests -Itools/ingestd -Itools/route $(INC_TOOL)
$(BUILD)/bench/%.o:                INC = -Ibench $(INC_COMMON)

# External libraries, per binary: each links what it uses and nothing more.
LIBS_CORE   := -lxxhash -lpthread -lrt
LIBS_WIRE   := -lzmq -lmsgpackc
LIBS_INGEST := $(LIBS_WIRE) -lmicrohttpd -ljemalloc -lresolv -lcurl -ljansson
LIBS_NATS   := -lnats
LIBS_HTTP   := -lmicrohttpd -lcurl -ljansson
LIBS_TEST   := -lcriterion -lcurl -ljansson

# Debian packages: BUILD_PKGS to build the library and the tools (`make` checks for them and
# names the missing ones); DEB_PKGS for everything, installed by `make setup`, which test,
# stress, bench and run call first.
BUILD_PKGS := build-essential pkg-config libjemalloc-dev libmsgpack-dev libxxhash-dev \
              libzmq3-dev libmicrohttpd-dev libcurl4-openssl-dev libjansson-dev libnats-dev
DEB_PKGS   := $(BUILD_PKGS) libck-dev liburcu-dev libcriterion-dev libhiredis-dev redis-server clang libclang-rt-14-dev \
              curl python3-cbor2 python3-dev python3-pytest python3-setuptools python3-numpy python3-pip golang-go spin \
              prometheus libxml2-utils python3-yaml systemd dnsmasq nats-server

# The shared library's version (docs/api.md "ABI rules"): MAJOR is in the soname and changes only
# with an incompatible ABI; a minor release adds symbols (in a new node of lib/kvidx.map).
KVIDX_MAJOR   := 1
KVIDX_VERSION := 1.0.0
SONAME        := libkvidx.so.$(KVIDX_MAJOR)
# Headers installed for other projects: kvidx.h, and the writer's header if the tree has one.
PUBLIC_HDRS   := lib/kvidx.h $(wildcard lib/kvidx_writer.h)

ifeq ($(V),1)
Q :=
else
Q := @
endif

LIB_SRCS      := $(wildcard lib/*.c shm/*.c)
LIB_OBJS      := $(LIB_SRCS:%.c=$(BUILD)/%.o)
LIBKVIDX      := $(BUILD)/libkvidx.a
COMMON_A      := $(BUILD)/tools/libcommon.a
PROTO_A       := $(BUILD)/tools/libproto.a
TOOL_ARCHIVES := $(PROTO_A) $(COMMON_A) $(LIBKVIDX)
INGESTD_OBJS  := $(patsubst %.c,$(BUILD)/%.o,$(filter-out tools/ingestd/main.c,$(wildcard tools/ingestd/*.c)))
FAKEPOD_OBJS  := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/fakepod/*.c))
ROUTE_OBJS    := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/route/*.c))
TTL_OBJS      := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/ttl/*.c))
# The tools `make install` installs; kvidx-fakepod, a test double (a simulated vLLM pod), is
# built with them but never installed (it runs from $(BUILD)/bin in the tests and `make run`).
INSTALL_TOOLS := $(patsubst tools/%.c,$(BUILD)/bin/%,$(wildcard tools/kvidx-*.c)) \
                 $(BUILD)/bin/kvidx-ingestd $(BUILD)/bin/kvidx-route $(BUILD)/bin/kvidx-ttl
TOOLS         := $(INSTALL_TOOLS) $(BUILD)/bin/kvidx-fakepod
TEST_SRCS     := $(wildcard tests/test_*.c tests/util*.c)
TEST_OBJS     := $(TEST_SRCS:%.c=$(BUILD)/%.o)
STRESS_SRCS   := $(wildcard tests/stress_*.c)
STRESS        := $(STRESS_SRCS:tests/%.c=$(BUILD)/bin/%)
BENCH_SRCS    := $(wildcard bench/bench_*.c)
BENCHES       := $(BENCH_SRCS:bench/%.c=$(BUILD)/bin/%)

.PHONY: all deps setup list-programs go-test go-bench test timing python stress model fuzz bench bench-quick run install clean
# Keep objects that chained rules build (tests/stress_*.o, bench/*.o) between runs.
.SECONDARY:
all: $(LIBKVIDX) $(BUILD)/libkvidx.so $(TOOLS)

# The dependency probe: stops a build that would fail on a missing header with the one
# apt-get line to run instead. Skipped where dpkg-query does not exist (not Debian).
deps:
	@command -v dpkg-query >/dev/null || exit 0; \
	missing=$$(for p in $(BUILD_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q '^install ok installed' || printf '%s ' $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "kvidx: missing Debian packages; install them with:" >&2; \
	  echo "  sudo apt-get install -y $$missing   (or: make setup)" >&2; exit 1; \
	fi

# Installs whatever Debian package is missing; a no-op (no root, no network) when all are there.
setup:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(KV_CFLAGS) -c $< -o $@

# libkvidx: lib/ and shm/. The tools link the archive, so each takes only the objects it calls
# (and may use the kv_* internals); the shared library exports only kvidx_* (lib/kvidx.map),
# as libkvidx.so.MAJOR.MINOR.PATCH with soname libkvidx.so.MAJOR and the two usual symlinks.
$(LIBKVIDX): $(LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(BUILD)/libkvidx.so.$(KVIDX_VERSION): $(LIB_OBJS) lib/kvidx.map
	$(Q)$(if $(Q),echo "  LD      $@" &&) $(CC) -shared -Wl,-soname,$(SONAME) \
	  -Wl,--version-script=lib/kvidx.map $(if $(SAN),,-Wl,--no-undefined) \
	  -o $@ $(LIB_OBJS) $(KV_LDFLAGS) $(LIBS_CORE)
$(BUILD)/$(SONAME): $(BUILD)/libkvidx.so.$(KVIDX_VERSION)
	$(Q)ln -sf $(notdir $<) $@
$(BUILD)/libkvidx.so: $(BUILD)/$(SONAME)
	$(Q)ln -sf $(notdir $<) $@
$(COMMON_A): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/common/*.c))
	$(Q)rm -f $@ && ar rcs $@ $^
$(PROTO_A): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/proto/*.c))
	$(Q)rm -f $@ && ar rcs $@ $^

# The tools. Libraries per binary: the key calculator and the segment readers need libkvidx
# alone; what speaks ZeroMQ/msgpack adds those; the writer adds libmicrohttpd
# (its metrics endpoint), jemalloc and libnats (the cluster link; only the writer links
# it), libcurl and jansson (HTTP discovery); the fake pod serves HTTP (libmicrohttpd) with JSON
# bodies (jansson); the router worker is an HTTP client (libcurl) and server too.
LINK = @mkdir -p $(dir $@) && $(if $(Q),echo "  LD      $@" &&) $(CC) -o $@ $^ $(KV_LDFLAGS) $(LIBS)
$(BUILD)/bin/kvidx-hash $(BUILD)/bin/kvidx-dump $(BUILD)/bin/kvidx-top: LIBS = $(LIBS_CORE)
$(BUILD)/bin/kvidx-ttl: LIBS = $(LIBS_CORE) -lm
$(BUILD)/bin/kvidx-route: LIBS = $(LIBS_HTTP) $(LIBS_CORE) -lm
$(BUILD)/bin/kvidx-fakepod: LIBS = $(LIBS_WIRE) -lmicrohttpd -ljansson $(LIBS_CORE)
$(BUILD)/bin/kvidx-ingestd: LIBS = $(LIBS_INGEST) $(LIBS_NATS) $(LIBS_CORE)
$(BUILD)/bin/kvidx-ingestd: $(BUILD)/tools/ingestd/main.o $(INGESTD_OBJS) $(TOOL_ARCHIVES)
	$(LINK)
$(BUILD)/bin/kvidx-fakepod: $(FAKEPOD_OBJS) $(TOOL_ARCHIVES)
	$(LINK)
$(BUILD)/bin/kvidx-route: $(ROUTE_OBJS) $(TOOL_ARCHIVES)
	$(LINK)
$(BUILD)/bin/kvidx-ttl: $(TTL_OBJS) $(TOOL_ARCHIVES)
	$(LINK)
$(BUILD)/bin/kvidx-%: $(BUILD)/tools/kvidx-%.o $(TOOL_ARCHIVES)
	$(LINK)

STRESS_UTIL := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/torture_util.c))
BENCH_UTIL  := $(patsubst %.c,$(BUILD)/%.o,$(filter-out bench/bench_%.c,$(wildcard bench/*.c)))
$(BUILD)/bin/stress_%: LIBS = $(LIBS_CORE)
$(BUILD)/bin/stress_%: $(BUILD)/tests/stress_%.o $(STRESS_UTIL) $(LIBKVIDX)
	$(LINK)
$(BUILD)/bin/bench_%: LIBS = -lhiredis -lurcu-cds -lurcu -lck $(LIBS_INGEST) $(LIBS_CORE) -lm
# bench_cluster also speaks NATS (its --fanout mode, bench/cluster_topology.sh).
$(BUILD)/bin/bench_cluster: LIBS = -lhiredis -lurcu-cds -lurcu -lck $(LIBS_INGEST) $(LIBS_NATS) $(LIBS_CORE) -lm
$(BUILD)/bin/bench_%: $(BUILD)/bench/bench_%.o $(BENCH_UTIL) $(COMMON_A) $(LIBKVIDX)
	$(LINK)
# The C side of the Go reader's tests (lib/go/kvidx): index builder, churner, ring drainer.
GOHELPER := $(BUILD)/bin/kvidx-gohelper
$(GOHELPER): LIBS = $(LIBS_CORE)
$(GOHELPER): $(BUILD)/tests/gohelper.o $(LIBKVIDX)
	$(LINK)
$(BUILD)/bin/test_kvidx: LIBS = $(LIBS_TEST) $(LIBS_INGEST) $(LIBS_NATS) $(LIBS_CORE) -lm
# The router's policies and trace reader are tested as units (test_policy.c, test_trace.c).
$(BUILD)/bin/test_kvidx: $(TEST_OBJS) $(INGESTD_OBJS) $(BUILD)/tools/route/policy.o \
                         $(BUILD)/tools/route/trace.o $(TOOL_ARCHIVES)
	$(LINK)

# The Go reader (lib/go/kvidx): standard library only, no module proxy, no cgo; its build
# cache lives in the build directory. The race detector needs cgo for its runtime only.
GO      ?= go
GO_ENV   = GOPROXY=off GOFLAGS= GO111MODULE=on GOCACHE=$(abspath $(BUILD))/go-cache \
           GOPATH=$(abspath $(BUILD))/go-path KVIDX_BIN=$(abspath $(BUILD)/bin) KVIDX_REQUIRE_C=1 \
           KVIDX_TORTURE_SECS=$(TORTURE_SECS)
TORTURE_SECS ?= 3
GO_TEST_ARGS ?=
go-test: setup
	$(Q)$(MAKE) --no-print-directory all $(GOHELPER)
	cd lib/go/kvidx && $(GO_ENV) CGO_ENABLED=0 $(GO) vet ./... && \
	  $(GO_ENV) CGO_ENABLED=0 $(GO) test -count=1 $(GO_TEST_ARGS) ./... && \
	  $(GO_ENV) CGO_ENABLED=1 $(GO) test -count=1 -race -run 'InProcess' ./...

# Go Score vs C kvidx_score on one index, same run (GO_BENCH_KEYS keys, default 8 Mi).
GO_BENCH_KEYS ?= 8388608
go-bench: setup
	$(Q)$(MAKE) --no-print-directory all $(GOHELPER)
	cd lib/go/kvidx && $(GO_ENV) KVIDX_BENCH_KEYS=$(GO_BENCH_KEYS) CGO_ENABLED=0 $(GO) test -count=1 \
	  -run BenchScoreVsC -v -timeout 60m .

# testidx: a scripted writer and a score printer for the tests outside Criterion.
$(BUILD)/bin/testidx: LIBS = $(LIBS_CORE)
$(BUILD)/bin/testidx: $(BUILD)/tests/testidx.o $(LIBKVIDX)
	$(LINK)

# The Python binding (lib/python), built in place into $(BUILD)/python with Debian's
# interpreter (the one the tests run: the extension is built for one interpreter), against
# this tree's header and shared library (an rpath to $(BUILD)).
PYTHON ?= /usr/bin/python3
PY_STAMP := $(BUILD)/python/.built
python: $(PY_STAMP)
$(PY_STAMP): lib/python/kvidx.c lib/python/setup.py lib/kvidx.h $(BUILD)/libkvidx.so
	@mkdir -p $(BUILD)/python
	$(Q)$(if $(Q),echo "  PY      lib/python/kvidx.c" &&) cd lib/python && \
	  KVIDX_INCLUDE_DIR=$(abspath lib) KVIDX_LIBRARY_DIR=$(abspath $(BUILD)) \
	  KVIDX_RPATH=$(abspath $(BUILD)) $(PYTHON) setup.py -q build_ext \
	  --build-lib $(abspath $(BUILD)/python) --build-temp $(abspath $(BUILD)/python/tmp) \
	  $(if $(Q),>/dev/null)
	$(Q)touch $@

# Quick, deterministic checks: the Go reader's tests, one Criterion binary (tests find the
# tools through KVIDX_BIN), then the install test (make install into a temporary DESTDIR, a router built with
# pkg-config against it), then the Python binding's pytest suite. The Criterion suites named
# timing_* check windows of time (a latency bound, an expiry within N ms): a loaded machine
# can fail them, so they run in `make stress` (`make timing` alone), never in `make test`.
TEST_FILTER ?= !(timing_*)/*
TIMING_FILTER ?= timing_*/*
KVIDX_TEST_ENV = KVIDX_BIN=$(abspath $(BUILD)/bin) KVIDX_SRC=$(abspath .) \
                 LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp)
test: setup go-test
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bin/test_kvidx $(BUILD)/bin/testidx
	$(KVIDX_TEST_ENV) $(BUILD)/bin/test_kvidx --jobs 2 --filter '$(TEST_FILTER)' $(TEST_ARGS)
	MAKE="$(MAKE)" BUILD="$(BUILD)" SAN="$(SAN)" CC="$(CC)" tests/install_test.sh
ifeq ($(SAN),)
	$(Q)$(MAKE) --no-print-directory python
	KVIDX_BIN=$(abspath $(BUILD)/bin) PYTHONPATH=$(abspath $(BUILD)/python) PYTHONDONTWRITEBYTECODE=1 \
	  $(PYTHON) -m pytest -q -p no:cacheprovider tests/python
else
	@echo "test: the Python tests (tests/python) run in the build without SAN"
endif

# The programs `make` builds into $(BUILD)/bin, one name a line (tests/check_docs.py counts them).
list-programs:
	@printf '%s\n' $(notdir $(TOOLS))

# Long randomized multi-process torture runs (minutes). STRESS_SECS sets each program's length.
STRESS_SECS ?= 60
stress: setup
	$(Q)$(MAKE) --no-print-directory all $(STRESS)
	$(Q)set -e; for s in $(STRESS); do echo "== $$s ($(STRESS_SECS)s)"; $$s --seconds $(STRESS_SECS); done
	$(Q)$(MAKE) --no-print-directory timing
	$(Q)$(MAKE) --no-print-directory go-test GO_TEST_ARGS='-run Torture' TORTURE_SECS=$(STRESS_SECS)
	$(Q)$(MAKE) --no-print-directory fuzz FUZZ_SECS=$(STRESS_SECS)
	$(Q)$(MAKE) --no-print-directory model

# The timing_* Criterion suites (windows of time), one test at a time: part of `make stress`.
timing: setup
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bin/test_kvidx $(BUILD)/bin/testidx
	$(KVIDX_TEST_ENV) $(BUILD)/bin/test_kvidx --jobs 1 --filter '$(TIMING_FILTER)' $(TEST_ARGS)

# The RCU protocol's Promela model (tests/model/rcu.pml), checked exhaustively by spin: about
# 3 minutes of CPU. Part of `make stress`.
model: setup
	$(Q)command -v spin >/dev/null || { echo "model: spin is missing: sudo apt-get install spin" >&2; exit 1; }
	$(Q)tests/model/run.sh $(BUILD)

# libFuzzer harness for the event decoder (clang only); a short run is part of `make stress`.
FUZZ_SECS ?= 60
$(BUILD)/bin/fuzz_wire: tests/fuzz_wire.c $(wildcard tools/proto/*.c tools/proto/*.h)
	@mkdir -p $(dir $@)
	$(Q)clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Itools/proto \
	  tests/fuzz_wire.c $(wildcard tools/proto/*.c) -lmsgpackc -o $@
fuzz: setup $(BUILD)/bin/fuzz_wire
	$(Q)mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/bin/fuzz_wire -max_total_time=$(FUZZ_SECS) -max_len=4096 $(BUILD)/fuzz-corpus

bench: setup
	$(Q)$(MAKE) --no-print-directory OPT="-O2 -DNDEBUG" all $(BENCHES)
	$(Q)bench/run.sh $(BUILD)
	$(Q)bench/trace.sh $(BUILD)/bin
	$(Q)bench/cluster.sh $(BUILD)/bin
	$(Q)bench/cluster_topology.sh $(BUILD)/bin
bench-quick: setup
	$(Q)$(MAKE) --no-print-directory OPT="-O2 -DNDEBUG" all $(BENCHES)
	$(Q)bench/run.sh --quick $(BUILD)
	$(Q)QUICK=1 bench/trace.sh $(BUILD)/bin
	$(Q)QUICK=1 bench/cluster.sh $(BUILD)/bin
	$(Q)QUICK=1 bench/cluster_topology.sh $(BUILD)/bin

run: setup
	$(Q)$(MAKE) --no-print-directory all
	$(Q)./tools/run.sh $(BUILD)/bin

# Installs the public header(s), both libraries (the shared one with its soname and
# development symlinks), kvidx.pc (for this PREFIX/LIBDIR) and the tools but kvidx-fakepod,
# under DESTDIR. After an install into /usr/local, run `sudo ldconfig` (README).
install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(BINDIR) \
	  $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 $(BUILD)/libkvidx.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(BUILD)/libkvidx.so.$(KVIDX_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libkvidx.so.$(KVIDX_VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libkvidx.so
	install -m 644 $(PUBLIC_HDRS) $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	  -e 's|@VERSION@|$(KVIDX_VERSION)|' lib/kvidx.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/kvidx.pc
	install -m 755 $(INSTALL_TOOLS) $(DESTDIR)$(BINDIR)/

clean:
	rm -rf build build-*

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
