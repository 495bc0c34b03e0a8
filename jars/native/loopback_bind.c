/*
 * Loaded with LD_PRELOAD into the processes the project starts locally (the mini-cluster
 * JVM, the standalone cluster's daemons, Beam's Java services, and the Python workers they
 * start): a TCP socket bound to the wildcard address is bound to loopback instead.
 *
 * Why: several upstream listeners have no bind option. Beam's fn-execution server inside
 * flink-python (control, data, state and logging services of every Python stage) computes
 * a loopback address and then builds its Netty server with forPort(port), which binds every
 * interface; Flink's own listeners need one option each. This keeps them all on loopback
 * whatever their configuration. A dual-stack IPv6 wildcard becomes the IPv4-mapped
 * 127.0.0.1 (IPv4 clients of 127.0.0.1 and "localhost" keep working), or ::1 for an
 * IPv6-only socket. Datagram sockets and explicit addresses are left as they are.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static int is_stream(int fd) {
    int type = 0;
    socklen_t len = sizeof type;
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind;
    if (real_bind == NULL) {
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
        if (real_bind == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    if (addr != NULL && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)
            && is_stream(fd)) {
        struct sockaddr_in v4;
        memcpy(&v4, addr, sizeof v4);
        if (v4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real_bind(fd, (const struct sockaddr *)&v4, sizeof v4);
        }
    } else if (addr != NULL && addr->sa_family == AF_INET6
            && len >= sizeof(struct sockaddr_in6) && is_stream(fd)) {
        struct sockaddr_in6 v6;
        memcpy(&v6, addr, sizeof v6);
        if (IN6_IS_ADDR_UNSPECIFIED(&v6.sin6_addr)) {
            static const unsigned char mapped_loopback[16] =
                {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
            memcpy(&v6.sin6_addr, mapped_loopback, sizeof mapped_loopback);
            int done = real_bind(fd, (const struct sockaddr *)&v6, sizeof v6);
            if (done == 0 || errno != EINVAL) {
                return done;
            }
            v6.sin6_addr = in6addr_loopback; /* IPV6_V6ONLY: no mapped addresses */
            return real_bind(fd, (const struct sockaddr *)&v6, sizeof v6);
        }
    }
    return real_bind(fd, addr, len);
}
