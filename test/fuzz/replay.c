/*
 * The corpus replay: a main() for a fuzz target in builds without libFuzzer (gcc, the default
 * build), so every corpus input -- seeds and the regression inputs of fixed crashes -- runs as
 * an ordinary test. Usage: <target>_replay FILE|DIR... Each input runs once, in name order;
 * a crash or a failed invariant fails the test, and so do an empty corpus and an input that
 * leaves an fd open (the targets close all they open: a leak is the library's).
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (d == NULL)
		return -1;
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long len;
	int before;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	buf = malloc((size_t)len + 1);
	if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		fprintf(stderr, "replay: %s: read failed\n", path);
		exit(1);
	}
	fclose(f);
	before = open_fds();
	(void)LLVMFuzzerTestOneInput(buf, (size_t)len);
	if (open_fds() != before) {
		fprintf(stderr, "replay: %s: %d fds open before, %d after\n", path, before,
			open_fds());
		exit(1);
	}
	free(buf);
	return 1;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir)
{
	struct dirent *de;
	char **names = NULL, path[4096];
	size_t n = 0, i;
	struct stat st;
	DIR *d = opendir(dir);
	int ran = 0;

	if (d == NULL) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		exit(1);
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		names = realloc(names, (n + 1) * sizeof(*names));
		if (names == NULL || (names[n] = strdup(de->d_name)) == NULL)
			exit(1);
		n++;
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp);
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			ran += run_file(path);
		free(names[i]);
	}
	free(names);
	return ran;
}

int main(int argc, char **argv)
{
	struct stat st;
	int i, ran = 0;

	if (LLVMFuzzerInitialize != NULL)
		(void)LLVMFuzzerInitialize(&argc, &argv);
	for (i = 1; i < argc; i++)
		ran += stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode) ? run_dir(argv[i])
								      : run_file(argv[i]);
	if (ran == 0) {
		fprintf(stderr, "replay: no input (an empty corpus tests nothing)\n");
		return 1;
	}
	printf("replay: %d inputs ok\n", ran);
	return 0;
}
