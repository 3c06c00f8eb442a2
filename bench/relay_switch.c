/*
 * Cost of switching an accelerated connection to stdio (fdopen: the relay starts, and since
 * 2026-12-02 a helper process is forked to run it): N connections to an echo server, each
 * timed around fdopen() alone, then one line written and read back through the FILE (the
 * relay works), then closed. Prints the median and 90th percentile of fdopen in us.
 *   relay_switch PORT [N]      (run under LD_PRELOAD with RDMASOCK_TCP_FIRST=off)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	int n = argc > 2 ? atoi(argv[2]) : 50, i, fd;
	double *us, t0;
	char line[64];
	FILE *f;

	if (argc < 2 || n < 1 || (us = calloc((size_t)n, sizeof(*us))) == NULL)
		return 2;
	a.sin_port = htons((unsigned short)atoi(argv[1]));
	for (i = 0; i < n; i++) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			return perror("connect"), 1;
		t0 = now_us();
		f = fdopen(fd, "r+");
		us[i] = now_us() - t0;
		if (f == NULL || fputs("ping\n", f) < 0 || fflush(f) != 0 ||
		    fgets(line, sizeof(line), f) == NULL || strcmp(line, "ping\n") != 0)
			return fprintf(stderr, "round %d: no echo\n", i), 1;
		fclose(f);
	}
	qsort(us, (size_t)n, sizeof(*us), cmp);
	printf("fdopen_us median %.1f p90 %.1f n %d\n", us[n / 2], us[n * 9 / 10], n);
	return 0;
}
