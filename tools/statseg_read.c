/*
 * Reading live stats segments (statseg_read.h). A segment is trusted only when it is a
 * regular file of ours (or we are root), its header matches this version, and its pid is
 * alive with the start time the writer recorded (a reused pid is someone else) and still
 * maps it (after an exec the pid and start time stay, but the writer is gone).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "base/statseg.h"
#include "rdmasock.h"
#include "statseg_read.h"

const char *rsk_seg_dir(void)
{
	const char *d = getenv(RDMASOCK_ENV_STAT_DIR);

	return d != NULL && d[0] != '\0' ? d : RSK_STATSEG_DIR;
}

static uint64_t rsk_seg_proc_start(pid_t pid)
{
	char path[64], line[1024];
	size_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (f == NULL)
		return 0;
	n = fread(line, 1, sizeof(line) - 1, f);
	fclose(f);
	line[n] = '\0';
	return n > 0 ? rsk_statseg_starttime(line) : 0;
}

static int rsk_seg_alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

/* Does @pid map the file (@st)? 1 yes, 0 no, -1 unknown (its maps are not readable). */
static int rsk_seg_mapped_by(pid_t pid, const struct stat *st)
{
	char path[64], line[512];
	unsigned int maj, min;
	unsigned long ino;
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (f == NULL)
		return -1;
	while (!found && fgets(line, sizeof(line), f) != NULL)
		found = sscanf(line, "%*s %*s %*s %x:%x %lu", &maj, &min, &ino) == 3 &&
			ino == (unsigned long)st->st_ino && maj == major(st->st_dev) &&
			min == minor(st->st_dev);
	fclose(f);
	return found;
}

static int rsk_seg_header_ok(const struct rsk_statseg_hdr *h, pid_t pid, off_t size)
{
	return h->magic == RSK_STATSEG_MAGIC && h->version == RSK_STATSEG_VERSION &&
	       h->hdr_size == sizeof(*h) && h->rec_size == sizeof(struct rsk_statseg_sock) &&
	       h->capacity <= RSK_STATSEG_CAPACITY && h->pid == pid &&
	       rsk_statseg_size(h->capacity) <= (uint64_t)size;
}

static int rsk_seg_map_file(int fd, pid_t pid, struct rsk_seg_proc *p, struct stat *out)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < sizeof(struct rsk_statseg_hdr))
		return -EPROTO;
	if (st.st_uid != geteuid() && geteuid() != 0)
		return -EACCES; /* mode 0600 already says so; never read another user's */
	*out = st;
	if (!rsk_seg_alive(pid))
		return -ESRCH; /* whatever it holds, its writer is gone */
	p->map_len = (size_t)st.st_size;
	p->map = mmap(NULL, p->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p->map == MAP_FAILED) {
		p->map = NULL;
		return -errno;
	}
	if (!rsk_seg_header_ok(p->map, pid, st.st_size))
		return -EPROTO;
	if (rsk_seg_proc_start(pid) != p->map->start_time)
		return -ESRCH; /* the pid was reused: the writer is gone */
	if (rsk_seg_mapped_by(pid, &st) == 0)
		return -ESRCH; /* it exec'd (or unmapped it): nobody will publish there again */
	return 0;
}

int rsk_seg_open(pid_t pid, struct rsk_seg_proc *p)
{
	struct stat st;
	int fd, rc;

	memset(p, 0, sizeof(*p));
	snprintf(p->path, sizeof(p->path), "%s/" RSK_STATSEG_PREFIX "%d", rsk_seg_dir(), (int)pid);
	fd = open(p->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	rc = rsk_seg_map_file(fd, pid, p, &st);
	close(fd);
	if (rc == -ESRCH) /* its writer is gone: remove that file, not a newer one of the pid */
		(void)rsk_statseg_remove(pid, &st);
	if (rc < 0)
		rsk_seg_close(p);
	return rc;
}

void rsk_seg_close(struct rsk_seg_proc *p)
{
	if (p->map != NULL)
		munmap(p->map, p->map_len);
	free(p->rec);
	p->map = NULL;
	p->rec = NULL;
}

/* Stale segments (dead pid, or a reused one) are removed on the way; other users' skipped. */
int rsk_seg_list(pid_t *pids, int max)
{
	size_t plen = strlen(RSK_STATSEG_PREFIX);
	struct rsk_seg_proc p;
	struct dirent *e;
	DIR *d = opendir(rsk_seg_dir());
	char *end;
	long v;
	int n = 0;

	if (d == NULL)
		return 0;
	(void)rsk_statseg_sweep(); /* dead and reused pids' files, claimed before removal */
	while ((e = readdir(d)) != NULL && n < max) {
		if (strncmp(e->d_name, RSK_STATSEG_PREFIX, plen) != 0)
			continue;
		v = strtol(e->d_name + plen, &end, 10);
		if (*end != '\0' || v <= 0 || v > INT_MAX)
			continue;
		if (rsk_seg_open((pid_t)v, &p) < 0) /* stale (removed), foreign or not ours */
			continue;
		rsk_seg_close(&p);
		pids[n++] = (pid_t)v;
	}
	closedir(d);
	return n;
}

static void rsk_seg_bump(struct rsk_seg_proc *p)
{
	p->gen0 = __atomic_load_n(&p->map->generation, __ATOMIC_ACQUIRE);
	p->fresh = 0;
	__atomic_add_fetch(&p->map->readers, 1, __ATOMIC_RELEASE);
	(void)syscall(SYS_futex, &p->map->readers, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* A consistent copy under the writer's seqlock (bounded retries). 0 or -EAGAIN. */
static int rsk_seg_copy(struct rsk_seg_proc *p)
{
	const struct timespec ms = {0, 1000000};
	struct rsk_statseg_hdr *h = p->map;
	uint32_t s1, s2, n;
	int tries;

	for (tries = 0; tries < 500; tries++, nanosleep(&ms, NULL)) {
		s1 = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1)
			continue;
		memcpy(&p->hdr, h, sizeof(*h));
		n = p->hdr.nrec <= p->hdr.capacity ? p->hdr.nrec : 0;
		free(p->rec);
		p->rec = calloc(n ? n : 1, sizeof(*p->rec));
		if (p->rec == NULL)
			return -ENOMEM;
		memcpy(p->rec, h->rec, (size_t)n * sizeof(*p->rec));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
		if (s1 == s2) {
			p->hdr.nrec = n;
			return 0;
		}
	}
	return -EAGAIN;
}

void rsk_seg_sample(struct rsk_seg_proc *procs, int n, int wait_ms)
{
	const struct timespec tick = {0, 10 * 1000000};
	int i, waiting, t;

	for (i = 0; i < n; i++)
		rsk_seg_bump(&procs[i]);
	for (t = 0; t <= wait_ms / 10; t++) {
		for (i = 0, waiting = 0; i < n; i++) {
			if (!procs[i].fresh)
				procs[i].fresh = __atomic_load_n(&procs[i].map->generation,
								 __ATOMIC_ACQUIRE) != procs[i].gen0;
			waiting += !procs[i].fresh;
		}
		if (waiting == 0)
			break;
		nanosleep(&tick, NULL);
	}
	for (i = 0; i < n; i++)
		if (rsk_seg_copy(&procs[i]) < 0)
			procs[i].fresh = 0;
}
