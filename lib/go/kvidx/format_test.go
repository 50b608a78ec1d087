// format_test.go — the Go constants against the specification, shm/FORMAT.md: the tables
// after <!-- spec:... --> markers give every constant, the offset of every field this
// package reads or writes, and the counter names; tests/test_format.c checks the same
// tables against shm/layout.h, so Go and C agree through the document.

package kvidx

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

type specTable struct {
	kind, name string
	size       uint64
	rows       [][]string
}

func readSpec(t *testing.T) map[string]*specTable {
	f, err := os.Open("../../../shm/FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tabs := map[string]*specTable{}
	var cur *specTable
	heading := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "<!-- spec:") {
			f := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(l, "<!-- spec:"), "-->"))
			cur = &specTable{kind: f[0]}
			if len(f) > 1 {
				cur.name = f[1]
			}
			if len(f) > 2 {
				cur.size, _ = strconv.ParseUint(f[2], 0, 64)
			}
			tabs[cur.kind+" "+cur.name] = cur
			heading = false
			continue
		}
		if cur == nil {
			continue
		}
		if !strings.HasPrefix(l, "|") {
			cur = nil
			continue
		}
		if strings.HasPrefix(l, "|---") {
			continue
		}
		if !heading {
			heading = true
			continue
		}
		cells := strings.Split(strings.ReplaceAll(l, `\|`, "\x00"), "|")
		var row []string
		for _, c := range cells[1:] {
			row = append(row, strings.TrimSpace(c))
		}
		cur.rows = append(cur.rows, row)
	}
	return tabs
}

func TestFormatConstants(t *testing.T) {
	tabs := readSpec(t)
	c := tabs["constants "]
	if c == nil {
		t.Fatal("no constants table")
	}
	goConsts := map[string]uint64{
		"KV_LAYOUT_VERSION": LayoutVersion, "KV_IDX_MAGIC": idxMagic, "KV_CTL_MAGIC": ctlMagic, "KV_DATA_MAGIC": dataMagic,
		"KV_STAMP": stamp, "KV_CACHELINE": cacheline, "KV_CTL_HDR_BYTES": ctlHdrBytes,
		"KV_IDX_SIZE": idxSize, "KV_IDX_HDR_BYTES": idxHdrBytes, "KV_EPOCH_MAX": epochMax,
		"KV_GEN_MAX":     genMax,
		"KV_RSLOT_BYTES": rslotBytes, "KV_RING_HDR_BYTES": ringHdrBytes, "KV_MSG_BYTES": msgBytes,
		"KV_DATA_HDR_BYTES": dataHdrBytes, "KV_DATA_HDR_IMMUTABLE": dataHdrImmutable,
		"KV_POD_BYTES": podBytes, "KV_POD_COUNTERS": PodCounters, "KV_POD_NAMED": podNamed,
		"KV_POD_RANKS": PodRanks, "KV_RANK_WORDS": RankWords, "KV_STATS_WORDS": statsWords,
		"KV_HIST_BUCKETS": histBuckets, "KV_HIST_DECAY_S": histDecayS,
		"KV_HIST_PER_POD": histPerPod, "KV_PROMPT_CLASSES": promptClasses,
		"KV_ROUTER_BYTES": routerBytes, "KV_ROUTER_WORDS": routerWords, "KV_LOAD_BYTES": loadBytes, "KV_UNIT_BYTES": unitBytes,
		"KV_REGION_ALIGN": regionAlign, "KV_SLOT_EMPTY": slotEmpty, "KV_SLOT_TOMB": slotTomb,
		"KV_UNIT_MAX": unitMax, "KV_MAX_PROBE": maxProbe, "KV_MAX_PPK": maxPPK,
		"KV_MAX_PODS": MaxPods, "KV_MAX_READERS": maxReaders, "KV_MAX_CAPACITY": maxCapacity,
		"KV_RING_MIN": ringMin, "KV_RING_MAX": ringMax, "KV_MSG_KEYS_PER": msgKeysPer,
		"KV_MAX_COMMIT_KEYS": MaxCommitKeys, "KV_MAX_TTL_MS": MaxTTLms,
		"KV_LOCK_WRITER": lockWriter, "KV_LOCK_READER0": lockReader0, "KV_RS_FREE": rsFree,
		"KV_RS_ACTIVE": rsActive, "KV_RS_EXPELLED": rsExpelled, "KV_MSG_COMMIT": msgCommit,
		"KV_MSG_KEYS": msgKeys, "KV_MSG_OUTCOME": msgOutcome, "KV_DATA_BUILDING": dataBuilding,
		"KV_DATA_LIVE": dataLive, "KV_DATA_RETIRED": dataRetired, "KV_POD_FREE": podFree,
		"KV_POD_ACTIVE": podActive, "KV_POD_SPEC_PAUSED": podSpecPaused, "KV_RANK_IN_USE": RankInUse,
		"KV_RANK_CONNECTED": RankConnected, "KV_RANK_REPLAYING": RankReplaying, "KV_REC_SPEC": recSpec,
		"KV_REC_GROUPS": recGroups, "KV_POD_GROUPS": podGroups, "KV_GRP_FULL": grpFull,
		"KV_GRP_SLIDING": grpSliding, "KV_GRP_MAMBA": grpMamba,
		"KV_ALGO_CBOR_FNV": uint64(AlgoCborFnv), "KV_ALGO_XXH64": uint64(AlgoXXH64),
		"KV_TIER_GPU": TierGPU, "KV_TIER_CPU": TierCPU, "KV_TIER_DISK": TierDisk,
		"KV_TIER_OTHER": TierOther,
	}
	seen := map[string]bool{}
	for _, row := range c.rows {
		v, err := strconv.ParseUint(row[1], 0, 64)
		if err != nil {
			t.Errorf("%s: bad value %q", row[0], row[1])
			continue
		}
		g, ok := goConsts[row[0]]
		if !ok {
			t.Errorf("FORMAT.md constant %s unknown to the Go package", row[0])
		} else if g != v {
			t.Errorf("%s: document %#x, Go %#x", row[0], v, g)
		}
		seen[row[0]] = true
	}
	for n := range goConsts {
		if !seen[n] {
			t.Errorf("%s is not in FORMAT.md", n)
		}
	}
}

func TestFormatOffsets(t *testing.T) {
	tabs := readSpec(t)
	want := map[string]uint64{
		"kvidx_ctl_hdr.ch_magic": chMagic, "kvidx_ctl_hdr.ch_stamp": chStamp,
		"kvidx_ctl_hdr.ch_size": chSize, "kvidx_ctl_hdr.ch_max_readers": chMaxReaders,
		"kvidx_ctl_hdr.ch_slots_off": chSlotsOff, "kvidx_ctl_hdr.ch_created_ns": chCreatedNs,
		"kvidx_ctl_hdr.ch_ring_off": chRingOff, "kvidx_ctl_hdr.ch_ring_entries": chRingEntries,
		"kvidx_ctl_hdr.ch_reg_gen": chRegGen, "kvidx_ctl_hdr.ch_bell": chBell,
		"kvidx_idx_hdr.ih_magic": ihMagic, "kvidx_idx_hdr.ih_stamp": ihStamp,
		"kvidx_idx_hdr.ih_size": ihSize, "kvidx_idx_hdr.ih_created_ns": ihCreatedNs,
		"kvidx_idx_hdr.ih_max_readers": ihMaxReaders, "kvidx_idx_hdr.ih_ring_entries": ihRingEntries,
		"kvidx_idx_hdr.ih_reg_size": ihRegSize, "kvidx_idx_hdr.ih_generation": ihGeneration,
		"kvidx_idx_hdr.ih_reg_gen": ihRegGen, "kvidx_idx_hdr.ih_epoch": ihEpoch,
		"kvidx_idx_hdr.ih_writer_pid": ihWriterPid, "kvidx_idx_hdr.ih_writer_idle": ihWriterIdle,
		"kvidx_reader_slot.rs_state": rsState, "kvidx_reader_slot.rs_ctr": rsCtr,
		"kvidx_reader_slot.rs_pid": rsPid, "kvidx_reader_slot.rs_claimed_ns": rsClaimedNs,
		"kvidx_reader_slot.rs_lookups": rsLookups, "kvidx_reader_slot.rs_expelled": rsExpelledN,
		"kvidx_reader_slot.rs_commits": rsCommits, "kvidx_reader_slot.rs_dropped": rsDropped,
		"kv_ring_hdr.rh_head": rhHead, "kv_ring_hdr.rh_tail": rhTail,
		"kv_msg/commit.m_type": mType, "kv_msg/commit.m_seq": mSeq, "kv_msg/commit.m_corr": mCorr,
		"kv_msg/commit.u.commit.t_ns": mTNs, "kv_msg/commit.u.commit.gen": mGen,
		"kv_msg/commit.u.commit.pod": mPod, "kv_msg/commit.u.commit.prefill_pod": mPrefill,
		"kv_msg/commit.u.commit.nkeys": mNKeys, "kv_msg/commit.u.commit.matched": mMatched,
		"kv_msg/commit.u.commit.matched_spec":  mMatchedSpec,
		"kv_msg/commit.u.commit.prompt_tokens": mPromptTok,
		"kv_msg/keys.m_type":                   mType, "kv_msg/keys.m_n": mN, "kv_msg/keys.m_seq": mSeq,
		"kv_msg/keys.m_corr": mCorr, "kv_msg/keys.u.keys": mKeys,
		"kv_msg/outcome.m_type": mType, "kv_msg/outcome.m_corr": mCorr,
		"kv_msg/outcome.u.outcome.t_ns": mTNs, "kv_msg/outcome.u.outcome.gen": mGen,
		"kv_msg/outcome.u.outcome.pod": mPod, "kv_msg/outcome.u.outcome.cached_tokens": mCached,
		"kv_msg/outcome.u.outcome.prompt_tokens": mPrompt,
		"kvidx_data_hdr.dh_magic":                dhMagic, "kvidx_data_hdr.dh_stamp": dhStamp,
		"kvidx_data_hdr.dh_size": dhSize, "kvidx_data_hdr.dh_generation": dhGeneration,
		"kvidx_data_hdr.dh_created_ns": dhCreatedNs, "kvidx_data_hdr.dh_algo": dhAlgo,
		"kvidx_data_hdr.dh_block_size": dhBlockSize, "kvidx_data_hdr.dh_seed": dhSeed,
		"kvidx_data_hdr.dh_capacity": dhCapacity, "kvidx_data_hdr.dh_records": dhRecords,
		"kvidx_data_hdr.dh_nslots": dhNslots, "kvidx_data_hdr.dh_arena_units": dhArenaUnits,
		"kvidx_data_hdr.dh_pods_per_key": dhPodsPerKey, "kvidx_data_hdr.dh_max_pods": dhMaxPods,
		"kvidx_data_hdr.dh_max_readers": dhMaxReaders, "kvidx_data_hdr.dh_max_probe": dhMaxProbe,
		"kvidx_data_hdr.dh_stats_off": dhStatsOff, "kvidx_data_hdr.dh_pods_off": dhPodsOff,
		"kvidx_data_hdr.dh_slots_off": dhSlotsOff, "kvidx_data_hdr.dh_arena_off": dhArenaOff,
		"kvidx_data_hdr.dh_hist_off": dhHistOff, "kvidx_data_hdr.dh_state": dhState,
		"kvidx_data_hdr.dh_routers_off": dhRoutersOff, "kvidx_data_hdr.dh_load_off": dhLoadOff,
		"kvidx_load_row.lr_seq": lrSeq, "kvidx_load_row.lr_inflight": lrInflight,
		"kvidx_load_row.lr_prefill_tokens": lrPrefillTokens, "kvidx_load_row.lr_updated_ns": lrUpdatedNs, "kvidx_load_row.lr_lost": lrLost,
		"kvidx_load_row.lr_reserved":     lrReserved,
		"kvidx_data_hdr.dh_heartbeat_ns": dhHeartbeatNs, "kvidx_data_hdr.dh_writer_pid": dhWriterPid,
		"kvidx_pod.pd_word": pdWord, "kvidx_pod.pd_seq": pdSeq, "kvidx_pod.pd_groups": pdGroups, "kvidx_pod.pd_name": pdName,
		"kvidx_pod.pd_model": pdModel, "kvidx_pod.pd_ctr": pdCtr,
		"entry.key": 0, "entry.meta": 8, "record.w0": 0, "record.w1": 8,
	}
	sizes := map[string]uint64{"kvidx_idx_hdr": idxHdrBytes, "kvidx_ctl_hdr": ctlHdrBytes, "kvidx_reader_slot": rslotBytes,
		"kv_ring_hdr": ringHdrBytes, "kv_msg/commit": msgBytes, "kv_msg/keys": msgBytes,
		"kv_msg/outcome": msgBytes, "kvidx_data_hdr": dataHdrBytes, "kvidx_pod": podBytes, "kvidx_load_row": loadBytes,
		"entry": unitBytes, "record": unitBytes}
	for n, sz := range sizes {
		tab := tabs["struct "+n]
		if tab == nil {
			t.Errorf("no table for %s", n)
			continue
		}
		if tab.size != sz {
			t.Errorf("%s: document %d bytes, Go %d", n, tab.size, sz)
		}
	}
	for k, off := range want {
		i := strings.Index(k, ".")
		tab := tabs["struct "+k[:i]]
		found := false
		for _, row := range tab.rows {
			if row[3] == k[i+1:] {
				found = true
				if o, _ := strconv.ParseUint(row[0], 0, 64); o != off {
					t.Errorf("%s: document offset %d, Go %d", k, o, off)
				}
			}
		}
		if !found {
			t.Errorf("%s is not in FORMAT.md", k)
		}
	}
}

func TestFormatLists(t *testing.T) {
	tabs := readSpec(t)
	check := func(name string, want []string) {
		tab := tabs["list "+name]
		if tab == nil || len(tab.rows) != len(want) {
			t.Fatalf("list %s: document and Go differ in length", name)
		}
		for i, row := range tab.rows {
			if row[0] != strconv.Itoa(i) || row[1] != want[i] {
				t.Errorf("%s[%d]: document %s %s, Go %s", name, i, row[0], row[1], want[i])
			}
		}
	}
	check("stats", StatNames[:])
	check("pod_counters", PodCounterNames[:])
	check("rank_counters", RankCounterNames[:])
	check("router_counters", RouterCounterNames[:])
	if len(PodCounterNames) > podNamed || len(RankCounterNames) > RankWords {
		t.Error("named counters overflow their area")
	}
}

// The plan of FORMAT.md 5.2 for the defaults (1 Mi keys, 2 Mi records, 10 per key, 256 pods,
// 64 readers), worked by hand from the formulas.
func TestFormatPlan(t *testing.T) {
	p, ok := makePlan(1<<20, 2<<20, 10, 256, 64)
	if !ok {
		t.Fatal("default geometry refused")
	}
	units := uint64(3 << 20)
	units += units/4 + 2*65 + 1
	if p.units != units || p.nslots != 1<<20+(1<<20)/3+1 || p.statsOff != 4096 ||
		p.podsOff != 8192 || p.histOff != 8192+256*2752 ||
		p.routersOff != 8192+256*2752+256*8*192*8 ||
		p.loadOff != 8192+256*2752+256*8*192*8+64*1792 ||
		p.slotsOff != 8192+256*2752+256*8*192*8+64*1792+256*64 {
		t.Errorf("plan %+v", p)
	}
	if _, ok := makePlan(maxCapacity+1, 1, 1, 1, 1); ok {
		t.Error("capacity above the maximum accepted")
	}
}
