/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <getopt.h>
#include <malloc.h>

#include "bus-objects.h"
#include "manager.h"
#include "util.h"

static MountSource arg_mount_source = MOUNT_SOURCE_AUTO;
static char *arg_cache_dir = NULL;
static uint64_t arg_exit_idle_usec = 0;
static size_t arg_max_message_size = BUS_DEFAULT_MAX_MESSAGE_SIZE;
static ScannerOptions arg_scan = SCANNER_OPTIONS_DEFAULT;

static void help(void) {
        printf("Usage: %s [OPTIONS]\n\n"
               "Publishes the subvolumes of every mounted btrfs filesystem on the D-Bus\n"
               "system bus as org.subvold.Subvold1.\n\n"
               "  -h --help        Show this help\n"
               "     --version     Show the version\n"
               "     --mountinfo   Read mounts from /proc/self/mountinfo instead of listmount()\n"
               "     --cache-dir=DIR\n"
               "                   Keep the usage and scan caches in DIR (default:\n"
               "                   $CACHE_DIRECTORY, which systemd sets; without either,\n"
               "                   nothing is persisted)\n"
               "     --exit-idle-sec=SEC\n"
               "                   Exit after SEC seconds without bus calls (default: never);\n"
               "                   D-Bus activation starts subvold again on the next call\n"
               "     --max-message-size=BYTES\n"
               "                   Largest reply to send (K, M, G; default: 16M); set it no\n"
               "                   higher than the bus's max_message_size (dbus-daemon: 32M)\n"
               "     --scan-max-memory=BYTES\n"
               "                   Measure a filesystem without quotas only while what the\n"
               "                   scanner keeps of it fits in BYTES (K, M, G; default: 256M)\n"
               "     --scan-nice=N CPU priority of the scanner, -20..19 (default: 19)\n"
               "     --scan-io-class=idle|best-effort\n"
               "                   I/O class of the scanner (default: idle)\n"
               "  -v --verbose     Log debug messages too\n\n"
               "The bus address is taken from $DBUS_SYSTEM_BUS_ADDRESS when it is set.\n",
               program_invocation_short_name);
}

/* Returns 1 to go on, 0 to exit successfully, negative on bad usage. */
static int parse_argv(int argc, char *argv[]) {
        enum {
                ARG_VERSION = 0x100, ARG_MOUNTINFO, ARG_CACHE_DIR, ARG_EXIT_IDLE_SEC, ARG_MAX_MESSAGE_SIZE, ARG_SCAN_MAX_MEMORY,
                ARG_SCAN_NICE, ARG_SCAN_IO_CLASS,
        };
        static const struct option options[] = {
                { "help",      no_argument, NULL, 'h'           },
                { "version",   no_argument, NULL, ARG_VERSION   },
                { "mountinfo", no_argument, NULL, ARG_MOUNTINFO },
                { "cache-dir", required_argument, NULL, ARG_CACHE_DIR },
                { "exit-idle-sec", required_argument, NULL, ARG_EXIT_IDLE_SEC },
                { "max-message-size", required_argument, NULL, ARG_MAX_MESSAGE_SIZE },
                { "scan-max-memory", required_argument, NULL, ARG_SCAN_MAX_MEMORY },
                { "scan-nice", required_argument, NULL, ARG_SCAN_NICE },
                { "scan-io-class", required_argument, NULL, ARG_SCAN_IO_CLASS },
                { "verbose",   no_argument, NULL, 'v'           },
                {}
        };
        int c;

        while ((c = getopt_long(argc, argv, "hv", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("subvold %s\n", PROJECT_VERSION);
                        return 0;
                case ARG_MOUNTINFO:
                        arg_mount_source = MOUNT_SOURCE_MOUNTINFO;
                        break;
                case ARG_CACHE_DIR:
                        free(arg_cache_dir);
                        arg_cache_dir = strdup(optarg);
                        if (!arg_cache_dir)
                                return -ENOMEM;
                        break;
                case ARG_EXIT_IDLE_SEC: {
                        uint64_t sec;

                        if (parse_u64(optarg, &sec) < 0 || sec > 86400 * 365) {
                                log_error("Invalid --exit-idle-sec value: %s", optarg);
                                return -EINVAL;
                        }
                        arg_exit_idle_usec = sec * 1000000;
                        break;
                }
                case ARG_MAX_MESSAGE_SIZE: {
                        uint64_t n;

                        /* Room for any one object (see SUBVOLUME_PATH_MAX),
                         * and no more than the D-Bus specification allows. */
                        if (parse_size(optarg, &n) < 0 || n < (1u << 20) || n > (128u << 20)) {
                                log_error("Invalid --max-message-size value (1M to 128M): %s", optarg);
                                return -EINVAL;
                        }
                        arg_max_message_size = (size_t) n;
                        break;
                }
                case ARG_SCAN_MAX_MEMORY: {
                        uint64_t n;

                        if (parse_size(optarg, &n) < 0 || n > SIZE_MAX) {
                                log_error("Invalid --scan-max-memory value: %s", optarg);
                                return -EINVAL;
                        }
                        arg_scan.max_memory = (size_t) n;
                        break;
                }
                case ARG_SCAN_NICE: {
                        uint64_t n;
                        bool negative = optarg[0] == '-';

                        if (parse_u64(optarg + negative, &n) < 0 || n > (negative ? 20 : 19)) {
                                log_error("Invalid --scan-nice value: %s", optarg);
                                return -EINVAL;
                        }
                        arg_scan.nice = negative ? -(int) n : (int) n;
                        break;
                }
                case ARG_SCAN_IO_CLASS:
                        if (strcmp(optarg, "idle") == 0)
                                arg_scan.io_class = SCAN_IO_IDLE;
                        else if (strcmp(optarg, "best-effort") == 0)
                                arg_scan.io_class = SCAN_IO_BEST_EFFORT;
                        else {
                                log_error("Invalid --scan-io-class value: %s", optarg);
                                return -EINVAL;
                        }
                        break;
                case 'v':
                        log_max_level = LOG_LEVEL_DEBUG;
                        break;
                default:
                        return -EINVAL;
                }
        if (optind < argc) {
                log_error("%s takes no arguments.", program_invocation_short_name);
                return -EINVAL;
        }
        if (!arg_cache_dir) {
                /* systemd's CacheDirectory= may list several, separated by ':'. */
                const char *e = getenv("CACHE_DIRECTORY");
                if (e && *e && !(arg_cache_dir = strndup(e, strcspn(e, ":"))))
                        return -ENOMEM;
        }
        return 1;
}

int main(int argc, char *argv[]) {
        _cleanup_(manager_freep) Manager *m = NULL;
        int r;

        r = parse_argv(argc, argv);
        if (r <= 0) {
                free(arg_cache_dir);
                return r < 0 ? 2 : 0;
        }

        /* A GetManagedObjects reply is megabytes at 10,000 subvolumes.  A
         * fixed mmap threshold (glibc otherwise raises it after the first
         * big free) hands such buffers back to the kernel when freed, so
         * one large reply does not stay in our RSS. */
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        /* One arena: the scanner thread's short-lived buffers would
         * otherwise pin a second heap. */
        mallopt(M_ARENA_MAX, 1);

        r = manager_new(arg_mount_source, arg_cache_dir, arg_exit_idle_usec, arg_max_message_size, &arg_scan, &m);
        free(arg_cache_dir);
        if (r < 0) {
                log_error_errno(r, "Failed to allocate the manager: %m");
                return 1;
        }
        r = manager_start(m);
        if (r < 0)
                return 1;
        r = manager_run(m);
        if (r < 0) {
                log_error_errno(r, "Event loop failed: %m");
                return 1;
        }
        return 0;
}
