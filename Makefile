# kvidx — one plain GNU Makefile.
# Targets: all (default) test stress model bench bench-quick run install clean setup.
# Variables: CC CFLAGS PREFIX DESTDIR SAN=address|undefined|thread V=1 BUILD=dir.

CC      ?= cc
PREFIX  ?= /usr/local
DESTDIR ?=
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
$(BUILD)/lib/%.o $(BUILD)/shm/%.o: INC = $(INC_LIB)
$(BUILD)/tools/proto/%.o:          INC = -Itools/proto
$(BUILD)/tools/common/%.o:         INC = $(INC_COMMON)
$(BUILD)/tools/%.o:                INC = $(INC_TOOL)
$(BUILD)/tools/ingestd/%.o:        INC = -Itools/ingestd $(INC_TOOL)
$(BUILD)/tools/fakepod/%.o:        INC = -Itools/fakepod $(INC_TOOL)
$(BUILD)/tests/%.o:                INC = -Itests -Itools/ingestd $(INC_TOOL)
$(BUILD)/bench/%.o:                INC = -Ibench $(INC_LIB)

# External libraries, per binary: each links what it uses and nothing more.
LIBS_CORE   := -lxxhash -lpthread -lrt
LIBS_WIRE   := -lzmq -lmsgpackc
LIBS_INGEST := $(LIBS_WIRE) -lck -ljemalloc
LIBS_TEST   := -lcriterion

# Debian packages: BUILD_PKGS to build the library and the tools (`make` checks for them and
# names the missing ones); DEB_PKGS for everything, installed by `make setup`, which test,
# stress, bench and run call first.
BUILD_PKGS := build-essential pkg-config libck-dev libjemalloc-dev libmsgpack-dev libxxhash-dev \
              libzmq3-dev
DEB_PKGS   := $(BUILD_PKGS) liburcu-dev libcriterion-dev redis-server clang libclang-rt-14-dev spin

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
TOOLS         := $(patsubst tools/%.c,$(BUILD)/bin/%,$(wildcard tools/kvidx-*.c)) \
                 $(BUILD)/bin/kvidx-ingestd $(BUILD)/bin/kvidx-fakepod
TEST_SRCS     := $(wildcard tests/test_*.c tests/util*.c)
TEST_OBJS     := $(TEST_SRCS:%.c=$(BUILD)/%.o)
STRESS_SRCS   := $(wildcard tests/stress_*.c)
STRESS        := $(STRESS_SRCS:tests/%.c=$(BUILD)/bin/%)
BENCH_SRCS    := $(wildcard bench/bench_*.c)
BENCHES       := $(BENCH_SRCS:bench/%.c=$(BUILD)/bin/%)

.PHONY: all deps setup test stress model fuzz bench bench-quick run install clean
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

# libkvidx: lib/ and shm/. The tools link the archive, so each takes only the objects it calls.
$(LIBKVIDX): $(LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(BUILD)/libkvidx.so: $(LIB_OBJS)
	$(Q)$(CC) -shared -o $@ $^ $(KV_LDFLAGS) $(LIBS_CORE)
$(COMMON_A): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/common/*.c))
	$(Q)rm -f $@ && ar rcs $@ $^
$(PROTO_A): $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/proto/*.c))
	$(Q)rm -f $@ && ar rcs $@ $^

# The tools. Libraries per binary: the key calculator and the segment readers need libkvidx
# alone; what speaks ZeroMQ/msgpack adds those; the writer adds Concurrency Kit and jemalloc.
LINK = @mkdir -p $(dir $@) && $(if $(Q),echo "  LD      $@" &&) $(CC) -o $@ $^ $(KV_LDFLAGS) $(LIBS)
$(BUILD)/bin/kvidx-hash $(BUILD)/bin/kvidx-dump $(BUILD)/bin/kvidx-top $(BUILD)/bin/kvidx-ttl: \
	LIBS = $(LIBS_CORE)
$(BUILD)/bin/kvidx-route $(BUILD)/bin/kvidx-fakepod: LIBS = $(LIBS_WIRE) $(LIBS_CORE)
$(BUILD)/bin/kvidx-ingestd: LIBS = $(LIBS_INGEST) $(LIBS_CORE)
$(BUILD)/bin/kvidx-ingestd: $(BUILD)/tools/ingestd/main.o $(INGESTD_OBJS) $(TOOL_ARCHIVES)
	$(LINK)
$(BUILD)/bin/kvidx-fakepod: $(FAKEPOD_OBJS) $(TOOL_ARCHIVES)
	$(LINK)
$(BUILD)/bin/kvidx-%: $(BUILD)/tools/kvidx-%.o $(TOOL_ARCHIVES)
	$(LINK)

STRESS_UTIL := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/torture_util.c))
BENCH_UTIL  := $(patsubst %.c,$(BUILD)/%.o,$(filter-out bench/bench_%.c,$(wildcard bench/*.c)))
$(BUILD)/bin/stress_%: LIBS = $(LIBS_CORE)
$(BUILD)/bin/stress_%: $(BUILD)/tests/stress_%.o $(STRESS_UTIL) $(LIBKVIDX)
	$(LINK)
$(BUILD)/bin/bench_%: LIBS = -lurcu-cds -lurcu $(LIBS_INGEST) $(LIBS_CORE)
$(BUILD)/bin/bench_%: $(BUILD)/bench/bench_%.o $(BENCH_UTIL) $(LIBKVIDX)
	$(LINK)
$(BUILD)/bin/test_kvidx: LIBS = $(LIBS_TEST) $(LIBS_INGEST) $(LIBS_CORE)
$(BUILD)/bin/test_kvidx: $(TEST_OBJS) $(INGESTD_OBJS) $(TOOL_ARCHIVES)
	$(LINK)

# Quick, deterministic checks: one Criterion binary. Tests find the tools through KVIDX_BIN.
test: setup
	$(Q)$(MAKE) --no-print-directory all $(BUILD)/bin/test_kvidx
	KVIDX_BIN=$(abspath $(BUILD)/bin) LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
	  $(BUILD)/bin/test_kvidx --jobs 2 $(TEST_ARGS)

# Long randomized multi-process torture runs (minutes). STRESS_SECS sets each program's length.
STRESS_SECS ?= 60
stress: setup
	$(Q)$(MAKE) --no-print-directory all $(STRESS)
	$(Q)set -e; for s in $(STRESS); do echo "== $$s ($(STRESS_SECS)s)"; $$s --seconds $(STRESS_SECS); done
	$(Q)$(MAKE) --no-print-directory fuzz FUZZ_SECS=$(STRESS_SECS)
	$(Q)$(MAKE) --no-print-directory model

# The RCU protocol's Promela model (tests/model/rcu.pml), checked exhaustively by spin: about
# a minute of CPU. Part of `make stress`.
model:
	$(Q)command -v spin >/dev/null || { echo "model: spin is missing: sudo apt-get install spin" >&2; exit 1; }
	$(Q)tests/model/run.sh $(BUILD)

# libFuzzer harness for the event decoder (clang only); a short run is part of `make stress`.
FUZZ_SECS ?= 60
$(BUILD)/bin/fuzz_wire: tests/fuzz_wire.c tools/proto/wire.c tools/proto/wire.h
	@mkdir -p $(dir $@)
	$(Q)clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Itools/proto \
	  tests/fuzz_wire.c tools/proto/wire.c -lmsgpackc -o $@
fuzz: setup $(BUILD)/bin/fuzz_wire
	$(Q)mkdir -p $(BUILD)/fuzz-corpus
	$(BUILD)/bin/fuzz_wire -max_total_time=$(FUZZ_SECS) -max_len=4096 $(BUILD)/fuzz-corpus

bench: setup
	$(Q)$(MAKE) --no-print-directory OPT="-O2 -DNDEBUG" all $(BENCHES)
	$(Q)bench/run.sh $(BUILD)
bench-quick: setup
	$(Q)$(MAKE) --no-print-directory OPT="-O2 -DNDEBUG" all $(BENCHES)
	$(Q)bench/run.sh --quick $(BUILD)

run: setup
	$(Q)$(MAKE) --no-print-directory all
	$(Q)./tools/run.sh $(BUILD)/bin

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(BUILD)/libkvidx.a $(BUILD)/libkvidx.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 lib/kvidx.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf build build-*

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
