/*
 * Role: a program that sets up io_uring, whose socket I/O no preload sees, keeps its new
 * connections on the kernel.
 *
 *   uring client PORT HOW     set up a ring by HOW, then connect to PORT, echo "ping"
 *   uring server HOW          listen first (prints "port N"), then set up a ring by HOW,
 *                             then accept one connection and echo it to EOF
 * HOW: syscall (io_uring_setup through libc's syscall()), liburing (io_uring_queue_init,
 * looked up as a program linked with liburing would find it: exit 77 when liburing.so.2 is
 * missing), none (no ring: the control, which the library must accelerate).
 * The ring is really made and closed again; the program uses plain socket calls after it
 * (the point is what the library decides, not the ring's own I/O).
 */
#include <dlfcn.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>

#include "progs.h"

const char *prog_name = "uring";

static void make_ring(const char *how)
{
	struct io_uring_params p;
	char ring[512]; /* larger than liburing's struct io_uring */
	int (*init)(unsigned int, void *, unsigned int);
	void (*exit_ring)(void *);
	long fd;

	if (strcmp(how, "none") == 0)
		return;
	if (strcmp(how, "syscall") == 0) {
		memset(&p, 0, sizeof(p));
		fd = syscall(__NR_io_uring_setup, 4, &p);
		if (fd < 0)
			die("io_uring_setup: %s", strerror(errno));
		close((int)fd);
		return;
	}
	if (strcmp(how, "liburing") != 0)
		die("unknown HOW %s", how);
	if (dlopen("liburing.so.2", RTLD_NOW | RTLD_GLOBAL) == NULL) {
		prog_msg("liburing.so.2 is not installed: %s", dlerror());
		exit(77);
	}
	init = (int (*)(unsigned int, void *, unsigned int))dlsym(RTLD_DEFAULT,
								  "io_uring_queue_init");
	exit_ring = (void (*)(void *))dlsym(RTLD_DEFAULT, "io_uring_queue_exit");
	if (init == NULL || exit_ring == NULL)
		die("liburing without io_uring_queue_init/exit");
	memset(ring, 0, sizeof(ring));
	if (init(4, ring, 0) < 0)
		die("io_uring_queue_init failed");
	exit_ring(ring);
}

static void echo(int fd)
{
	char b[256];
	ssize_t r;

	while ((r = read(fd, b, sizeof(b))) > 0)
		if (write_all(fd, b, (size_t)r) < 0)
			die("write: %s", strerror(errno));
	if (r < 0)
		die("read: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = loopback(0);
	socklen_t al = sizeof(a);
	char b[4];
	int fd, l;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && strcmp(argv[1], "client") == 0) {
		make_ring(argv[3]);
		if ((fd = tcp_connect(port_arg(argv[2]))) < 0)
			die("connect: %s", strerror(errno));
		if (write_all(fd, "ping", 4) < 0 || read_full(fd, b, 4, 4) != 4 ||
		    memcmp(b, "ping", 4) != 0)
			die("no echo of ping");
		close(fd);
		printf("uring: client %s: ok\n", argv[3]);
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "server") == 0) {
		l = socket(AF_INET, SOCK_STREAM, 0);
		if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 4) < 0 ||
		    getsockname(l, (struct sockaddr *)&a, &al) < 0)
			die("listen: %s", strerror(errno));
		printf("port %d\n", ntohs(a.sin_port));
		make_ring(argv[2]);
		printf("ready\n");
		if ((fd = accept(l, NULL, NULL)) < 0)
			die("accept: %s", strerror(errno));
		echo(fd);
		close(fd);
		close(l);
		printf("uring: server %s: ok\n", argv[2]);
		return 0;
	}
	die("usage: uring client PORT HOW | uring server HOW");
}
