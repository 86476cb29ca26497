/*
 * The lab Mac's Local Network privacy: an LD_PRELOAD shim the lab's launchd puts into the
 * jobs it starts while STATE_DIR/localnet-denied exists.
 *
 * macOS 15 denies a process without the user's Local Network grant any connection to the
 * local network: connect() fails with EHOSTUNREACH, "No route to host"
 * (https://developer.apple.com/forums/thread/776552, macOS 15.3.1; a LaunchAgent's Node.js
 * got `connect EHOSTUNREACH 10.0.0.18`, https://github.com/23blocks-OS/ai-maestro/issues/24).
 * Loopback is never affected. Command tools run from Terminal or over SSH, and their
 * children, are exempt; LaunchAgents are not
 * (https://eclecticlight.co/2026/01/14/how-local-network-privacy-could-affect-you/), so only
 * jobs the lab's launchd starts get this shim.
 *
 * The grant follows the executable (Apple TN3179, "Understanding local network privacy":
 * the responsible code; for a Python venv that is the base interpreter's binary, the venv's
 * bin/python being a symlink to it): a process is allowed when realpath(/proc/self/exe) is
 * one line of the file named by $LAB_LOCALNET_GRANTED, read at every call.
 *
 * macOS judges an address local when it is reached without a router (eclecticlight, above).
 * The lab has no destinations but loopback and its own LAN, so every non-loopback address
 * counts as local network here: never kinder than the real check.
 *
 * Build: cc -shared -fPIC -O2 -o localnet_deny.so localnet_deny.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int is_loopback(const struct sockaddr *addr)
{
	if (addr->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (addr->sa_family == AF_INET6) {
		const struct in6_addr *in6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(in6))
			return 1;
		/* ::ffff:127.x.y.z, what a dual-stack socket uses for IPv4 loopback */
		return IN6_IS_ADDR_V4MAPPED(in6) && in6->s6_addr[12] == 127;
	}
	return 1; /* AF_UNIX and the rest are not network destinations */
}

static int is_granted(void)
{
	const char *list = getenv("LAB_LOCALNET_GRANTED");
	char exe[PATH_MAX], line[PATH_MAX + 2];
	int granted = 0;
	FILE *file;

	if (list == NULL || realpath("/proc/self/exe", exe) == NULL)
		return 0;
	file = fopen(list, "re");
	if (file == NULL)
		return 0;
	while (!granted && fgets(line, sizeof(line), file) != NULL) {
		line[strcspn(line, "\n")] = '\0';
		granted = strcmp(line, exe) == 0;
	}
	fclose(file);
	return granted;
}

/* Whether a call to addr must fail as macOS fails it for a process without the grant. */
static int denied(const struct sockaddr *addr)
{
	return addr != NULL && !is_loopback(addr) && !is_granted();
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);

	if (denied(addr)) {
		errno = EHOSTUNREACH;
		return -1;
	}
	if (real == NULL)
		real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "connect");
	return real(fd, addr, len);
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *addr,
	       socklen_t len)
{
	static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);

	if (denied(addr)) {
		errno = EHOSTUNREACH;
		return -1;
	}
	if (real == NULL)
		real = (ssize_t(*)(int, const void *, size_t, int, const struct sockaddr *,
				   socklen_t))dlsym(RTLD_NEXT, "sendto");
	return real(fd, buf, n, flags, addr, len);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	static ssize_t (*real)(int, const struct msghdr *, int);

	if (msg != NULL && denied((const struct sockaddr *)msg->msg_name)) {
		errno = EHOSTUNREACH;
		return -1;
	}
	if (real == NULL)
		real = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
	return real(fd, msg, flags);
}
