/*
 * Files in a unit test's private directory (test_statseg, test_sweep: the sweeps judge and
 * remove files there): make one with a body, ask whether a name is there, remove one, count
 * the renames a sweep made there (its claims: inotify). Each
 * takes the directory, so a test keeps its own (mkdtemp at setup). Include after <cmocka.h>.
 */
#ifndef RSK_TEST_UNIT_FILES_H
#define RSK_TEST_UNIT_FILES_H

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

/* Create @dir/@name (new: it must not exist yet), mode 0600, holding @len bytes of @body. */
static inline void unit_file_put(const char *dir, const char *name, const void *body,
				 size_t len)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, body, len), (ssize_t)len);
	close(fd);
}

/* Is there anything (a file, a link, a directory) named @name in @dir? */
static inline int unit_file_there(const char *dir, const char *name)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return lstat(p, &st) == 0;
}

static inline void unit_file_gone(const char *dir, const char *name)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	(void)unlink(p);
}

/* Renames (IN_MOVED_FROM) read from @ifd, an inotify fd (IN_NONBLOCK) watching a directory
 * for them: of a file named @name, or of any when @name is NULL. */
static inline int unit_files_renamed(int ifd, const char *name)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	const struct inotify_event *ev;
	ssize_t n, off;
	int moves = 0;

	while ((n = read(ifd, buf, sizeof(buf))) > 0)
		for (off = 0; off < n; off += (ssize_t)sizeof(*ev) + ev->len) {
			ev = (const struct inotify_event *)(buf + off);
			moves += (ev->mask & IN_MOVED_FROM) &&
				 (name == NULL || (ev->len > 0 && strcmp(ev->name, name) == 0));
		}
	return moves;
}

#endif
