#!/bin/sh
# run.sh — `make model`: checks tests/model/rcu.pml with spin. Each line is one exhaustive
# search: the protocol as lib/ implements it must verify with 0 errors; each known defect
# and each mutant must produce a counterexample (so the model can fail).
# Usage: tests/model/run.sh BUILD_DIR
set -eu
src=$(cd "$(dirname "$0")" && pwd)/rcu.pml
out=${1:-build}/model
mkdir -p "$out"
cd "$out"
fails=0

# check NAME EXPECT(pass|cex) SPIN_DEFINES...
check() {
	name=$1 expect=$2
	shift 2
	rm -f pan pan.* ./*.trail
	spin -a "$@" "$src" >spin.log 2>&1 || { cat spin.log; exit 1; }
	gcc -w -O1 -DSAFETY -DCOLLAPSE -o pan pan.c
	./pan -m400000 >"$name.out" 2>&1 || true
	errs=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$name.out")
	states=$(sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' "$name.out")
	depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$name.out")
	if grep -q "max search depth too small" "$name.out"; then errs=depth; fi
	case $expect in
	pass) ok=$([ "$errs" = 0 ] && echo yes || echo no) ;;
	cex) ok=$([ -n "$errs" ] && [ "$errs" != 0 ] && [ "$errs" != depth ] && echo yes || echo no) ;;
	esac
	printf 'model: %-44s %-4s states=%s depth=%s errors=%s\n' "$name" \
		"$([ "$ok" = yes ] && echo ok || echo FAIL)" "$states" "$depth" "$errs"
	if [ "$ok" != yes ]; then
		fails=$((fails + 1))
		tail -20 "$name.out"
	elif [ "$expect" = cex ]; then
		spin -t "$@" "$src" 2>&1 | grep -E '^ +grace period' >"$name.trail.txt" || true
	fi
}

# The protocol: TSO store buffers, a hostile slot, any stall policy.
check safety-hostile            pass -DHOSTILE
# The same across a writer kill and a takeover into generation 2, deferred publish or not.
check safety-takeover           pass -DHOSTILE -DGEN2 -DNUPD=2 -DNREC=2
# Bounded reclamation against a hostile reader, with the fixed stall rule.
check liveness-epoch-rule       pass -DLIVENESS
check liveness-epoch-rule-s3    pass -DLIVENESS -DSTALL=3 -DNSCAN=16
# Registry replacement (issue 24): expulsion through a shared view, the exit check of
# ih_reg_gen, the hold, commits that follow the registry; with a hostile slot.
check replace-safety            pass -DHOSTILE -DREPLACE -DNUPD=2 -DNREC=2
# The check of ih_reg_gen at exit alone protects (no expulsion reaches the reader).
check replace-regcheck-alone    pass -DREPLACE -DNUPD=2 -DNREC=2 -DMUT_PRIVATE_EXPEL
# The hold alone protects readers whose sections are shorter than it (a reader of another
# build, which checks only its state, when the expulsion cannot reach it).
check replace-hold-alone        pass -DREPLACE -DNUPD=2 -DNREC=2 -DMUT_PRIVATE_EXPEL \
	-DMUT_NO_REGCHECK -DHOLD_BOUNDED
# Known: the expulsion alone does not protect a reader that checks only its state (it can
# re-register in the old registry before it sees the new name): the exit check is needed.
check replace-expel-alone-cex   cex  -DREPLACE -DNUPD=2 -DNREC=2 -DMUT_NO_REGCHECK
# Known defects: counterexamples expected (issue 10 item 1). The stall rule lib/ used before
# (the timer restarts when the announced value changes) never expels a reader that
# alternates old epochs; a group member can clear another reader's announcement.
check liveness-value-rule-cex   cex  -DLIVENESS -DRULE_VALUE
check hostile-others-cex        cex  -DHOSTILE -DHOSTILE_OTHERS -DNUPD=2
# Mutants: each breaks one step; spin must catch it.
check mutant-no-reader-fence    cex  -DHOSTILE -DMUT_NOFENCE -DNUPD=2
check mutant-reuse-at-min       cex  -DHOSTILE -DMUT_LE -DNUPD=2
check mutant-epoch-restart      cex  -DHOSTILE -DGEN2 -DNUPD=2 -DNREC=2 -DMUT_EPOCH1
# Issue 24 fault 1, the code before the fix: the hold kept only entries retired at or after
# the hold epoch, the expulsion went to private pages, no exit check.
check mutant-hold-at-epoch      cex  -DREPLACE -DNUPD=2 -DNREC=2 -DMUT_PRIVATE_EXPEL \
	-DMUT_NO_REGCHECK -DHOLD_BOUNDED -DMUT_HOLD_EPOCH
# A hold of only what was retired before the replacement (what follows can be held too).
check mutant-hold-before-only   cex  -DREPLACE -DNUPD=2 -DNREC=2 -DMUT_PRIVATE_EXPEL \
	-DMUT_NO_REGCHECK -DHOLD_BOUNDED -DMUT_HOLD_BEFORE
# Issue 24 fault 2: commits into the ring of the registry last entered.
check mutant-stale-ring         cex  -DHOSTILE -DREPLACE -DNUPD=2 -DNREC=2 -DMUT_STALE_RING

if [ "$fails" -ne 0 ]; then
	echo "model: $fails check(s) failed" >&2
	exit 1
fi
echo "model: OK (counterexample traces in $out/*.trail.txt)"
