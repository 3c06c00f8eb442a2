/*
 * transport_probe: connect to HOST PORT, send one line, print the reply and which transport
 * librdmasock chose for the connection. Links nothing of ours: run it under LD_PRELOAD and it
 * finds rdmasock_fd_transport() with dlsym; without the library it reports "kernel (no
 * library)". Usage: LD_PRELOAD=librdmasock.so transport_probe 127.0.0.1 6379
 */
#include <dlfcn.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *transport_of(int fd)
{
	static const char *const names[] = {"kernel", "shm", "verbs"};
	int (*probe)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "rdmasock_fd_transport");
	int t;

	if (probe == NULL)
		return "kernel (no library)";
	t = probe(fd);
	return t >= 0 && t < 3 ? names[t] : "unknown";
}

int main(int argc, char **argv)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	const char *line = "PING\r\n";
	char reply[256];
	ssize_t n;
	int fd;

	if (argc != 3) {
		fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
		return 2;
	}
	if (getaddrinfo(argv[1], argv[2], &hints, &ai) != 0) {
		fprintf(stderr, "%s: cannot resolve %s\n", argv[0], argv[1]);
		return 1;
	}
	fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		perror("connect");
		return 1;
	}
	freeaddrinfo(ai);
	if (write(fd, line, strlen(line)) < 0) {
		perror("write");
		return 1;
	}
	n = read(fd, reply, sizeof(reply) - 1);
	reply[n > 0 ? n : 0] = '\0';
	printf("transport: %s\nreply: %s", transport_of(fd), reply);
	close(fd);
	return n > 0 ? 0 : 1;
}
