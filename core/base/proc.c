/*
 * Process identity (see proc.h). The pid is cached in a plain global: it only changes in a
 * forked child, where rsk_proc_forked_child() runs before the child uses the library.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "proc.h"

static pid_t rsk_proc_cached;
static unsigned int rsk_proc_nforks;

pid_t rsk_proc_pid(void)
{
	pid_t p = __atomic_load_n(&rsk_proc_cached, __ATOMIC_RELAXED);

	if (p == 0) {
		p = getpid();
		__atomic_store_n(&rsk_proc_cached, p, __ATOMIC_RELAXED);
	}
	return p;
}

unsigned int rsk_proc_forks(void)
{
	return __atomic_load_n(&rsk_proc_nforks, __ATOMIC_RELAXED);
}

void rsk_proc_forking(void)
{
	__atomic_add_fetch(&rsk_proc_nforks, 1, __ATOMIC_RELAXED);
}

void rsk_proc_forked_child(void)
{
	__atomic_store_n(&rsk_proc_cached, getpid(), __ATOMIC_RELAXED);
}

int rsk_proc_each_fd(int (*fn)(int fd, void *arg), void *arg)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int fd;

	if (d == NULL)
		return -errno;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		fd = atoi(de->d_name);
		if (fd != dirfd(d) && fn(fd, arg) != 0)
			break;
	}
	closedir(d);
	return 0;
}
