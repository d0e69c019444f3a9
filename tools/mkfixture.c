/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * mkfixture - populate a mounted btrfs with subvolumes for the benchmark.
 *
 * usage: mkfixture [--snapshots=COUNT] [--empty] MNT N
 *        mkfixture --files MNT N
 *
 * Creates N subvolumes below MNT (the top level of a btrfs):
 *   MNT/vol/vNNNNNN   plain read-write subvolumes, N - COUNT of them, each
 *                     holding three small files (inline, one block, 16 KiB),
 *                     or none with --empty
 *   MNT/snap/sNNNNNN  read-only snapshots of the plain ones, COUNT of them
 *                     (one fifth of N unless given; each costs a commit)
 *
 * With --files: one subvolume MNT/files holding N files, the same three
 * sizes in turn, in directories of 1000 files each.
 *
 * Everything goes through fds (libbtrfsutil's *_fd forms, openat) so that no
 * path is looked up twice: at N=10000 the cost is the kernel's, not ours.
 */
#ifndef _GNU_SOURCE  /* meson defines it for the whole project */
#define _GNU_SOURCE
#endif
#include <btrfsutil.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const size_t file_sizes[] = { 100, 3000, 16384 };

static int fail_btrfs(const char *what, const char *name, enum btrfs_util_error e)
{
	fprintf(stderr, "mkfixture: %s %s: %s (%m)\n", what, name, btrfs_util_strerror(e));
	return 1;
}

static int open_dir_at(int dir_fd, const char *name)
{
	if (mkdirat(dir_fd, name, 0755) < 0 && errno != EEXIST)
		return -1;
	return openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Distinct contents per subvolume, so that nothing could ever be shared by
 * accident (dedupe, compression of identical blocks). */
static int write_files(int subvol_fd, unsigned salt)
{
	static char buf[16384];

	for (size_t i = 0; i < sizeof file_sizes / sizeof file_sizes[0]; i++) {
		char name[16];
		int fd;

		memset(buf, 'a' + (salt + i) % 26, file_sizes[i]);
		memcpy(buf, &salt, sizeof salt);
		snprintf(name, sizeof name, "f%zu", i);
		fd = openat(subvol_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			return -1;
		if (write(fd, buf, file_sizes[i]) != (ssize_t) file_sizes[i]) {
			close(fd);
			return -1;
		}
		close(fd);
	}
	return 0;
}

static int make_files(int top_fd, long n)
{
	enum btrfs_util_error e = btrfs_util_create_subvolume_fd(top_fd, "files", 0, NULL, NULL);
	int subvol_fd, dir_fd = -1;
	char name[32];

	if (e)
		return fail_btrfs("create subvolume", "files", e);
	subvol_fd = openat(top_fd, "files", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (subvol_fd < 0)
		return 1;
	for (long i = 0; i < n; i++) {
		size_t size = file_sizes[i % 3];
		static char buf[16384];
		int fd;

		if (i % 1000 == 0) {
			if (dir_fd >= 0)
				close(dir_fd);
			snprintf(name, sizeof name, "d%04ld", i / 1000);
			dir_fd = open_dir_at(subvol_fd, name);
			if (dir_fd < 0)
				return 1;
		}
		memset(buf, 'a' + i % 26, size);
		memcpy(buf, &i, sizeof i);
		snprintf(name, sizeof name, "f%06ld", i);
		fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || write(fd, buf, size) != (ssize_t) size) {
			fprintf(stderr, "mkfixture: files/%s: %m\n", name);
			return 1;
		}
		close(fd);
	}
	if (dir_fd >= 0)
		close(dir_fd);
	close(subvol_fd);
	return 0;
}

static int parse_count(const char *s, long *ret)
{
	char *end;

	errno = 0;
	*ret = strtol(s, &end, 10);
	if (errno || *end || end == s || *ret < 0 || *ret > 1000000) {
		fprintf(stderr, "mkfixture: bad number '%s'\n", s);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "files", no_argument, NULL, 'f' },
		{ "snapshots", required_argument, NULL, 's' },
		{ "empty", no_argument, NULL, 'e' },
		{}
	};
	struct timespec t0, t1;
	enum btrfs_util_error e;
	int top_fd, vol_fd, snap_fd, c;
	long n, snapshots = -1, plain;
	bool files = false, empty = false;
	const char *mnt;
	char name[32];

	while ((c = getopt_long(argc, argv, "", options, NULL)) >= 0) {
		if (c == 'f')
			files = true;
		else if (c == 'e')
			empty = true;
		else if (c != 's' || parse_count(optarg, &snapshots) < 0)
			return 2;
	}
	if (argc - optind != 2) {
		fprintf(stderr, "usage: %s [--snapshots=COUNT] [--empty] MNT N\n"
			"       %s --files MNT N\n", argv[0], argv[0]);
		return 2;
	}
	mnt = argv[optind];
	if (parse_count(argv[optind + 1], &n) < 0 || n < 1)
		return 2;
	if (snapshots < 0)
		snapshots = n / 5;
	if (snapshots >= n) {
		fprintf(stderr, "mkfixture: %ld snapshots leave no subvolume to take them of\n", snapshots);
		return 2;
	}
	plain = n - snapshots;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	top_fd = open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (top_fd < 0) {
		fprintf(stderr, "mkfixture: open %s: %m\n", mnt);
		return 1;
	}
	if (files) {
		if (make_files(top_fd, n) != 0 || syncfs(top_fd) < 0)
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("files=%ld elapsed_ms=%.0f\n", n,
		       (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
		return 0;
	}
	vol_fd = open_dir_at(top_fd, "vol");
	snap_fd = open_dir_at(top_fd, "snap");
	if (vol_fd < 0 || snap_fd < 0) {
		fprintf(stderr, "mkfixture: mkdir in %s: %m\n", mnt);
		return 1;
	}

	for (long i = 1; i <= plain; i++) {
		int fd;

		snprintf(name, sizeof name, "v%06ld", i);
		e = btrfs_util_create_subvolume_fd(vol_fd, name, 0, NULL, NULL);
		if (e)
			return fail_btrfs("create subvolume", name, e);
		if (empty)
			continue;
		fd = openat(vol_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0 || write_files(fd, (unsigned) i) < 0) {
			fprintf(stderr, "mkfixture: files in vol/%s: %m\n", name);
			return 1;
		}
		close(fd);
	}

	/* The default N/5 snapshots never outnumber the 4N/5 plain subvolumes,
	 * so each source gets at most one snapshot; more go round again. */
	for (long j = 1; j <= snapshots; j++) {
		char source[32];
		int fd;

		snprintf(source, sizeof source, "v%06ld", (j - 1) % plain + 1);
		fd = openat(vol_fd, source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "mkfixture: open vol/%s: %m\n", source);
			return 1;
		}
		snprintf(name, sizeof name, "s%06ld", j);
		e = btrfs_util_create_snapshot_fd2(fd, snap_fd, name,
						   BTRFS_UTIL_CREATE_SNAPSHOT_READ_ONLY, NULL, NULL);
		close(fd);
		if (e)
			return fail_btrfs("create snapshot", name, e);
	}

	/* One commit at the end instead of relying on the 30 s commit timer,
	 * so the tree search the tools use sees a settled filesystem. */
	if (syncfs(top_fd) < 0) {
		fprintf(stderr, "mkfixture: syncfs: %m\n");
		return 1;
	}
	close(snap_fd);
	close(vol_fd);
	close(top_fd);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	printf("subvolumes=%ld plain=%ld snapshots=%ld elapsed_ms=%.0f\n", n, plain, snapshots,
	       (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	return 0;
}
