/*
 * Unit tests for core/calls/spawn: programs started by posix_spawn, system() or popen(). A
 * listener the new program is handed by a convention takes no new clients (its rendezvous is
 * shut, as at an exec): one a recorded dup2 action puts on a number the environment names
 * (LISTEN_FDS), and one inherited without close-on-exec on such a number; a LISTEN_PID that
 * names the spawning process hands nothing. A dup2 onto another number, an action object
 * forgotten (initialised again or destroyed), another object, and a dup2 of a socket that is
 * not a listener hand nothing (and take no place). A table with no place left counts every
 * listener of a spawn with actions as handed, until it empties. A command line that names
 * a handed number as a descriptor counts too.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/config.h"
#include "base/stats.h"
#include "calls/calls.h"
#include "unit.h"
#include "unit_cm.h"

static char *sd_env[] = {"PATH=/usr/bin", "LISTEN_FDS=1", NULL};

static int setup(void **state)
{
	(void)state;
	rsk_config_defaults(&rsk_config);
	rsk_stats_reset();
	return 0;
}

static int shut(const struct sockaddr_in *a)
{
	return !rsk_rdv_exists((const struct sockaddr *)a);
}

/* Two action objects (only their addresses matter here). */
static char fa1, fa2;

static void test_dup2_hands(void **state)
{
	struct sockaddr_in la, ka;
	int l = ucm_listener_open(&la), k = ucm_listener_open(&ka);

	(void)state;
	rsk_spawn_dup2(&fa1, l, 3);
	rsk_spawn_prepare(&fa2, NULL, sd_env); /* another object: nothing */
	assert_false(shut(&la));
	rsk_spawn_prepare(&fa1, NULL, (char *[]){NULL}); /* no LISTEN_FDS: fd 3 is not handed */
	assert_false(shut(&la));
	rsk_spawn_prepare(&fa1, NULL, sd_env);
	assert_true(shut(&la));
	assert_false(shut(&ka)); /* close-on-exec, in no action */
	rsk_spawn_forget(&fa1);
	ucm_listener_close(l);
	ucm_listener_close(k);
}

static void test_dup2_not_handed(void **state)
{
	struct sockaddr_in la;
	int l = ucm_listener_open(&la), sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	rsk_spawn_dup2(&fa1, l, 7); /* LISTEN_FDS=1 names 3 only */
	rsk_spawn_dup2(&fa1, sv[0], 3); /* not a listener */
	rsk_spawn_prepare(&fa1, NULL, sd_env);
	assert_false(shut(&la));
	rsk_spawn_prepare(NULL, NULL, sd_env);
	assert_false(shut(&la));
	/* forgotten (destroyed, or the address initialised again): its dup2 no longer counts */
	rsk_spawn_dup2(&fa1, l, 3);
	rsk_spawn_forget(&fa1);
	rsk_spawn_prepare(&fa1, NULL, sd_env);
	assert_false(shut(&la));
	close(sv[0]);
	close(sv[1]);
	ucm_listener_close(l);
}

/* A listener inherited (no close-on-exec) on a number the environment names, as system()
 * or popen() hand it to the shell with this environment (LISTEN_FDS=1000: 3 .. 1002). */
static void test_inherited(void **state)
{
	struct sockaddr_in la;
	int l = ucm_listener_open(&la);
	char me[32], other[32];
	char *mine[] = {"LISTEN_FDS=1000", me, NULL}, *theirs[] = {"LISTEN_FDS=1000", other, NULL};

	(void)state;
	assert_true(l >= 3 && l < 1003);
	snprintf(me, sizeof(me), "LISTEN_PID=%d", (int)getpid());
	snprintf(other, sizeof(other), "LISTEN_PID=%d", (int)getpid() + 1);
	rsk_spawn_prepare(NULL, NULL, theirs); /* close-on-exec: not inherited */
	assert_false(shut(&la));
	assert_int_equal(fcntl(l, F_SETFD, 0), 0);
	rsk_spawn_prepare(NULL, NULL, mine); /* for this process, not the new one */
	assert_false(shut(&la));
	rsk_spawn_prepare(NULL, NULL, theirs); /* the new program's pid may be that one */
	assert_true(shut(&la));
	ucm_listener_close(l);
}

/* The new program's command line names the listener's number: a dup2 action's target
 * (posix_spawn's argv), or an inherited number (system()'s one command line). */
static void test_argv_names(void **state)
{
	struct sockaddr_in la, ka;
	int l = ucm_listener_open(&la), k = ucm_listener_open(&ka);
	char cmd[64];

	(void)state;
	rsk_spawn_dup2(&fa1, l, 9);
	rsk_spawn_prepare(&fa1, (char *[]){"srv", "--fd=8", NULL}, NULL); /* another number */
	assert_false(shut(&la));
	rsk_spawn_prepare(&fa1, (char *[]){"srv", "--fd", "9", NULL}, NULL);
	assert_true(shut(&la));
	rsk_spawn_forget(&fa1);
	snprintf(cmd, sizeof(cmd), "srv --bind fd://%d &", k);
	rsk_spawn_prepare(NULL, (char *[]){cmd, NULL}, NULL); /* close-on-exec: not inherited */
	assert_false(shut(&ka));
	assert_int_equal(fcntl(k, F_SETFD, 0), 0);
	rsk_spawn_prepare(NULL, (char *[]){cmd, NULL}, NULL);
	assert_true(shut(&ka));
	ucm_listener_close(l);
	ucm_listener_close(k);
}

/* No place left for a listener's dup2: spawns with actions count every listener as handed
 * until the table is empty again; spawns without actions are judged as before. */
static void test_table_full(void **state)
{
	static char objs[40];
	struct sockaddr_in la, ka;
	int l = ucm_listener_open(&la), k = ucm_listener_open(&ka), i;

	(void)state;
	for (i = 0; i < 40; i++)
		rsk_spawn_dup2(&objs[i], 1, 3); /* not a listener: takes no place */
	rsk_spawn_prepare(&fa2, NULL, sd_env);
	assert_false(shut(&ka));
	for (i = 0; i < 40; i++)
		rsk_spawn_dup2(&objs[i], l, 9); /* 9: handed by no convention here */
	rsk_spawn_prepare(NULL, NULL, sd_env);
	assert_false(shut(&ka));
	for (i = 0; i < 40; i++)
		rsk_spawn_forget(&objs[i]);
	rsk_spawn_prepare(&fa2, NULL, sd_env); /* empty again: judged by its own actions */
	assert_false(shut(&ka));
	for (i = 0; i < 40; i++)
		rsk_spawn_dup2(&objs[i], l, 9);
	rsk_spawn_prepare(&fa2, NULL, sd_env);
	assert_true(shut(&ka));
	assert_true(shut(&la));
	for (i = 0; i < 40; i++)
		rsk_spawn_forget(&objs[i]);
	ucm_listener_close(l);
	ucm_listener_close(k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_dup2_hands, setup),
		cmocka_unit_test_setup(test_dup2_not_handed, setup),
		cmocka_unit_test_setup(test_inherited, setup),
		cmocka_unit_test_setup(test_argv_names, setup),
		cmocka_unit_test_setup(test_table_full, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
