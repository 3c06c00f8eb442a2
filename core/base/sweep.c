/*
 * Claim-judge-remove sweeps of dead processes' files in a shared directory (see sweep.h).
 * Shared by the stats segments and the rendezvous bells, so both get the same bounds, the
 * same ownership rule and the same protection against removing a live file that took the
 * name of a dead one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sweep.h"
#include "sys.h"

pid_t rsk_sweep_parse_pid(const char *p, const char **end)
{
	long v = 0;
	int n;

	for (n = 0; p[n] >= '0' && p[n] <= '9' && n < 10; n++)
		v = v * 10 + (p[n] - '0');
	*end = p + n;
	return n == 0 || p[0] == '0' || v > INT_MAX ? 0 : (pid_t)v;
}

int rsk_sweep_pid_gone(pid_t pid)
{
	return kill(pid, 0) < 0 && errno == ESRCH; /* EPERM: it exists (another user's) */
}

/* Put a claimed file back under @orig, never replacing a file there: RENAME_NOREPLACE, or
 * a hard link where the filesystem has no such rename. 0, or -errno (-EEXIST: one is). */
static int rsk_sweep_put_back(int dfd, const char *claim, const char *orig)
{
	if (renameat2(dfd, claim, dfd, orig, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS)
		return -errno;
	if (linkat(dfd, claim, dfd, orig, 0) < 0)
		return -errno;
	(void)unlinkat(dfd, claim, 0);
	return 0;
}

/* Claim @cur (a plain name, or a dead sweeper's claim of @orig) as ours, judge, and end it. */
static int rsk_sweep_claimed(int dfd, const char *cur, const char *orig,
			     const struct rsk_sweep *w, void *arg)
{
	char claim[NAME_MAX + 1];
	int fd, stale = 0, n;

	n = snprintf(claim, sizeof(claim), "%s" RSK_SWEEP_CLAIM "%d", orig, (int)getpid());
	if (n < 0 || (size_t)n >= sizeof(claim))
		return 0;
	if (renameat(dfd, cur, dfd, claim) < 0)
		return 0; /* gone meanwhile, or another user's (a sticky directory) */
	fd = openat(dfd, claim, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		stale = w->stale(fd, orig, arg);
		(void)rsk_sys_close(fd);
	}
	/* EEXIST: the owner (or a new one) made a file under the name meanwhile; the claimed one
	 * is then an old image's. Any other failure leaves the claim for a later sweep. */
	if (!stale && rsk_sweep_put_back(dfd, claim, orig) != -EEXIST)
		return 0;
	return unlinkat(dfd, claim, 0) == 0;
}

int rsk_sweep_reap(int dfd, const char *name, const struct rsk_sweep *w, void *arg)
{
	return rsk_sweep_claimed(dfd, name, name, w, arg);
}

/* Only regular files of ours (root: anyone's) are judged; links and others are not. */
static int rsk_sweep_ours(int dfd, const char *name)
{
	struct stat st;

	return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	       (st.st_uid == geteuid() || geteuid() == 0);
}

/* Opened by name, unclaimed: does it look stale (w->judge_first)? */
static int rsk_sweep_looks_stale(int dfd, const char *name, const struct rsk_sweep *w,
				 void *arg)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), stale;

	if (fd < 0)
		return 0;
	stale = w->stale(fd, name, arg);
	(void)rsk_sys_close(fd);
	return stale;
}

/* One directory entry: a plain candidate, or a claim whose sweeper died. Returns 1 if it
 * removed a file. */
static int rsk_sweep_entry(int dfd, const char *name, const struct rsk_sweep *w, void *arg)
{
	char orig[NAME_MAX + 1];
	const char *at = strstr(name, RSK_SWEEP_CLAIM), *end;
	pid_t q;

	if (at == NULL) {
		if (w->candidate != NULL && !w->candidate(name, arg))
			return 0;
		return rsk_sweep_ours(dfd, name) &&
		       (!w->judge_first || rsk_sweep_looks_stale(dfd, name, w, arg)) &&
		       rsk_sweep_claimed(dfd, name, name, w, arg);
	}
	q = rsk_sweep_parse_pid(at + strlen(RSK_SWEEP_CLAIM), &end);
	if (q == 0 || *end != '\0' || !rsk_sweep_pid_gone(q) || (size_t)(at - name) >= sizeof(orig))
		return 0; /* garbage, or a claim under way */
	memcpy(orig, name, (size_t)(at - name));
	orig[at - name] = '\0';
	return rsk_sweep_ours(dfd, name) && rsk_sweep_claimed(dfd, name, orig, w, arg);
}

int rsk_sweep_dir(const char *dir, const struct rsk_sweep *w, void *arg)
{
	DIR *d = opendir(dir);
	size_t plen = strlen(w->prefix);
	int seen = 0, removed = 0;
	struct dirent *e;

	if (d == NULL)
		return 0;
	while (seen++ < w->scan && removed < w->remove &&
	       (w->stop == NULL || !__atomic_load_n(w->stop, __ATOMIC_ACQUIRE)) &&
	       (e = readdir(d)) != NULL)
		if (strncmp(e->d_name, w->prefix, plen) == 0)
			removed += rsk_sweep_entry(dirfd(d), e->d_name, w, arg);
	closedir(d);
	return removed;
}
