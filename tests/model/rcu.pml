/*
 * rcu.pml — a Promela model of kvidx's cross-process RCU: the readers' announce / check /
 * re-register steps (lib/reader.c: rd_enter(), rd_exit(), rd_reregister()) and the writer's
 * retire / grace period / expel / reuse steps (lib/rcu.c kv_rcu_reclaim()), with a writer
 * takeover into a new data generation, and the replacement of a damaged registry (lib/writer.c
 * reg_check(), reg_expel_all(); kv_rcu_hold()) with commits that follow it (lib/route.c).
 * `make model` runs it (tests/model/run.sh); spin 6.5, a few minutes of CPU.
 *
 * WHAT IS MODELLED
 *   Memory. One key whose entry is rewritten copy-on-write: the writer fills a free block of
 *   its generation's arena (two words, standing for the key word and a record), publishes it
 *   with one store of the slot word, retires the old block tagged with its private epoch, and
 *   reuses a block only after a grace period. Entry ids are never reused (no ABA in the
 *   model), so a reader that reads a block whose words are not the id its slot load returned
 *   has read reused (or torn) memory.
 *   Memory ordering. Every process but the hostile one has a FIFO store buffer (x86-TSO):
 *   its stores become visible later, in order, and its own loads see its buffered stores.
 *   A full fence (fence_seqcst, a seq_cst store followed by a fence, a CAS) drains the
 *   buffer. This is exactly the relaxation the protocol's two full fences exist for
 *   (store rs_ctr -> load slot in rd_enter(); store ch_epoch -> load rs_ctr in
 *   kv_rcu_reclaim()). Why TSO + the explicit fences is sound for the C11 code on weaker
 *   machines too, ordering by ordering:
 *     - load->load: the reader's slot load is acquire (pairs with the release store of the
 *       slot word in publish()), so the entry loads after it cannot move up; rd_exit()'s
 *       acquire fence keeps every entry load before its load of rs_state. The writer's
 *       rs_state and rs_ctr loads are seq_cst, after a seq_cst fence.
 *     - store->store: the writer publishes with a release store (entry words first); the
 *       CAS to EXPELLED is followed by a release fence before any store that reuses memory.
 *     - load->store: rd_exit() clears rs_ctr with a release store after all its loads; the
 *       reader's announcement store carries the value of its epoch load (dependency).
 *     - the reader's relaxed ch_epoch load followed by fence_seqcst acts as an acquire of
 *       the writer's seq_cst (hence release) epoch store: what the writer stored before it
 *       (the unlink) is visible to the slot load after the fence.
 *   So every ordering TSO keeps and the protocol relies on is also kept by the C11 orders
 *   the code uses; the only one TSO drops (store->load) is the one the fences restore.
 *
 *   Readers (NR honest ones; one by default: readers never read each other's words, and
 *   the hostile slot gives the writer's scan a second slot). Each call: rd_enter (generation check and switch; if the slot
 *   state is not its own, re-register: clear rs_ctr, CAS rs_state to (gen+1, ACTIVE), the
 *   call reports retry if the CAS fails), load ch_epoch, store it in rs_ctr, full fence,
 *   load the slot word, read the entry's two words, rd_exit (load rs_state, store rs_ctr =
 *   0; the answer is trusted only if rs_state is still the reader's own claim).
 *   A hostile reader (HOSTILE) owns one more slot and at every step writes any value into
 *   its rs_ctr (0, old epochs, the current one, far-future ones, values changing every
 *   step) and its rs_state (FREE, ACTIVE, EXPELLED, garbage, any claim generation).
 *   With HOSTILE_OTHERS it also writes the honest readers' slots (it can: the registry is
 *   one read-write mapping for the whole group).
 *   Writer. Any interleaving of NUPD updates and NREC grace periods. A grace period: epoch
 *   e+1, seq_cst store, full fence, then per slot: state not ACTIVE -> skip; rs_ctr 0 or
 *   >= e -> not holding back; else, holding back: either expel it (CAS ACTIVE -> EXPELLED)
 *   or keep it (min = rs_ctr). Whether the stall timer has run out is a free choice of the
 *   model checker here, so safety is proved for every stall policy, the C code's included.
 *   Then the blocks retired at an epoch below min go back to the free list (FIFO). A dead
 *   reader's slot being freed is the same CAS on rs_state as an expulsion, and a new owner
 *   claiming it the same steps as a re-registration; both are covered by those.
 *   Registry replacement (REPLACE). At any step the writer may find the registry truncated
 *   and replace it: it CASes every ACTIVE slot of registry 1 to EXPELLED (through a shared
 *   view; MUT_PRIVATE_EXPEL: into the guard's private zero pages, so no reader sees it), then
 *   stores ih_reg_gen = 2 and from then on scans registry 2's slots only (a reader of
 *   registry 1 is invisible), and starts the hold: nothing is reused until it ends. When the
 *   hold ends is the model checker's choice (any time after it started), or, with
 *   HOLD_BOUNDED, only once no reader is in a section it entered in registry 1 and the new name
 *   is visible to all (what one stall limit buys when sections are shorter than it). A
 *   reader follows ih_reg_gen at every enter (claims a slot in registry 2, never writes
 *   registry 1 again), and at exit also checks that ih_reg_gen is still its registry
 *   (MUT_NO_REGCHECK: not). After each call it may send one commit (kvidx_commit()): it
 *   follows ih_reg_gen first (MUT_STALE_RING: not: the ring of the registry last entered),
 *   then bumps its ring's head.
 *   Takeover (GEN2). The writer may die between any two of its calls (a death inside one
 *   leaves visible a prefix of that call's stores, which is the same as a death before the
 *   rest of them; its buffer drains, and the kernel drops its OFD lock only after the
 *   process is gone). A successor continues the epoch it reads
 *   from ch_epoch, builds generation 2 in its own arena, and publishes ch_generation = 2
 *   before its replay or, with defer_publish (a free choice), after it. Readers switch at
 *   their next rd_enter.
 *
 * MUTANTS (each must make spin find a violation, so the model can fail): MUT_NOFENCE drops
 * the reader's full fence after the announcement; MUT_LE reuses a block retired at the
 * oldest announced epoch itself; MUT_EPOCH1 lets the successor restart the epoch at 1.
 * Issue 24, fault 1: MUT_HOLD_EPOCH is the hold lib/ had (only what was retired at or after
 * the hold epoch was kept), with the expulsion into private pages and no exit check (the code
 * before the fix); MUT_HOLD_BEFORE keeps only what was retired before the replacement (an old
 * registry's reader can hold what is retired after it too). Fault 2: MUT_STALE_RING.
 *
 * PROPERTIES
 *   Commits (REPLACE, assertion in Checker): every commit begun after the replacement was
 *   visible to all is in registry 2's ring, the one the writer drains.
 *   Safety (assertion in the reader): an answer that passes rd_exit's state check is the
 *   entry the slot named when the reader loaded it, read whole: it was live at that moment,
 *   during the call, and its block was not reused while the reader's section could still
 *   be trusted. With HOSTILE_OTHERS this fails (spin shows the trail): a group member that
 *   can write other readers' slots can clear their announcements.
 *   Bounded liveness (LIVENESS, hostile reader alone): every block retired is back on the
 *   free list within K grace periods, whatever the hostile reader writes. Time is counted in
 *   grace periods (one per writer tick in the C code); the stall limit is STALL of them.
 *     RULE_VALUE (the C code before issue 10's fix): the stall timer restarts whenever the
 *       announced value changes. The hostile reader announces 1, 2, 1, 2, ...: never
 *       expelled, nothing is ever reclaimed (issue 10 item 1). Spin finds it.
 *     RULE_EPOCH (the C code, kv_rcu_reclaim(): blocked_target, blocked_since): when a reader is first seen holding back, remember the epoch the
 *       writer had just published, not the value announced; the timer restarts only when the
 *       reader announces 0 or an epoch at least that one (it went through a quiescent state
 *       since). Stall detection is about not reaching the current epoch, not about a value
 *       changing. An honest busy reader (always inside a section that began just before the
 *       latest epoch) still restarts its timer every tick; a hostile one is expelled within
 *       STALL ticks. Spin proves the bound K = 2 * STALL + 3 for STALL = 2 and 3 (and finds
 *       a run that needs more than STALL + 1, so the bound is of the right order). It also
 *       proves that a reader whose every announcement was 0 or at least the previous epoch
 *       (a busy honest one) is never expelled under the fixed rule.
 */

/* ---- configuration (spin -D...) ---- */
#ifndef NR
#define NR 1             /* honest readers (one suffices: readers never read each
                            * other's words; the hostile slot is the writer's second) */
#endif
#ifndef NUPD
#define NUPD 3           /* entry updates per writer */
#endif
#ifndef NREC
#define NREC 3           /* grace periods per writer */
#endif
#ifndef NCALLS
#define NCALLS 2         /* calls per honest reader */
#endif
#ifndef STALL
#define STALL 2          /* stall limit, in grace periods (LIVENESS) */
#endif
#ifndef NSCAN
#define NSCAN 12         /* grace periods of the LIVENESS writer */
#endif
#define NB 3             /* arena blocks per generation */
#define BUF 3            /* store buffer entries per process */
#define LIMBO 4

/* rs_state: (claim generation << 2) | state, as KV_RS_* with a 2-bit state. */
#define FREE 0
#define ACTIVE 1
#define EXPELLED 2
#define ST(w) ((w) & 3)
#define GN(w) ((w) >> 2)
#define MK(g, s) (((g) << 2) | (s))

/* ---- shared memory, word addresses ---- */
#define A_EPOCH 0
#define A_GEN 1
#define A_SLOT(g) (1 + (g))                   /* g = 1, 2 */
#define A_STATE(i) (4 + (i))                  /* i = 0 .. NR (NR = the hostile slot) */
#define A_CTR(i) (4 + NR + 1 + (i))
#define A_W(g, b, w) (4 + 2 * (NR + 1) + ((g) - 1) * 2 * NB + 2 * (b) + (w))
#define NADDR0 (4 + 2 * (NR + 1) + 4 * NB)
#ifdef REPLACE
/* Registry replacement: ih_reg_gen (the index header), registry 2's slots, and one route ring
 * per registry for honest reader 0 (its message count: the ring's head). */
#define A_REG NADDR0
#define A_STATE2(i) (NADDR0 + 1 + (i))
#define A_CTR2(i) (NADDR0 + 1 + NR + 1 + (i))
#define A_RING(k) (NADDR0 + 1 + 2 * (NR + 1) + (k) - 1)
#define D2 (NADDR0 + 1 - 4)                  /* registry 2's words: registry 1's + D2 */
#define A_ST(k, i) (A_STATE(i) + ((k) - 1) * D2)
#define A_CT(k, i) (A_CTR(i) + ((k) - 1) * D2)
#define NADDR (NADDR0 + 1 + 2 * (NR + 1) + 2)
#else
#define A_ST(k, i) A_STATE(i)
#define A_CT(k, i) A_CTR(i)
#define NADDR NADDR0
#endif
byte mem[NADDR];

/* Store buffers: process p's pending stores, oldest first. p = 0 .. NR-1 readers, NR writer. */
#define NP (NR + 1)
#define WP NR
byte sb_a[NP * BUF];
byte sb_v[NP * BUF];
byte sb_n[NP];

/* Ghost state, outside the memory model. */
byte blk_of[16];        /* entry id -> its block */
byte gen_of[16];        /* entry id -> its generation */
bool writer_done;
bool w1_dead;
#ifdef REPLACE
bool in_old[NR];        /* reader i is in a section it entered in registry 1 */
byte n_after;           /* commits begun after ih_reg_gen = 2 was visible */
byte readers_done;
#endif

inline store(p, a, v)
{
	atomic {
		sb_n[p] < BUF;
		sb_a[p * BUF + sb_n[p]] = a;
		sb_v[p * BUF + sb_n[p]] = v;
		sb_n[p]++
	}
}

/* A load sees the newest buffered store of its own process to that word, else memory. */
inline load(p, a, r, j)
{
	atomic {
		r = mem[a];
		j = sb_n[p];
		do
		:: j > 0 ->
			j--;
			if
			:: sb_a[p * BUF + j] == a -> r = sb_v[p * BUF + j]; break
			:: else
			fi
		:: else -> break
		od;
		j = 0
	}
}

/* The oldest buffered store reaches memory. */
inline flush1(p, j)
{
	mem[sb_a[p * BUF]] = sb_v[p * BUF];
	j = 1;
	do
	:: j < sb_n[p] ->
		sb_a[p * BUF + j - 1] = sb_a[p * BUF + j];
		sb_v[p * BUF + j - 1] = sb_v[p * BUF + j];
		j++
	:: else -> break
	od;
	sb_n[p]--;
	sb_a[p * BUF + sb_n[p]] = 0;
	sb_v[p * BUF + sb_n[p]] = 0;
	j = 0
}

inline fence(p, j)
{
	atomic {
		do
		:: sb_n[p] > 0 -> flush1(p, j)
		:: else -> break
		od
	}
}

/* Strong CAS (locked: drains the buffer first). ok = whether it swapped. */
inline cas(p, a, old, new, ok, j)
{
	atomic {
		fence(p, j);
		if
		:: mem[a] == old -> mem[a] = new; ok = true
		:: else -> ok = false
		fi
	}
}

proctype Flusher(byte p)
{
	byte j;
end:
	do
	:: atomic { sb_n[p] > 0 -> flush1(p, j) }
	od
}

#ifndef LIVENESS

#ifdef REPLACE
/* kv_rd_follow() (lib/reader.c): rg is a load of ih_reg_gen; if it names another registry,
 * claim a free slot there (CAS), then the old registry is never written again. */
inline follow(me, kr, rg, mine, ok, j)
{
	if
	:: rg != kr ->
		cas(me, A_ST(rg, me), MK(0, FREE), MK(1, ACTIVE), ok, j);
		if
		:: ok -> kr = rg; mine = MK(1, ACTIVE)
		:: else
		fi
	:: else
	fi
}
#endif

/* ---- honest reader: kvidx_lookup() ---- */
proctype Reader(byte me)
{
	byte mine = MK(1, ACTIVE), st, c, id, k, w0, w1, g = 1, ng, calls = 0, j;
	byte kr = 1, rg;        /* the registry this reader is in; an ih_reg_gen load */
	bool ok, after;

	do
	:: calls < NCALLS ->
		calls++;
#ifdef REPLACE
		/* rd_enter: follow a replaced registry (kv_rd_follow(): claim a slot in the new
		 * one, leave the old one untouched). */
		atomic {
			load(me, A_REG, rg, j);
			in_old[me] = (rg == 1 && kr == 1)
		}
		follow(me, kr, rg, mine, ok, j);
#endif
		/* rd_enter: follow a new generation (rd_switch) */
		load(me, A_GEN, ng, j);
		if
		:: ng != g -> g = ng
		:: else
		fi;
		/* re-register if the slot is no longer this claim (rd_reregister) */
		load(me, A_ST(kr, me), st, j);
		if
		:: st != mine ->
			load(me, A_ST(kr, me), st, j);   /* rd_reregister(): seq_cst reload */
			if
			:: st == mine -> skip
			:: else ->
				store(me, A_CT(kr, me), 0);
				cas(me, A_ST(kr, me), st, MK(GN(st) + 1, ACTIVE), ok, j);
				if
				:: ok -> mine = MK(GN(st) + 1, ACTIVE)
				:: else -> goto next  /* -KVIDX_ERETRY, nothing read */
				fi
			fi
		:: else
		fi;
		/* announce, full fence */
		load(me, A_EPOCH, c, j);
		store(me, A_CT(kr, me), c);
#ifndef MUT_NOFENCE
		fence(me, j);
#endif
		/* rd_find: the slot word (acquire), then the entry's words */
		load(me, A_SLOT(g), id, j);
		if
		:: id != 0 ->
			k = blk_of[id];
			load(me, A_W(g, k, 0), w0, j);
			load(me, A_W(g, k, 1), w1, j)
		:: else
		fi;
		/* rd_exit: acquire fence (no-op under TSO), state check, clear the announcement */
		load(me, A_ST(kr, me), st, j);
#if defined(REPLACE) && !defined(MUT_NO_REGCHECK)
		/* ... and the registry check: replaced during the section, the answer is discarded */
		load(me, A_REG, rg, j);
		if
		:: rg != kr -> st = 255
		:: else
		fi;
#endif
		store(me, A_CT(kr, me), 0);
#ifdef REPLACE
		in_old[me] = false;
#endif
		if
		:: st == mine && id != 0 ->
			/* Trusted answer: the entry the slot named, whole, of this generation. */
			assert(gen_of[id] == g && w0 == id && w1 == id)
		:: else
		fi;
next:
#ifdef REPLACE
		in_old[me] = false;
		/* kvidx_commit(): follow the registry (not with MUT_STALE_RING: the ring of the
		 * registry last entered), then one message, published by the ring head. */
		if
		:: true ->
			after = (mem[A_REG] == 2);   /* ghost: the replacement is visible to all */
#ifndef MUT_STALE_RING
			load(me, A_REG, rg, j);
			follow(me, kr, rg, mine, ok, j);
#endif
			load(me, A_RING(kr), c, j);
			store(me, A_RING(kr), c + 1);
			if
			:: after -> n_after++
			:: else
			fi
		:: true
		fi;
		rg = 0; after = false;
#endif
		/* dead locals reset: fewer distinct states */
		st = 0; c = 0; id = 0; k = 0; w0 = 0; w1 = 0; ng = 0; ok = false
	:: else -> break
	od;
#ifdef REPLACE
	fence(me, j);
	readers_done++
#endif
}

/*
 * The hostile reader is not a process: its slot's words are read by no one but the writer, so
 * "it may write anything between any two steps" is the same as "each of the writer's loads of
 * its words returns anything" (hostile_state, hostile_ctr below). Honest readers never read
 * it. Writes of other readers' words (HOSTILE_OTHERS) likewise only act through the writer's
 * loads of them.
 */
inline hostile_state(st)
{
	if
	:: st = MK(0, FREE)
	:: st = MK(1, ACTIVE)
	:: st = MK(2, ACTIVE)
	:: st = MK(1, EXPELLED)
	:: st = 3              /* not a state */
	fi
}

inline hostile_ctr(c)
{
	if
	:: c = 0
	:: c = 1
	:: c = 2
	:: c = 3
	:: c = 9
	:: c = 255
	:: c = w_epoch - 1
	:: c = w_epoch
	fi
}

/* ---- writer ---- */

/* The writer's private state (struct kv_rcu and the arena's free list). */
byte w_epoch;
byte w_cur;                 /* live entry id */
byte w_next;                /* next entry id */
byte w_gen;
bool w_free[NB];
byte lb_blk[LIMBO];
byte lb_ep[LIMBO];
byte lb_n;
#ifdef REPLACE
byte w_reg = 1;             /* the registry the writer scans */
bool w_hold;                /* the replacement hold is on */
byte w_hold_ep;             /* the epoch at the replacement (MUT_HOLD_EPOCH) */
bool replaced;
#endif

/* kvidx_store(): new entry in a free block, publish, retire the old one. */
inline update(j)
{
	k = 0;
	do
	:: k < NB && w_free[k] -> break
	:: k < NB && !w_free[k] -> k++
	:: k == NB -> break
	od;
	if
	:: k < NB && lb_n < LIMBO ->
		w_free[k] = false;
		blk_of[w_next] = k;
		gen_of[w_next] = w_gen;
		store(WP, A_W(w_gen, k, 0), w_next);
		store(WP, A_W(w_gen, k, 1), w_next);
		store(WP, A_SLOT(w_gen), w_next);   /* release: the words first */
		if
		:: w_cur != 0 ->
			lb_blk[lb_n] = blk_of[w_cur];
			lb_ep[lb_n] = w_epoch;
			lb_n++
		:: else
		fi;
		w_cur = w_next;
		w_next++
	:: else  /* -KVIDX_EFULL: no free block (limbo held back) */
	fi;
	k = 0
}

/* kv_rcu_reclaim() */
inline reclaim(j)
{
	w_epoch++;
	store(WP, A_EPOCH, w_epoch);
	fence(WP, j);               /* seq_cst store + fence_seqcst */
	min = w_epoch;
	i = 0;
	do
	:: i <= NR ->
		if
		:: i < NR -> load(WP, A_ST(w_reg, i), st, j)
#ifdef HOSTILE
		:: i == NR -> hostile_state(st)
#endif
		:: else -> st = MK(0, FREE)   /* no hostile reader: its slot is free */
		fi;
		if
		:: ST(st) != ACTIVE -> skip
		:: else ->
			if
			:: i < NR -> load(WP, A_CT(w_reg, i), c, j)
#ifdef HOSTILE_OTHERS
			:: i < NR -> c = 0     /* cleared by the hostile reader */
#endif
			:: else -> hostile_ctr(c)
			fi;
			if
			:: c == 0 || c >= w_epoch -> skip
			:: else ->
				if
				:: true ->   /* stalled: expel (kept or not, it no longer counts) */
					if
					:: i < NR -> cas(WP, A_ST(w_reg, i), st, MK(GN(st), EXPELLED), ok, j)
					:: else        /* the hostile slot: what it holds is irrelevant */
					fi
				:: true ->   /* not (yet) stalled: it holds back reclamation */
					if
					:: c < min -> min = c
					:: else
					fi
				fi
			fi
		fi;
		i++
	:: else -> break
	od;
	/* fence_release: under TSO stores stay in order; the CAS drained the buffer anyway. */
#ifdef REPLACE
	/* The replacement hold: nothing is reused while it lasts (MUT_HOLD_EPOCH: the rule
	 * before issue 24, which kept only what was retired at or after the hold epoch). */
	if
#if defined(MUT_HOLD_EPOCH)
	:: w_hold && min > w_hold_ep -> min = w_hold_ep
#elif defined(MUT_HOLD_BEFORE)
	:: w_hold && lb_n > 0 && lb_ep[0] <= w_hold_ep -> min = 0
#else
	:: w_hold -> min = 0
#endif
	:: else
	fi;
#endif
	do
#ifdef MUT_LE
	:: lb_n > 0 && lb_ep[0] <= min ->
#else
	:: lb_n > 0 && lb_ep[0] < min ->
#endif
		w_free[lb_blk[0]] = true;
		i = 1;
		do
		:: i < lb_n -> lb_blk[i - 1] = lb_blk[i]; lb_ep[i - 1] = lb_ep[i]; i++
		:: else -> break
		od;
		lb_n--
	:: else -> break
	od;
	i = 0; st = 0; c = 0; min = 0; ok = false
}

#ifdef REPLACE
/* reg_check() after a truncation (lib/writer.c): expel every ACTIVE reader of registry 1
 * through a shared view (MUT_PRIVATE_EXPEL: into the guard's private zero pages, which no
 * reader sees), create and name registry 2 (release store of ih_reg_gen), start the hold. */
inline replace(j)
{
#ifndef MUT_PRIVATE_EXPEL
	i = 0;
	do
	:: i < NR ->
		load(WP, A_STATE(i), st, j);
		if
		:: ST(st) == ACTIVE -> cas(WP, A_STATE(i), st, MK(GN(st), EXPELLED), ok, j)
		:: else
		fi;
		i++
	:: else -> break
	od;
	i = 0; st = 0; ok = false;
#endif
	store(WP, A_REG, 2);
	w_reg = 2;
	w_hold = true;
	w_hold_ep = w_epoch;
	replaced = true
}

/* When the hold may end: any time (the stall limit is the model checker's choice, as for
 * expulsions), or with HOLD_BOUNDED only once no reader is in a section entered in registry
 * 1 and the new name is visible to all (sections shorter than the stall limit). */
#ifdef HOLD_BOUNDED
#define HOLD_MAY_END (!in_old[0] && mem[A_REG] == 2)
#else
#define HOLD_MAY_END true
#endif
#endif

/* u and r count for both writers together: a takeover spends the same budget. */
inline writer_body(j)
{
	do
	:: u < NUPD -> update(j); u++
	:: r < NREC -> reclaim(j); r++
#ifdef REPLACE
	:: !replaced -> replace(j)
	:: w_hold && HOLD_MAY_END -> w_hold = false
#endif
#ifdef GEN2
	:: w_gen == 1 -> break     /* killed (SIGKILL), at any step */
#endif
	:: u == NUPD && r == NREC -> break
	od
}

proctype Writer()
{
	byte k, i, st, c, min, u, r, j;
	bool ok;

	/* Generation 1, built and published before any reader runs (see init). */
	w_gen = 1;
	w_epoch = 1;
	w_cur = 1;
	w_next = 2;
	w_free[0] = false;
	w_free[1] = true;
	w_free[2] = true;
	writer_body(j);
#ifdef GEN2
	/* Death: the buffer drains, the OFD lock is released, a successor takes over with an
	 * empty limbo, a fresh arena and the epoch it reads back. */
	fence(WP, j);
	w1_dead = true;
	load(WP, A_EPOCH, w_epoch, j);
#ifdef MUT_EPOCH1
	w_epoch = 1;
#endif
	w_gen = 2;
	w_cur = 0;
	lb_n = 0;
	w_free[0] = true;
	w_free[1] = true;
	w_free[2] = true;
	if
	:: store(WP, A_GEN, 2)              /* publish at once (lax) */
	:: skip                             /* defer_publish: after the replay */
	fi;
	update(j);                          /* the replay */
	load(WP, A_GEN, c, j);
	if
	:: c != 2 -> store(WP, A_GEN, 2)    /* kvidx_writer_publish() */
	:: else
	fi;
	writer_body(j);
#endif
	fence(WP, j);
	writer_done = true
}

#ifdef REPLACE
/* Every commit begun after the replacement was visible is in registry 2's ring, the one the
 * writer drains (kvidx_drain() reads only the current registry). */
proctype Checker()
{
	atomic { readers_done == NR -> assert(mem[A_RING(2)] >= n_after) }
}
#endif

init
{
	byte i;

	atomic {
		/* Generation 1: entry 1 in block 0, published; epoch 1; slots claimed (gen 1). */
		mem[A_EPOCH] = 1;
		mem[A_GEN] = 1;
		mem[A_SLOT(1)] = 1;
		mem[A_W(1, 0, 0)] = 1;
		mem[A_W(1, 0, 1)] = 1;
		blk_of[1] = 0;
		gen_of[1] = 1;
		i = 0;
		do
		:: i < NR -> mem[A_STATE(i)] = MK(1, ACTIVE); i++
		:: else -> break
		od;
		mem[A_STATE(NR)] = MK(1, ACTIVE);
#ifdef REPLACE
		mem[A_REG] = 1;
#endif
		i = 0;
		do
		:: i < NP -> run Flusher(i); i++
		:: else -> break
		od;
		run Writer();
#ifdef REPLACE
		run Checker();
#endif
		i = 0;
		do
		:: i < NR -> run Reader(i); i++
		:: else -> break
		od
	}
}

#else /* LIVENESS */

/*
 * The writer alone with one hostile reader, which may write anything into its slot between
 * any two steps: each of the writer's loads of its words returns any value (as in the safety
 * part). Every grace period retires one block; each must be reclaimed within K. Memory
 * ordering does not matter here (no honest reader).
 */
#ifndef K
#define K (2 * STALL + 3)
#endif
byte retired_at[NSCAN + 2];   /* grace period of retirement, per retired item (ghost) */
byte lq[LIMBO * 4];           /* limbo: item numbers */
byte lq_ep[LIMBO * 4];
byte lq_n;

proctype Writer()
{
	byte epoch = 1, scan = 0, st, c, min, i, item = 0;
	byte blocked_since = 0, blocked_ctr = 0;
	bool honest = true; /* ghost: every announcement so far was 0 or >= the previous epoch */

	do
	:: scan < NSCAN ->
		/* One tick: retire one entry at the current epoch, then a grace period. */
		lq[lq_n] = item;
		lq_ep[lq_n] = epoch;
		retired_at[item] = scan;
		lq_n++;
		item++;
		scan++;
		atomic {
		epoch++;
		mem[A_EPOCH] = epoch;
		min = epoch;
		/* The hostile reader's words, read once each: anything it may have written. */
		if
		:: st = MK(1, ACTIVE)
		:: st = MK(2, ACTIVE)
		:: st = MK(1, EXPELLED)
		:: st = MK(0, FREE)
		:: st = 3
		fi;
		if
		:: ST(st) != ACTIVE -> blocked_since = 0
		:: else ->
			if
			:: c = 0
			:: c = 1
			:: c = 2
			:: c = 3
			:: c = 200
			:: c = epoch - 2
			:: c = epoch - 1
			:: c = epoch
			fi;
			printf("grace period %d: epoch %d, hostile slot ACTIVE, rs_ctr %d\n", scan, epoch, c);
			honest = honest && (c == 0 || c + 1 >= epoch);
			if
			:: c == 0 || c >= epoch -> blocked_since = 0
			:: else ->
#ifdef RULE_VALUE
				/* lib today: the timer restarts when the value changes */
				if
				:: blocked_since == 0 || blocked_ctr != c ->
					blocked_ctr = c;
					blocked_since = scan
#else
				/* the fix: restarts only when the reader reached the epoch of the
				 * moment it was first seen holding back */
				if
				:: blocked_since == 0 || c >= blocked_ctr ->
					blocked_ctr = epoch;
					blocked_since = scan
#endif
				:: else ->
					skip
				fi;
				if
				:: scan - blocked_since >= STALL ->
					/* expelled (or its CAS failed: the slot changed); either way it
					 * no longer counts. Never a reader that was only ever busy. */
					assert(!honest);
					blocked_since = 0
				:: else ->
					if
					:: c < min -> min = c
					:: else
					fi
				fi
			fi
		fi;
		do
		:: lq_n > 0 && lq_ep[0] < min ->
			i = 1;
			do
			:: i < lq_n -> lq[i - 1] = lq[i]; lq_ep[i - 1] = lq_ep[i]; i++
			:: else -> break
			od;
			lq_n--
		:: else -> break
		od;
		/* Bounded liveness: nothing retired K or more grace periods ago is still held. */
		assert(lq_n == 0 || scan - retired_at[lq[0]] < K)
		}
	:: else -> break
	od;
	writer_done = true
}

init
{
	run Writer()
}

#endif /* LIVENESS */
