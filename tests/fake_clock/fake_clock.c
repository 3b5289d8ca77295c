/* fake_clock: an LD_PRELOAD shim that shifts one process's wall clock, and only its wall clock.
 *
 * CLOCK_REALTIME (and its _COARSE twin), gettimeofday(), time() and timespec_get() read the real
 * clock plus an offset in seconds read from the file named by $FAKE_CLOCK_OFFSET_FILE at every
 * call (a decimal such as `3600` or `-3581.5`; a missing or unreadable file is 0), so a test steps
 * the clock of a running process by replacing that file. Every other clock (CLOCK_MONOTONIC,
 * CLOCK_BOOTTIME, the CPU clocks) is passed through untouched: the machine's clock is never
 * changed, and what reads the monotonic clock sees no step. See README.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

static int real_clock_gettime(clockid_t clock, struct timespec *ts) {
    static clock_gettime_fn real;
    if (real == NULL) {
        real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    }
    if (real != NULL) {
        return real(clock, ts);
    }
    return (int)syscall(SYS_clock_gettime, clock, ts);
}

/* The offset in nanoseconds: the file's number, read with plain system calls (no stdio, no
 * allocation: this runs inside any caller, a signal handler's included). */
static long long offset_ns(void) {
    const char *path = getenv("FAKE_CLOCK_OFFSET_FILE");
    if (path == NULL) {
        return 0;
    }
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return 0;
    }
    char buf[64];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    errno = saved;
    if (n <= 0) {
        return 0;
    }
    buf[n] = '\0';
    const char *p = buf;
    while (*p == ' ' || *p == '\t') {
        p++;
    }
    int sign = 1;
    if (*p == '-' || *p == '+') {
        sign = *p == '-' ? -1 : 1;
        p++;
    }
    long long whole = 0, frac = 0, scale = 1000000000LL;
    while (*p >= '0' && *p <= '9' && whole < 1000000000LL) {
        whole = whole * 10 + (*p++ - '0');
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9' && scale > 1) {
            scale /= 10;
            frac += (*p++ - '0') * scale;
        }
    }
    return sign * (whole * 1000000000LL + frac);
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
    long long sec = ns / 1000000000LL, rem = ns % 1000000000LL;
    if (rem < 0) {
        rem += 1000000000LL;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)rem;
}

EXPORT int clock_gettime(clockid_t clock, struct timespec *ts) {
    int rc = real_clock_gettime(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        shift(ts);
    }
    return rc;
}

/* glibc declares gettimeofday's first argument nonnull, yet callers pass NULL for the zone alone */
static int is_null(const volatile void *p) { return p == NULL; }

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && !is_null(tv)) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return rc;
}

EXPORT time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return (time_t)-1;
    }
    if (out != NULL) {
        *out = ts.tv_sec;
    }
    return ts.tv_sec;
}

EXPORT int timespec_get(struct timespec *ts, int base) {
    if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0) {
        return 0;
    }
    return base;
}
