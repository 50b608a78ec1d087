// format.go — the constants and byte offsets of the segment format, as shm/FORMAT.md
// specifies them (layout version 8). format_test.go checks them against that document.

package kvidx

import "math/bits"

// Constants of FORMAT.md section 3.
const (
	LayoutVersion = 8

	idxMagic  = 0x5844495844494b56
	ctlMagic  = 0x4c54435844494b56
	dataMagic = 0x4154414458444b56
	stamp     = LayoutVersion<<48 | histBuckets<<32 | podBytes<<16 | msgBytes<<8 | rslotBytes

	cacheline             = 64
	idxSize               = 4096
	idxHdrBytes           = 128
	ctlHdrBytes           = 128
	rslotBytes            = 64
	ringHdrBytes          = 128
	msgBytes              = 64
	dataHdrBytes          = 280
	dataHdrImmutable      = 256
	podBytes              = 2752
	PodCounters           = podNamed + PodRanks*RankWords // counter words per pod
	podNamed              = 64
	PodRanks              = 32 // ranks with a health area per pod
	RankWords             = 8
	statsWords            = 27
	histBuckets           = 192
	histDecayS            = 60
	histPerPod            = 8    // histograms per pod (FORMAT.md 5.5)
	promptClasses         = 4    // prompt-length classes with a histogram each
	routerBytes           = 1792 // one router worker's statistics (FORMAT.md 5.6)
	routerWords           = 32
	loadBytes             = 64 // one pod's load row (FORMAT.md 5.9)
	unitBytes             = 16
	regionAlign           = 4096
	slotEmpty             = 0
	slotTomb              = 0xffffffff
	unitMax               = 0xfffffffe
	maxProbe              = 256
	maxPPK                = 64
	MaxPods               = 4096
	maxReaders            = 4096
	epochMax              = 1 << 62
	genMax                = 1 << 62
	maxCapacity           = 1 << 31
	ringMin               = 64
	ringMax               = 1 << 20
	msgKeysPer            = 6
	MaxCommitKeys         = 2048
	MaxTTLms              = 65535
	lockWriter            = 0
	lockReader0           = 1
	rsFree                = 0
	rsActive              = 1
	rsExpelled            = 2
	msgCommit             = 1
	msgKeys               = 2
	msgOutcome            = 3
	dataBuilding          = 0
	dataLive              = 1
	dataRetired           = 2
	podFree               = 0
	podActive             = 1
	podSpecPaused         = 0x1
	RankInUse             = 0x1
	RankConnected         = 0x2
	RankReplaying         = 0x4
	recSpec               = 0x1
	recGroups             = 0x2
	podGroups             = 12 // KV-cache group descriptors per pod (FORMAT.md 5.4)
	grpFull               = 1
	grpSliding            = 2
	grpMamba              = 3
	AlgoCborFnv      Algo = 1
	AlgoXXH64        Algo = 2
	TierGPU               = 0x1
	TierCPU               = 0x2
	TierDisk              = 0x4
	TierOther             = 0x8
)

// Index header fields (FORMAT.md 6.1).
const (
	ihMagic       = 0
	ihStamp       = 8
	ihSize        = 16
	ihCreatedNs   = 24
	ihMaxReaders  = 32
	ihRingEntries = 36
	ihRegSize     = 40
	ihGeneration  = 64
	ihRegGen      = 72
	ihEpoch       = 80
	ihWriterPid   = 88
	ihWriterIdle  = 92
)

// Registry header fields (FORMAT.md 6.3).
const (
	chMagic       = 0
	chStamp       = 8
	chSize        = 16
	chMaxReaders  = 24
	chSlotsOff    = 28
	chCreatedNs   = 32
	chRingOff     = 40
	chRingEntries = 48
	chRegGen      = 56
	chBell        = 64
)

// Reader slot fields (FORMAT.md 6.5).
const (
	rsState     = 0
	rsCtr       = 8
	rsPid       = 16
	rsClaimedNs = 24
	rsLookups   = 32
	rsExpelledN = 40
	rsCommits   = 48
	rsDropped   = 56
)

// Ring header and message fields (FORMAT.md 8).
const (
	rhHead = 0
	rhTail = 64

	mType        = 0
	mN           = 1
	mSeq         = 4
	mCorr        = 8
	mTNs         = 16 // commit and outcome
	mGen         = 24 // commit and outcome
	mPod         = 32 // commit and outcome
	mPrefill     = 34
	mNKeys       = 36
	mMatched     = 40
	mMatchedSpec = 44
	mPromptTok   = 48 // u.commit.prompt_tokens (layout 7)
	mKeys        = 16
	mCached      = 36
	mPrompt      = 40
)

// Data header fields (FORMAT.md 5.1).
const (
	dhMagic       = 0
	dhStamp       = 8
	dhSize        = 16
	dhGeneration  = 24
	dhCreatedNs   = 32
	dhAlgo        = 40
	dhBlockSize   = 44
	dhSeed        = 48
	dhCapacity    = 112
	dhRecords     = 120
	dhNslots      = 128
	dhArenaUnits  = 136
	dhPodsPerKey  = 144
	dhMaxPods     = 148
	dhMaxReaders  = 152
	dhMaxProbe    = 156
	dhStatsOff    = 160
	dhPodsOff     = 168
	dhSlotsOff    = 176
	dhArenaOff    = 184
	dhHistOff     = 192
	dhRoutersOff  = 200
	dhLoadOff     = 208
	dhState       = 256
	dhHeartbeatNs = 264
	dhWriterPid   = 272
)

// Load row fields (FORMAT.md 5.9).
const (
	lrSeq           = 0
	lrInflight      = 8
	lrPrefillTokens = 16
	lrUpdatedNs     = 24
	lrLost          = 32
	lrReserved      = 40
)

// Pod entry fields (FORMAT.md 5.4).
const (
	pdWord   = 0
	pdSeq    = 8
	pdGroups = 16
	pdName   = 64
	pdModel  = 128
	pdCtr    = 192
	nameMax  = 64
)

// PodCounterNames are the names of the per-pod counters by index (FORMAT.md 5.4), all
// below podNamed; the rank areas follow them.
var PodCounterNames = [...]string{
	"last_event_ns", "last_seq", "batches", "events", "blocks_stored", "blocks_removed",
	"clears", "events_per_s", "seq_gaps", "seq_dups", "restarts", "replays_ok",
	"replays_truncated", "replays_failed", "decode_errors", "skipped_events",
	"unknown_parent", "queue_depth", "connected",
	"bad_events", "unknown_type", "skipped_group", "skipped_shape", "skipped_remote",
	"unknown_removed", "offload_unknown", "unkeyable_extras",
	"offload_applied", "dup_copies", "copies_kept", "other_medium", "ranks",
	"ttl_ms", "speculations", "confirmed_in_time", "early_expiries", "stale_expiries",
	"late_confirmations", "routes_predicted", "routes_confirmed", "routes_nomatch",
	"outcomes", "false_warm_routes", "wasted_prefill_tokens", "spec_paused",
	"last_route_ns",
	"lag_negative", "lag_last_us", "queue_depth_peak",
	"spec_routes", "routes_in_time", "routes_early_expiries", "routes_late_confirmations",
	"routes_stale_expiries", "routes_dropped_clear", "routes_dropped_removed",
	"routes_dropped_evicted", "routes_untracked",
	"dropped_clear", "dropped_removed", "dropped_evicted",
	"heartbeats", "routed_silent",
	"remote_speculations",
}

// RouterCounterNames are the names of a router worker's counter words (FORMAT.md 5.6).
var RouterCounterNames = [...]string{
	"pid", "routes", "routes_predicted", "routes_confirmed", "routes_nomatch", "spec_routes",
	"routes_in_time", "routes_early_expiries", "routes_stale_expiries", "routes_dropped",
	"outcomes", "false_warm_routes", "wasted_prefill_tokens", "last_route_ns", "confirmations",
}

// RankCounterNames are the names of the words of one rank's health area by index
// (FORMAT.md 5.4): rank r's word w is per-pod counter podNamed + r*RankWords + w.
var RankCounterNames = [...]string{
	"flags", "last_seq", "last_event_ns", "batches", "events", "seq_gaps", "restarts", "clears",
}

// StatNames are the names of the writer's counters by index (FORMAT.md 5.3).
var StatNames = [...]string{
	"keys", "records", "spec_records", "tombstones", "arena_used", "limbo", "stores",
	"confirms", "removes", "speculations", "expirations", "pod_clears", "evict_spec",
	"evict_confirmed", "rec_evictions", "store_failed", "retired", "reclaimed", "epochs",
	"readers_dead", "readers_expelled", "sweep_passes", "route_commits", "route_bad",
	"registry_rebuilds", "registry_repairs", "bad_entries",
}

// Record word 0 and pod word fields (FORMAT.md 5.4, 5.8).
func recPod(w0 uint64) uint32  { return uint32(w0 & 0xffff) }
func recGen(w0 uint64) uint32  { return uint32(w0>>16) & 0xffff }
func recTiers(w0 uint64) uint8 { return uint8(w0 >> 32) }
func recFlags(w0 uint64) uint8 { return uint8(w0 >> 40) }
func recTTL(w0 uint64) uint64  { return w0 >> 48 }

// recGmask is a record's KV-cache group mask (FORMAT.md 5.8): every group (0xfff) unless it
// is a confirmed record with recGroups.
func recGmask(w0 uint64) uint32 {
	if recFlags(w0)&recGroups != 0 {
		return uint32(w0>>48) & 0xfff
	}
	return 0xfff
}
func podState(pw uint64) uint32 { return uint32(pw & 0xff) }
func podFlags(pw uint64) uint32 { return uint32(pw>>8) & 0xff }
func podGen(pw uint64) uint32   { return uint32(pw>>16) & 0xffff }

// Hashing a key to its home slot and fingerprint (FORMAT.md 5.7).
func mix(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	return k
}

func home(m, nslots uint64) uint64 {
	hi, _ := bits.Mul64(m, nslots)
	return hi
}

func fp(m uint64) uint32 { return uint32(m) }
