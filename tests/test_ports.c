/*
 * test_ports.c — tu_port() (tests/util_run.c): the port blocks of concurrent processes never
 * overlap, and a block holds for its process's lifetime.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util_run.h"

/* A forked child (as Criterion's and the tests' own children are) gets a block of its own. */
Test(ports, concurrent_processes_get_disjoint_blocks)
{
	int mine = tu_port(0), p[2], theirs[4];
	pid_t kids[4];

	cr_assert_eq(tu_port(9), mine + 9, "one block of 10 consecutive ports");
	cr_assert_eq(tu_port(0), mine, "the block is stable within a process");
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(pipe(p), 0);
		kids[i] = fork();
		cr_assert_geq(kids[i], 0);
		if (kids[i] == 0) {
			int port = tu_port(0);

			if (write(p[1], &port, sizeof(port)) != sizeof(port))
				_exit(1);
			pause(); /* holds the block until killed */
			_exit(0);
		}
		close(p[1]);
		cr_assert_eq(read(p[0], &theirs[i], sizeof(theirs[i])), (ssize_t)sizeof(theirs[i]));
		close(p[0]);
	}
	for (int i = 0; i < 4; i++) {
		cr_assert(theirs[i] + 10 <= mine || mine + 10 <= theirs[i],
			  "child %d's block %d overlaps ours %d", i, theirs[i], mine);
		for (int j = 0; j < i; j++)
			cr_assert(theirs[i] + 10 <= theirs[j] || theirs[j] + 10 <= theirs[i],
				  "children %d and %d share ports (%d, %d)", i, j, theirs[i],
				  theirs[j]);
		cr_assert(theirs[i] >= 1024 && theirs[i] + 9 < 32768, "port %d", theirs[i]);
	}
	for (int i = 0; i < 4; i++) {
		kill(kids[i], SIGKILL);
		waitpid(kids[i], NULL, 0);
	}
}
