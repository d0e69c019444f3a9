/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * wakebench - the floor under subvold's idle CPU: what a process costs that
 * wakes as often as subvold's generation timer and does nothing, or reads
 * the same sysfs files and nothing else.
 *
 * usage: wakebench INTERVAL_MS SECONDS [FILE...]
 *
 * Wakes every INTERVAL_MS on a CLOCK_MONOTONIC timerfd through epoll (as
 * sd-event does), preads each FILE at offset 0 (as subvold reads each
 * filesystem's /sys/fs/btrfs/<uuid>/generation), for SECONDS, and prints
 *   wakeups= cpu_us_per_wakeup= cpu_percent=
 * from its own schedstat (the CPU time the kernel accounts to it, as
 * bench.sh reads subvold's), the first wake-up left out.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

static uint64_t cpu_ns(void)
{
	unsigned long long ns = 0;
	FILE *f = fopen("/proc/self/schedstat", "re");

	if (!f || fscanf(f, "%llu", &ns) != 1) {
		fprintf(stderr, "wakebench: /proc/self/schedstat: %s\n", strerror(errno));
		exit(1);
	}
	fclose(f);
	return ns;
}

int main(int argc, char **argv)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct itimerspec its = { 0 };
	long interval_ms, seconds, wakeups;
	int tfd, ep, n = argc - 3, *fds;
	uint64_t cpu0 = 0;

	if (argc < 3 || (interval_ms = atol(argv[1])) < 1 || (seconds = atol(argv[2])) < 1) {
		fprintf(stderr, "usage: %s INTERVAL_MS SECONDS [FILE...]\n", argv[0]);
		return 2;
	}
	fds = calloc(n > 0 ? n : 1, sizeof *fds);
	for (int i = 0; i < n; i++)
		if ((fds[i] = open(argv[i + 3], O_RDONLY | O_CLOEXEC)) < 0) {
			fprintf(stderr, "wakebench: %s: %s\n", argv[i + 3], strerror(errno));
			return 1;
		}
	its.it_interval.tv_sec = its.it_value.tv_sec = interval_ms / 1000;
	its.it_interval.tv_nsec = its.it_value.tv_nsec = interval_ms % 1000 * 1000000;
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (tfd < 0 || ep < 0 || timerfd_settime(tfd, 0, &its, NULL) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev) < 0) {
		fprintf(stderr, "wakebench: timer: %s\n", strerror(errno));
		return 1;
	}
	wakeups = seconds * 1000 / interval_ms;
	for (long w = 0; w <= wakeups; w++) {
		uint64_t expirations;
		char buf[64];

		if (epoll_wait(ep, &ev, 1, -1) != 1 || read(tfd, &expirations, sizeof expirations) < 0) {
			fprintf(stderr, "wakebench: wait: %s\n", strerror(errno));
			return 1;
		}
		for (int i = 0; i < n; i++)
			if (pread(fds[i], buf, sizeof buf, 0) < 0) {
				fprintf(stderr, "wakebench: %s: %s\n", argv[i + 3], strerror(errno));
				return 1;
			}
		if (w == 0)
			cpu0 = cpu_ns();
	}
	uint64_t cpu = cpu_ns() - cpu0;
	printf("wakeups=%ld cpu_us_per_wakeup=%.1f cpu_percent=%.4f\n", wakeups, cpu / 1e3 / wakeups,
	       cpu / 1e9 / seconds * 100);
	return 0;
}
