# kvidx — one plain GNU Makefile.
# Targets: all (default) test stress bench bench-quick run install clean setup.
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
KV_CFLAGS := -std=gnu11 $(WARN) -D_GNU_SOURCE -fPIC -MMD -MP -Ilib -Ishm -Itools/ingestd -Itools/common \
             $(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer) $(CFLAGS)
KV_LDFLAGS := $(if $(SAN),-fsanitize=$(SAN)) $(LDFLAGS)
LIBS_CORE  := -lxxhash -lpthread -lrt
LIBS_TOOLS := -lzmq -lmsgpackc -lck -ljemalloc
LIBS_TEST  := -lcriterion

# Debian packages the build, the tests and the benchmarks need (installed by `make setup`).
DEB_PKGS := build-essential pkg-config liburcu-dev libjemalloc-dev libck-dev libcriterion-dev \
            libzmq3-dev libmsgpack-dev libxxhash-dev libhiredis-dev redis-server \
            clang libclang-rt-14-dev

ifeq ($(V),1)
Q :=
else
Q := @
endif

LIB_SRCS    := $(wildcard lib/*.c shm/*.c)
LIB_OBJS    := $(LIB_SRCS:%.c=$(BUILD)/%.o)
# Code shared by the tools (tools/common/) and ingestd's modules; linked into every tool and
# into the test binary (everything but ingestd's main.c).
INGEST_SRCS := $(wildcard tools/common/*.c) \
               $(filter-out tools/ingestd/main.c,$(wildcard tools/ingestd/*.c))
INGEST_OBJS := $(INGEST_SRCS:%.c=$(BUILD)/%.o)
TOOL_SRCS   := $(wildcard tools/kvidx-*.c)
TOOLS       := $(TOOL_SRCS:tools/%.c=$(BUILD)/bin/%) \
               $(if $(wildcard tools/ingestd/main.c),$(BUILD)/bin/kvidx-ingestd)
TEST_SRCS   := $(wildcard tests/test_*.c tests/util*.c)
TEST_OBJS   := $(TEST_SRCS:%.c=$(BUILD)/%.o)
STRESS_SRCS := $(wildcard tests/stress_*.c)
STRESS      := $(STRESS_SRCS:tests/%.c=$(BUILD)/bin/%)
BENCH_SRCS  := $(wildcard bench/bench_*.c)
BENCHES     := $(BENCH_SRCS:bench/%.c=$(BUILD)/bin/%)

.PHONY: all setup test stress fuzz bench bench-quick run install clean
# Keep objects that chained rules build (tests/stress_*.o, bench/*.o) between runs.
.SECONDARY:
all: $(BUILD)/libkvidx.a $(BUILD)/libkvidx.so $(TOOLS)

# Installs whatever Debian package is missing; a no-op (no root, no network) when all are there.
setup:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(KV_CFLAGS) -c $< -o $@

$(BUILD)/libkvidx.a: $(LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(BUILD)/libkvidx.so: $(LIB_OBJS)
	$(Q)$(CC) -shared -o $@ $^ $(KV_LDFLAGS) $(LIBS_CORE)

$(BUILD)/bin/kvidx-ingestd: $(BUILD)/tools/ingestd/main.o $(INGEST_OBJS) $(BUILD)/libkvidx.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(KV_LDFLAGS) $(LIBS_TOOLS) $(LIBS_CORE)
$(BUILD)/bin/%: $(BUILD)/tools/%.o $(INGEST_OBJS) $(BUILD)/libkvidx.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(KV_LDFLAGS) $(LIBS_TOOLS) $(LIBS_CORE)
STRESS_UTIL := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/torture_util.c))
BENCH_UTIL  := $(patsubst %.c,$(BUILD)/%.o,$(filter-out bench/bench_%.c,$(wildcard bench/*.c)))
$(BUILD)/bin/stress_%: $(BUILD)/tests/stress_%.o $(STRESS_UTIL) $(BUILD)/libkvidx.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(KV_LDFLAGS) $(LIBS_CORE)
$(BUILD)/bin/bench_%: $(BUILD)/bench/bench_%.o $(BENCH_UTIL) $(BUILD)/libkvidx.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(KV_LDFLAGS) -lhiredis -lurcu-cds -lurcu $(LIBS_TOOLS) $(LIBS_CORE) -lm
$(BUILD)/bin/test_kvidx: $(TEST_OBJS) $(INGEST_OBJS) $(BUILD)/libkvidx.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) -o $@ $^ $(KV_LDFLAGS) $(LIBS_TEST) $(LIBS_TOOLS) $(LIBS_CORE)

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

# libFuzzer harness for the event decoder (clang only); a short run is part of `make stress`.
FUZZ_SECS ?= 60
$(BUILD)/bin/fuzz_wire: tests/fuzz_wire.c tools/ingestd/wire.c tools/ingestd/wire.h
	@mkdir -p $(dir $@)
	$(Q)clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Itools/ingestd \
	  tests/fuzz_wire.c tools/ingestd/wire.c -lmsgpackc -o $@
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
