/*
 * Helpers shared by the connection-scale programs (connserver.c, connscale.c, stale.c):
 * what a process holds, read from /proc (open fds, RSS, threads, shared mappings), the fd
 * limit, non-blocking mode and the transport the library put a connection on. Header only;
 * include after progs.h.
 */
#ifndef RSK_SCALE_H
#define RSK_SCALE_H

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>

/* What /proc says about one process at one moment. */
struct proc_usage {
	long fds;      /* entries of /proc/PID/fd (the library's hidden fds included) */
	long rss_kb;   /* VmRSS */
	long shmem_kb; /* RssShmem: resident shared memory (memfd rings, MAP_SHARED regions) */
	long threads;  /* Threads */
	long shm_maps; /* mappings of memfds, /dev/shm files or shared anonymous memory */
	long shm_kb;   /* their total size (virtual) */
};

/*
 * Entries of the directory @dfd (an open /proc/PID/fd), without opening anything: a process
 * at its fd limit can still count. The count excludes @dfd itself when it lists our own fds.
 */
static inline long count_dir_fd(int dfd, int self)
{
	char buf[16384];
	long n = 0, r, off;

	if (lseek(dfd, 0, SEEK_SET) < 0)
		return -1;
	while ((r = syscall(SYS_getdents64, dfd, buf, sizeof(buf))) > 0) {
		for (off = 0; off < r;) {
			unsigned short reclen = *(unsigned short *)(buf + off + 16);
			const char *name = buf + off + 19;

			if (name[0] != '.' && !(self && atoi(name) == dfd))
				n++;
			off += reclen;
		}
	}
	return r < 0 ? -1 : n;
}

static inline long count_fds_of(pid_t pid)
{
	char path[64];
	long n;
	int dfd;

	if (pid == 0)
		snprintf(path, sizeof(path), "/proc/self/fd");
	else
		snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	n = count_dir_fd(dfd, pid == 0);
	close(dfd);
	return n;
}

/* @pid 0 = this process. Fields that cannot be read are -1. */
static inline void proc_usage_of(pid_t pid, struct proc_usage *u)
{
	char path[64], line[512];
	unsigned long lo, hi;
	FILE *f;

	memset(u, 0xff, sizeof(*u)); /* -1 everywhere */
	u->fds = count_fds_of(pid);
	snprintf(path, sizeof(path), pid ? "/proc/%d/status" : "/proc/self/status", (int)pid);
	if ((f = fopen(path, "re")) != NULL) {
		while (fgets(line, sizeof(line), f) != NULL) {
			sscanf(line, "VmRSS: %ld", &u->rss_kb);
			sscanf(line, "RssShmem: %ld", &u->shmem_kb);
			sscanf(line, "Threads: %ld", &u->threads);
		}
		fclose(f);
	}
	snprintf(path, sizeof(path), pid ? "/proc/%d/maps" : "/proc/self/maps", (int)pid);
	if ((f = fopen(path, "re")) != NULL) {
		u->shm_maps = u->shm_kb = 0;
		while (fgets(line, sizeof(line), f) != NULL) {
			char perms[8] = "";

			if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3)
				continue;
			if (strstr(line, "/memfd:") == NULL && strstr(line, " /dev/shm/") == NULL &&
			    !(perms[3] == 's' && strstr(line, "/dev/zero") != NULL))
				continue;
			u->shm_maps++;
			u->shm_kb += (long)((hi - lo) / 1024);
		}
		fclose(f);
	}
}

/*
 * The start of file @path (a /proc file) into @buf, NUL-terminated; its length, or -1. With
 * open/read and a buffer of the caller's, as everything the churn's marks read: no
 * allocation, so that reading does not grow the RSS it is compared with (under ASan every
 * freed stdio or DIR buffer stays in quarantine: 101 marks grew the client by 8 MiB).
 */
static inline ssize_t proc_read(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

/*
 * CPU time and run-queue wait of every thread of @pid (0 = us), in seconds, from
 * /proc/PID/task/TID/schedstat (nanoseconds on the CPU, nanoseconds runnable but waiting).
 */
static inline void proc_sched_of(pid_t pid, double *cpu, double *wait)
{
	char dir[64], path[128], ents[4096], line[128];
	unsigned long long run, delay;
	long r, off;
	int dfd;

	*cpu = *wait = 0;
	snprintf(dir, sizeof(dir), pid ? "/proc/%d/task" : "/proc/self/task", (int)pid);
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return;
	while ((r = syscall(SYS_getdents64, dfd, ents, sizeof(ents))) > 0) {
		for (off = 0; off < r; off += *(unsigned short *)(ents + off + 16)) {
			const char *name = ents + off + 19;

			if (name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s/schedstat", dir, name);
			if (proc_read(path, line, sizeof(line)) > 0 &&
			    sscanf(line, "%llu %llu", &run, &delay) == 2) {
				*cpu += run / 1e9;
				*wait += delay / 1e9;
			}
		}
	}
	close(dfd);
}

/*
 * Minor page faults of @pid (0 = us), every thread's, exited ones included: field 10 of
 * /proc/PID/stat (after the command name, which may hold spaces and parentheses). -1 if
 * unreadable. A count of work done, not of time.
 */
static inline long proc_minflt_of(pid_t pid)
{
	char path[64], line[1024], *p;
	unsigned long flt;

	snprintf(path, sizeof(path), pid ? "/proc/%d/stat" : "/proc/self/stat", (int)pid);
	if (proc_read(path, line, sizeof(line)) < 0 || (p = strrchr(line, ')')) == NULL ||
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %lu", &flt) != 1)
		return -1;
	return (long)flt;
}

/*
 * This machine's CPU time from the "cpu" line of /proc/stat, in seconds over every CPU:
 * @busy is what ran (user, nice, system, irq, softirq), @steal what the hypervisor gave
 * elsewhere. Both -1 if unreadable.
 */
static inline void proc_machine_s(double *busy, double *steal)
{
	unsigned long long v[8];
	char line[512];
	long hz = sysconf(_SC_CLK_TCK);

	*busy = *steal = -1;
	if (proc_read("/proc/stat", line, sizeof(line)) < 0 || hz <= 0 ||
	    sscanf(line, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
		   &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
		return;
	*busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / (double)hz;
	*steal = (double)v[7] / (double)hz;
}

static inline void proc_usage_print(const char *who, const struct proc_usage *u)
{
	prog_msg("%s: fds=%ld rss_kb=%ld rss_shmem_kb=%ld threads=%ld shm_maps=%ld shm_kb=%ld", who,
		 u->fds, u->rss_kb, u->shmem_kb, u->threads, u->shm_maps, u->shm_kb);
}

/* Soft RLIMIT_NOFILE raised to the hard one (the tests may not raise the hard one). */
static inline long nofile_raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("getrlimit: %s", strerror(errno));
	if (rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			die("setrlimit(RLIMIT_NOFILE, %lu): %s", (unsigned long)rl.rlim_max,
			    strerror(errno));
	}
	return rl.rlim_cur == RLIM_INFINITY ? 1L << 20 : (long)rl.rlim_cur;
}

static inline long nofile_soft(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("getrlimit: %s", strerror(errno));
	return rl.rlim_cur == RLIM_INFINITY ? 1L << 20 : (long)rl.rlim_cur;
}

static inline void set_nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl O_NONBLOCK on fd %d: %s", fd, strerror(errno));
}

/* rdmasock_fd_transport(@fd): 0 kernel, 1 shm, 2 verbs; -2 when the library is not loaded. */
static inline int fd_transport(int fd)
{
	static int (*fn)(int);
	static int looked;

	if (!looked) {
		fn = (int (*)(int))dlsym(RTLD_DEFAULT, "rdmasock_fd_transport");
		looked = 1;
	}
	return fn != NULL ? fn(fd) : -2;
}

/* Wait up to @ms for @events on @fd; revents, 0 on timeout. */
static inline short wait_fd(int fd, short events, int ms)
{
	struct pollfd p = {.fd = fd, .events = events};
	double end = now_sec() + ms / 1000.0;
	int n, left;

	for (;;) {
		left = (int)((end - now_sec()) * 1000);
		n = poll(&p, 1, left > 0 ? left : 0);
		if (n >= 0 || errno != EINTR)
			return n > 0 ? p.revents : 0;
	}
}

#endif
