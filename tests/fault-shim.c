/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* An LD_PRELOAD shim that makes the kernel calls subvold depends on fail,
 * for test_faults.  Everything is chosen by environment variables, read
 * once:
 *
 *   SUBVOLD_FAULT_CALLS    comma-separated: ioctl (btrfs ioctls only, type
 *                          0x94), statx, open_tree, listmount, statmount,
 *                          fanotify_init
 *   SUBVOLD_FAULT_ERRNOS   comma-separated errno numbers, one picked at
 *                          random per injected failure
 *   SUBVOLD_FAULT_PERCENT  chance of failure per call, 0..100
 *   SUBVOLD_FAULT_SEED     seed of the per-thread random numbers
 *   SUBVOLD_FAULT_SWITCH   a path: failures only while that file exists, so
 *                          that a test can switch them off and watch the
 *                          daemon recover
 *   SUBVOLD_FAULT_CLOCK    a path to a file holding a signed number of
 *                          seconds added to CLOCK_REALTIME (clock_gettime,
 *                          gettimeofday, time): a clock jump without
 *                          setting the machine's clock
 *   SUBVOLD_FAULT_KILL_DIR a directory: each write() or fsync() to a file
 *                          in it raises SIGKILL first, after writing a
 *                          random part, with SUBVOLD_FAULT_KILL_PERCENT
 *                          chance (a crash while a cache file is written)
 *
 * Each injected failure is counted; the first one per call is logged on
 * stderr as "fault-shim: CALL failed with ERRNO", so a test can tell that
 * faults were really injected.  The shim is never built with sanitizers;
 * in front of an ASan build, LD_PRELOAD must name libasan first (see
 * tests/README.md). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The syscall numbers subvold uses, newer than the installed headers. */
#include "kernel-compat.h"

enum { C_IOCTL, C_STATX, C_OPEN_TREE, C_LISTMOUNT, C_STATMOUNT, C_FANOTIFY_INIT, _C_MAX };
static const char *const names[_C_MAX] = { "ioctl", "statx", "open_tree", "listmount", "statmount", "fanotify_init" };

static bool enabled[_C_MAX], logged[_C_MAX];
static int errnos[32], n_errnos, percent, kill_percent;
static unsigned seed;
static const char *switch_path, *clock_path, *kill_dir;
static __thread unsigned rng;
static __thread bool rng_set;

static void init(void) {
        static bool done;
        const char *e;

        if (done)
                return;
        done = true;
        if ((e = getenv("SUBVOLD_FAULT_CALLS")))
                for (int i = 0; i < _C_MAX; i++) {
                        size_t n = strlen(names[i]);
                        for (const char *p = e; (p = strstr(p, names[i])); p += n)
                                if ((p == e || p[-1] == ',') && (p[n] == ',' || p[n] == 0))
                                        enabled[i] = true;
                }
        if ((e = getenv("SUBVOLD_FAULT_ERRNOS")))
                for (char *end; *e && n_errnos < 32; e = *end ? end + 1 : end) {
                        errnos[n_errnos++] = (int) strtol(e, &end, 10);
                        if (end == e)
                                break;
                }
        if (n_errnos == 0)
                errnos[n_errnos++] = EIO;
        percent = (e = getenv("SUBVOLD_FAULT_PERCENT")) ? atoi(e) : 0;
        seed = (e = getenv("SUBVOLD_FAULT_SEED")) ? (unsigned) atoi(e) : 1;
        switch_path = getenv("SUBVOLD_FAULT_SWITCH");
        clock_path = getenv("SUBVOLD_FAULT_CLOCK");
        kill_dir = getenv("SUBVOLD_FAULT_KILL_DIR");
        kill_percent = (e = getenv("SUBVOLD_FAULT_KILL_PERCENT")) ? atoi(e) : 0;
}

/* Thread-local, so that the scanner thread and the main thread do not race
 * on one state; seeded from the seed and the thread id. */
static unsigned next_random(void) {
        if (!rng_set) {
                rng = seed ^ (unsigned) syscall(SYS_gettid) * 2654435761u;
                rng_set = true;
        }
        return (unsigned) rand_r(&rng);
}

/* Whether this call of @c fails; sets errno if so. */
static bool inject(int c) {
        int e;

        init();
        if (!enabled[c] || percent <= 0)
                return false;
        if (switch_path && access(switch_path, F_OK) < 0)
                return false;
        if ((int) (next_random() % 100) >= percent)
                return false;
        e = errnos[next_random() % (unsigned) n_errnos];
        if (!logged[c]) {
                logged[c] = true;
                fprintf(stderr, "fault-shim: %s failed with %s\n", names[c], strerrorname_np(e) ?: "?");
        }
        errno = e;
        return true;
}

#define NEXT(name) ({ static __typeof__(name) *real; if (!real) real = dlsym(RTLD_NEXT, #name); real; })

int ioctl(int fd, unsigned long request, ...) {
        va_list ap;
        void *arg;

        va_start(ap, request);
        arg = va_arg(ap, void *);
        va_end(ap);
        /* Only btrfs's: the others (terminals, sockets) are not what is tested. */
        if (_IOC_TYPE(request) == 0x94 && inject(C_IOCTL))
                return -1;
        return NEXT(ioctl)(fd, request, arg);
}

long syscall(long number, ...) {
        long a[6];
        va_list ap;
        int c = -1;

        va_start(ap, number);
        for (int i = 0; i < 6; i++)
                a[i] = va_arg(ap, long);
        va_end(ap);
        switch (number) {
        case __NR_statx:     c = C_STATX; break;
        case __NR_open_tree: c = C_OPEN_TREE; break;
        case __NR_listmount: c = C_LISTMOUNT; break;
        case __NR_statmount: c = C_STATMOUNT; break;
        }
        if (c >= 0 && inject(c))
                return -1;
        return NEXT(syscall)(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int fanotify_init(unsigned flags, unsigned event_f_flags) {
        if (inject(C_FANOTIFY_INIT))
                return -1;
        return NEXT(fanotify_init)(flags, event_f_flags);
}

/* ---- CLOCK_REALTIME offset ---- */

static long long clock_offset(void) {
        char buf[32] = {};
        int fd, saved = errno;
        ssize_t k;

        init();
        if (!clock_path)
                return 0;
        fd = open(clock_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                errno = saved;
                return 0;
        }
        k = read(fd, buf, sizeof buf - 1);
        close(fd);
        errno = saved;
        return k > 0 ? strtoll(buf, NULL, 10) : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
        int r = NEXT(clock_gettime)(id, ts);

        if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
                ts->tv_sec += clock_offset();
        return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
        int r = NEXT(gettimeofday)(tv, tz);

        if (r == 0)
                tv->tv_sec += clock_offset();
        return r;
}

time_t time(time_t *t) {
        time_t now = NEXT(time)(NULL) + clock_offset();

        if (t)
                *t = now;
        return now;
}

/* ---- SIGKILL while a file in SUBVOLD_FAULT_KILL_DIR is written ---- */

static bool in_kill_dir(int fd) {
        char link[64], target[PATH_MAX];
        size_t n;
        ssize_t k;

        init();
        if (!kill_dir || kill_percent <= 0)
                return false;
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        k = readlink(link, target, sizeof target - 1);
        if (k < 0)
                return false;
        target[k] = 0;
        n = strlen(kill_dir);
        return strncmp(target, kill_dir, n) == 0 && target[n] == '/';
}

ssize_t write(int fd, const void *buf, size_t count) {
        int saved = errno;

        if (in_kill_dir(fd) && (int) (next_random() % 100) < kill_percent) {
                /* A random part of it reaches the file first. */
                if (count > 0)
                        (void) NEXT(write)(fd, buf, next_random() % count);
                raise(SIGKILL);
        }
        errno = saved;
        return NEXT(write)(fd, buf, count);
}

int fsync(int fd) {
        int saved = errno;

        if (in_kill_dir(fd) && (int) (next_random() % 100) < kill_percent)
                raise(SIGKILL);
        errno = saved;
        return NEXT(fsync)(fd);
}
