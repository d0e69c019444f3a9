/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * busbench - time D-Bus calls from one long-lived sd-bus connection, and
 * time a daemon's start until it reports READY=1.
 *
 * usage: busbench getid   ADDRESS CALLS
 *        busbench get     ADDRESS CALLS OBJECT INTERFACE PROPERTY
 *        busbench get-while-scanning ADDRESS CALLS OBJECT INTERFACE PROPERTY FILESYSTEM
 *        busbench managed ADDRESS CALLS [OBJECT]
 *        busbench pages   ADDRESS CALLS FILESYSTEM [PAGE]
 *        busbench byfd    ADDRESS CALLS PATH
 *        busbench snapshots ADDRESS CALLS SUBVOLUME [PAGE]
 *        busbench udisks  ADDRESS CALLS OBJECT
 *        busbench snapper ADDRESS CALLS CONFIG
 *        busbench startup BINARY [ARG...]
 *
 * getid    org.freedesktop.DBus.GetId on the bus itself: one round trip
 *          through the broker, the floor any service call pays.
 * get      org.freedesktop.DBus.Properties.Get of one property.
 * get-while-scanning
 *          the same while subvold's scanner is at work: before every 20th
 *          call, ScanProgress of the FILESYSTEM object is read (not timed)
 *          and the run stops when it is 1, or after CALLS calls.  Fails if
 *          the scan is over before the first call.
 * managed  org.freedesktop.DBus.ObjectManager.GetManagedObjects on OBJECT
 *          (default /org/subvold/Subvold1).
 * pages    every subvolume of FILESYSTEM (an object path) with all its
 *          properties, through Filesystem.GetSubvolumes pages of up to PAGE
 *          (default 1000, as subvolctl asks for): one "call" is the whole
 *          listing, from the first page to the one whose next id is 0; bytes
 *          and objects are of the whole last listing.
 * byfd     Manager.GetSubvolumeByFd with an fd of PATH (opened once,
 *          O_PATH), as a file manager asks for the subvolume of a folder.
 * snapshots
 *          the snapshots taken of SUBVOLUME (an object path) with all their
 *          properties: Subvolume.GetSnapshots, paged as above.
 * udisks   org.freedesktop.UDisks2.Filesystem.BTRFS.GetSubvolumes(false, {})
 *          of OBJECT (a block device of udisksd), the peer of pages.
 * snapper  org.opensuse.Snapper.ListSnapshots(CONFIG) of snapperd, the
 *          peer of snapshots.
 * get, managed, pages, snapshots and byfd call org.subvold.Subvold1, or
 * $BUSBENCH_DEST when set; udisks and snapper call their own services.
 *
 * The call modes connect once, then make CALLS calls back to back, each
 * timed alone (CLOCK_MONOTONIC around sd_bus_call()), and print
 *   name=MODE calls=N first_us= median_us= p99_us= min_us= max_us= bytes= body_bytes=
 * Every call is counted, the first too (its cost is also shown as first_us).
 * p99 is the nearest-rank 99th percentile.
 *
 * bytes is the size of the last reply as it travels on the socket: the
 * D-Bus (version 1) marshalled header plus body.  sd-bus has no public call
 * for that, so it is computed from the received message by the marshalling
 * rules of the D-Bus specification (alignment and padding included); the
 * header is counted with the fields a broker delivers on a method return
 * (REPLY_SERIAL, DESTINATION, SENDER, SIGNATURE).  Replies carrying fds
 * are not expected here and would be under-counted by 8 bytes.
 *
 * startup creates an AF_UNIX datagram socket, starts BINARY with
 * NOTIFY_SOCKET pointing at it and stdin from /dev/null, stdout and stderr
 * to busbench's stderr (so a caller capturing our stdout does not wait for
 * the daemon's), waits for a datagram with a READY=1 line and prints
 *   name=startup ready_ms=... pid=PID
 * leaving the daemon running.  Fails if the daemon exits first or after
 * $BUSBENCH_TIMEOUT seconds (default 60), killing it in the latter case.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-bus.h>

#define SUBVOLD_NAME    "org.subvold.Subvold1"
#define SUBVOLD_MANAGER "/org/subvold/Subvold1"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}

/* ---- wire size ---------------------------------------------------------- */

static uint64_t align_to(uint64_t off, unsigned a)
{
	return (off + a - 1) / a * a;
}

/* D-Bus 1 alignment of a type: everything is aligned to its own size, with
 * booleans 4 bytes, strings/arrays by their uint32 length, containers by
 * their start (struct and dict entry 8, variant 1 for its signature). */
static unsigned type_alignment(char t)
{
	switch (t) {
	case 'y': case 'g': case 'v':
		return 1;
	case 'n': case 'q':
		return 2;
	case 'b': case 'i': case 'u': case 'h': case 's': case 'o': case 'a':
		return 4;
	default: /* x t d ( { r e */
		return 8;
	}
}

static unsigned fixed_size(char t)
{
	switch (t) {
	case 'y': return 1;
	case 'n': case 'q': return 2;
	case 'b': case 'i': case 'u': case 'h': return 4;
	case 'x': case 't': case 'd': return 8;
	default: return 0;
	}
}

/* Adds the marshalled size of the rest of the current container to *off,
 * reading the message as it goes. */
static int walk(sd_bus_message *m, uint64_t *off)
{
	for (;;) {
		const char *contents;
		char type;
		int r;

		r = sd_bus_message_peek_type(m, &type, &contents);
		if (r <= 0)
			return r;

		if (type == 'a') {
			*off = align_to(*off, 4) + 4;
			*off = align_to(*off, type_alignment(contents[0]));
			if (contents[1] == '\0' && fixed_size(contents[0]) && contents[0] != 'h') {
				/* Arrays of fixed-size scalars (ay!) in one go. */
				const void *p;
				size_t size;

				r = sd_bus_message_read_array(m, contents[0], &p, &size);
				if (r < 0)
					return r;
				*off += size;
				continue;
			}
		} else if (type == 'r' || type == 'e') {
			*off = align_to(*off, 8);
		} else if (type == 'v') {
			*off += 1 + strlen(contents) + 1;
		}

		if (strchr("arev", type)) {
			r = sd_bus_message_enter_container(m, type, contents);
			if (r < 0)
				return r;
			r = walk(m, off);
			if (r < 0)
				return r;
			r = sd_bus_message_exit_container(m);
			if (r < 0)
				return r;
			continue;
		}

		union {
			uint64_t u64;
			const char *s;
		} v;
		r = sd_bus_message_read_basic(m, type, &v);
		if (r < 0)
			return r;
		if (type == 's' || type == 'o')
			*off = align_to(*off, 4) + 4 + strlen(v.s) + 1;
		else if (type == 'g')
			*off += 1 + strlen(v.s) + 1;
		else
			*off = align_to(*off, type_alignment(type)) + fixed_size(type);
	}
}

/* A header field is a struct (BYTE code, VARIANT value); each starts 8-aligned
 * and the header ends 8-aligned, so the order of fields does not matter. */
static uint64_t header_field_size(char type, const char *s)
{
	uint64_t off = 1 + 3; /* code, variant signature "\1<type>\0" */

	if (type == 'u')
		off += 4;
	else if (type == 'g')
		off += 1 + strlen(s) + 1;
	else
		off += 4 + strlen(s) + 1;
	return align_to(off, 8);
}

static int reply_wire_size(sd_bus_message *m, uint64_t *ret_total, uint64_t *ret_body)
{
	const char *sig = sd_bus_message_get_signature(m, true);
	const char *dest = sd_bus_message_get_destination(m);
	const char *sender = sd_bus_message_get_sender(m);
	uint64_t header = 12 + 4, body = 0;
	int r;

	r = sd_bus_message_rewind(m, true);
	if (r < 0)
		return r;
	r = walk(m, &body);
	if (r < 0)
		return r;

	header += header_field_size('u', NULL); /* REPLY_SERIAL */
	if (dest)
		header += header_field_size('s', dest);
	if (sender)
		header += header_field_size('s', sender);
	if (sig && *sig)
		header += header_field_size('g', sig);

	*ret_total = align_to(header, 8) + body;
	*ret_body = body;
	return 0;
}

/* ---- timed calls -------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

	return (x > y) - (x < y);
}

/* The entries of a GetSubvolumes or GetSnapshots page, and its next id. */
static int count_page(sd_bus_message *m, long *n, uint64_t *ret_next)
{
	int r;

	r = sd_bus_message_enter_container(m, 'a', "{oa{sv}}");
	if (r < 0)
		return r;
	while ((r = sd_bus_message_skip(m, "{oa{sv}}")) > 0)
		(*n)++;
	if (r >= 0)
		r = sd_bus_message_exit_container(m);
	if (r >= 0)
		r = sd_bus_message_read(m, "t", ret_next);
	return r;
}

static int count_objects(sd_bus_message *m, long *ret)
{
	const char *contents;
	long n = 0;
	char type;
	int r;

	r = sd_bus_message_rewind(m, true);
	if (r >= 0)
		r = sd_bus_message_peek_type(m, &type, &contents);
	if (r >= 0 && type != 'a')
		r = -EBADMSG;
	if (r >= 0)
		r = sd_bus_message_enter_container(m, 'a', contents);
	if (r < 0)
		return r;
	while ((r = sd_bus_message_skip(m, contents)) > 0)
		n++;
	if (r < 0)
		return r;
	*ret = n;
	return 0;
}

static int run_calls(int argc, char **argv)
{
	const char *mode = argv[1], *address = argv[2];
	const char *dest = getenv("BUSBENCH_DEST") ?: SUBVOLD_NAME;
	sd_bus_message *reply = NULL;
	sd_bus *bus = NULL;
	uint64_t *t, total = 0, body = 0;
	long calls, objects = -1;
	char *end;
	int r;

	errno = 0;
	calls = strtol(argv[3], &end, 10);
	if (errno || *end || calls < 1 || calls > 10000000) {
		fprintf(stderr, "busbench: bad CALLS '%s'\n", argv[3]);
		return 2;
	}
	bool get = !strcmp(mode, "get") || !strcmp(mode, "get-while-scanning");
	bool snapshots = !strcmp(mode, "snapshots");
	bool pages = !strcmp(mode, "pages") || snapshots, byfd = !strcmp(mode, "byfd");
	bool udisks = !strcmp(mode, "udisks"), snapper = !strcmp(mode, "snapper");
	int fd = -1;
	unsigned long page_size = pages && argc > 5 ? strtoul(argv[5], NULL, 10) : 1000;
	bool while_scanning = !strcmp(mode, "get-while-scanning");

	if ((!strcmp(mode, "get") && argc != 7) || (while_scanning && argc != 8) ||
	    (!strcmp(mode, "getid") && argc != 4) || (!strcmp(mode, "managed") && argc != 4 && argc != 5) ||
	    (pages && argc != 5 && argc != 6) || ((byfd || udisks || snapper) && argc != 5) ||
	    page_size < 1 || page_size > UINT32_MAX) {
		fprintf(stderr, "busbench: wrong number of arguments for %s\n", mode);
		return 2;
	}

	r = sd_bus_new(&bus);
	if (r >= 0)
		r = sd_bus_set_address(bus, address);
	if (r >= 0)
		r = sd_bus_set_bus_client(bus, true);
	if (r >= 0)
		r = sd_bus_start(bus);
	if (r >= 0) {
		/* Waits for the Hello reply, so the first timed call is a call. */
		const char *unique;

		r = sd_bus_get_unique_name(bus, &unique);
	}
	if (r < 0) {
		fprintf(stderr, "busbench: connect to %s: %s\n", address, strerror(-r));
		return 1;
	}

	if (byfd) {
		fd = open(argv[4], O_PATH | O_CLOEXEC);
		if (fd < 0) {
			fprintf(stderr, "busbench: open %s: %s\n", argv[4], strerror(errno));
			return 1;
		}
	}
	t = calloc(calls, sizeof *t);
	if (!t)
		return 1;

	for (long i = 0; i < calls; i++) {
		sd_bus_error error = SD_BUS_ERROR_NULL;
		uint64_t t0;

		if (while_scanning && i % 20 == 0) {
			double progress = 0;

			r = sd_bus_get_property_trivial(bus, dest, argv[7], "org.subvold.Subvold1.Filesystem",
							"ScanProgress", &error, 'd', &progress);
			if (r < 0) {
				fprintf(stderr, "busbench: ScanProgress: %s\n", error.message ?: strerror(-r));
				return 1;
			}
			if (progress >= 1) {
				calls = i;
				break;
			}
		}
		reply = sd_bus_message_unref(reply);
		t0 = now_ns();
		if (pages) {
			uint64_t next = 0, bytes, body_bytes;

			objects = 0, total = body = 0;
			do {
				reply = sd_bus_message_unref(reply);
				r = sd_bus_call_method(bus, dest, argv[4],
						       snapshots ? "org.subvold.Subvold1.Subvolume" : "org.subvold.Subvold1.Filesystem",
						       snapshots ? "GetSnapshots" : "GetSubvolumes", &error, &reply, "tu", next,
						       (uint32_t) page_size);
				if (r >= 0)
					r = count_page(reply, &objects, &next);
				if (r >= 0 && i == calls - 1 && reply_wire_size(reply, &bytes, &body_bytes) >= 0)
					total += bytes, body += body_bytes;
			} while (r >= 0 && next != 0);
		} else if (byfd)
			r = sd_bus_call_method(bus, dest, SUBVOLD_MANAGER, "org.subvold.Subvold1.Manager",
					       "GetSubvolumeByFd", &error, &reply, "h", fd);
		else if (udisks)
			r = sd_bus_call_method(bus, "org.freedesktop.UDisks2", argv[4],
					       "org.freedesktop.UDisks2.Filesystem.BTRFS", "GetSubvolumes",
					       &error, &reply, "ba{sv}", false, 0);
		else if (snapper)
			r = sd_bus_call_method(bus, "org.opensuse.Snapper", "/org/opensuse/Snapper",
					       "org.opensuse.Snapper", "ListSnapshots", &error, &reply, "s", argv[4]);
		else if (!strcmp(mode, "getid"))
			r = sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
					       "org.freedesktop.DBus", "GetId", &error, &reply, NULL);
		else if (get)
			r = sd_bus_call_method(bus, dest, argv[4], "org.freedesktop.DBus.Properties",
					       "Get", &error, &reply, "ss", argv[5], argv[6]);
		else
			r = sd_bus_call_method(bus, dest, argc > 4 ? argv[4] : SUBVOLD_MANAGER,
					       "org.freedesktop.DBus.ObjectManager",
					       "GetManagedObjects", &error, &reply, NULL);
		t[i] = now_ns() - t0;
		if (r < 0) {
			fprintf(stderr, "busbench: %s call %ld failed: %s: %s\n", mode, i + 1,
				error.name ?: "-", error.message ?: strerror(-r));
			return 1;
		}
		sd_bus_error_free(&error);
	}

	if (calls == 0) {
		fprintf(stderr, "busbench: the scan was over before the first call\n");
		return 1;
	}
	r = pages ? 0 : reply_wire_size(reply, &total, &body);
	if (r >= 0 && (!strcmp(mode, "managed") || udisks || snapper))
		r = count_objects(reply, &objects);
	if (r < 0) {
		fprintf(stderr, "busbench: reading the reply: %s\n", strerror(-r));
		return 1;
	}

	uint64_t first = t[0];
	qsort(t, calls, sizeof *t, cmp_u64);
	long p99 = (99 * calls + 99) / 100 - 1; /* nearest rank: ceil(0.99 n) */
	printf("name=%s calls=%ld first_us=%.1f median_us=%.1f p99_us=%.1f min_us=%.1f max_us=%.1f bytes=%llu body_bytes=%llu",
	       mode, calls, first / 1e3,
	       (calls % 2 ? t[calls / 2] : (t[calls / 2 - 1] + t[calls / 2]) / 2) / 1e3,
	       t[p99] / 1e3, t[0] / 1e3, t[calls - 1] / 1e3,
	       (unsigned long long) total, (unsigned long long) body);
	if (objects >= 0)
		printf(" objects=%ld", objects);
	putchar('\n');

	if (fd >= 0)
		close(fd);
	free(t);
	sd_bus_message_unref(reply);
	sd_bus_flush_close_unref(bus);
	return 0;
}

/* ---- startup ------------------------------------------------------------ */

static bool has_ready_line(const char *buf)
{
	for (const char *p = buf; p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (!strncmp(p, "READY=1", 7) && (p[7] == '\n' || p[7] == '\0'))
			return true;
	}
	return false;
}

static int run_startup(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[] = "/tmp/busbench.XXXXXX";
	const char *timeout_env = getenv("BUSBENCH_TIMEOUT");
	double timeout_s = timeout_env ? atof(timeout_env) : 60;
	uint64_t t0, deadline;
	int fd, r = 1;
	pid_t pid;

	if (argc < 3) {
		fprintf(stderr, "busbench: startup needs a BINARY\n");
		return 2;
	}
	/* A path, not an abstract name: every sd_notify implementation takes it. */
	if (!mkdtemp(dir)) {
		fprintf(stderr, "busbench: mkdtemp: %m\n");
		return 1;
	}
	snprintf(sa.sun_path, sizeof sa.sun_path, "%s/notify", dir);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0) {
		fprintf(stderr, "busbench: notify socket %s: %m\n", sa.sun_path);
		goto out;
	}

	t0 = now_ns();
	deadline = t0 + (uint64_t) (timeout_s * 1e9);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "busbench: fork: %m\n");
		goto out;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (null >= 0)
			dup2(null, STDIN_FILENO);
		dup2(STDERR_FILENO, STDOUT_FILENO);
		setenv("NOTIFY_SOCKET", sa.sun_path, 1);
		execv(argv[2], argv + 2);
		fprintf(stderr, "busbench: exec %s: %m\n", argv[2]);
		_exit(127);
	}

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char buf[4096];
		uint64_t now = now_ns();
		int status;
		ssize_t n;

		if (now >= deadline) {
			fprintf(stderr, "busbench: no READY=1 from %s within %.0f s, killing it\n",
				argv[2], timeout_s);
			kill(pid, SIGTERM);
			waitpid(pid, NULL, 0);
			goto out;
		}
		/* Wake up now and then only to notice an early exit; READY=1
		 * itself wakes us at once. */
		if (poll(&p, 1, 100) < 0 && errno != EINTR) {
			fprintf(stderr, "busbench: poll: %m\n");
			goto out;
		}
		if (p.revents & POLLIN) {
			n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
			if (n >= 0) {
				uint64_t t1 = now_ns();

				buf[n] = '\0';
				if (has_ready_line(buf)) {
					printf("name=startup ready_ms=%.2f pid=%d\n", (t1 - t0) / 1e6, (int) pid);
					r = 0;
					goto out;
				}
			}
		}
		if (waitpid(pid, &status, WNOHANG) == pid) {
			fprintf(stderr, "busbench: %s exited before READY=1 (%s %d)\n", argv[2],
				WIFEXITED(status) ? "status" : "signal",
				WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			goto out;
		}
	}
out:
	if (fd >= 0)
		close(fd);
	unlink(sa.sun_path);
	rmdir(dir);
	return r;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "startup"))
		return run_startup(argc, argv);
	if (argc >= 4 && (!strcmp(argv[1], "getid") || !strcmp(argv[1], "get") ||
			  !strcmp(argv[1], "get-while-scanning") || !strcmp(argv[1], "managed") ||
			  !strcmp(argv[1], "pages") || !strcmp(argv[1], "byfd") || !strcmp(argv[1], "snapshots") ||
			  !strcmp(argv[1], "udisks") || !strcmp(argv[1], "snapper")))
		return run_calls(argc, argv);
	fprintf(stderr,
		"usage: %1$s getid   ADDRESS CALLS\n"
		"       %1$s get     ADDRESS CALLS OBJECT INTERFACE PROPERTY\n"
		"       %1$s get-while-scanning ADDRESS CALLS OBJECT INTERFACE PROPERTY FILESYSTEM\n"
		"       %1$s managed ADDRESS CALLS [OBJECT]\n"
		"       %1$s pages   ADDRESS CALLS FILESYSTEM [PAGE]\n"
		"       %1$s byfd    ADDRESS CALLS PATH\n"
		"       %1$s snapshots ADDRESS CALLS SUBVOLUME [PAGE]\n"
		"       %1$s udisks  ADDRESS CALLS OBJECT\n"
		"       %1$s snapper ADDRESS CALLS CONFIG\n"
		"       %1$s startup BINARY [ARG...]\n", argv[0]);
	return 2;
}
