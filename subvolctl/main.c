/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* subvolctl: options, help, the pager, and which command runs. */
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "subvolctl.h"

JsonMode arg_json = JSON_OFF;
bool arg_bytes = false, arg_legend = true, arg_all = false, arg_inodes = false, arg_force = false;
int arg_snapshots = -1;
const char *arg_fs = NULL, *arg_output = NULL, *arg_from = NULL, *arg_to = NULL, *arg_address = NULL,
        *arg_snapshots_of = NULL;
static bool arg_pager = true;

/* The options a command may take; the rest it refuses. */
enum {
        OPT_JSON = 1 << 0, OPT_BYTES = 1 << 1, OPT_LEGEND = 1 << 2, OPT_SNAPSHOTS = 1 << 3, OPT_FS = 1 << 4,
        OPT_ALL = 1 << 5, OPT_INODES = 1 << 6, OPT_COLUMNS = 1 << 7, OPT_FILE = 1 << 8, OPT_FROM = 1 << 9,
        OPT_TO = 1 << 10, OPT_FORCE = 1 << 11, OPT_HUMAN = 1 << 12, OPT_SNAPSHOTS_OF = 1 << 13,
};

/* Help for each option, in the order help prints them. */
static const struct { unsigned bit; const char *name, *help; } option_help[] = {
        { OPT_JSON, "--json", "  -j --json[=MODE]       JSON output: pretty, short or off; -j and --json\n"
                              "                         alone are pretty on a terminal, short otherwise\n" },
        { OPT_BYTES, "--bytes", "     --bytes            Exact byte counts instead of IEC sizes (K = 1024)\n" },
        { OPT_HUMAN, "-h", "  -h --human-readable    IEC sizes, the default (as df -h)\n" },
        { OPT_LEGEND, "--no-legend", "     --no-legend        No header line and no summary\n" },
        { OPT_SNAPSHOTS, "--snapshots", "     --snapshots        Only snapshots\n"
                                        "     --no-snapshots     No snapshots\n" },
        { OPT_FS, "--fs", "     --fs=FILESYSTEM    Only this filesystem: a label, a UUID, a path on it,\n"
                          "                         or its object path\n" },
        { OPT_ALL, "--all", "  -a --all               df: every subvolume, not only the mounted ones;\n"
                            "                         versions: every version, also repeated ones\n" },
        { OPT_INODES, "--inodes", "  -i --inodes            Inode columns instead of space\n" },
        { OPT_COLUMNS, "--output", "  -o --output=COLUMNS    These columns, comma-separated (see below)\n" },
        { OPT_FILE, "--output", "  -o --output=FILE       Write FILE (atomically: a new file renamed over it)\n" },
        { OPT_SNAPSHOTS_OF, "--snapshots-of", "     --snapshots-of=SUBVOLUME\n"
                                              "                         And every snapshot of SUBVOLUME\n" },
        { OPT_FROM, "--from", "     --from=SNAPSHOT    The snapshot to restore from: an object path, a path\n"
                              "                         in it, or a time as versions prints it\n" },
        { OPT_TO, "--to", "     --to=DEST          Where to write (default FILE.<snapshot time>)\n" },
        { OPT_FORCE, "--force", "     --force            Replace DEST if it exists\n" },
};

typedef struct Command {
        const char *name, *alias;
        int (*run)(sd_bus *bus, int argc, char **argv);
        unsigned options;
        int min_args, max_args;  /* -1: any number */
        const char *synopsis, *description, *more;
} Command;

static const Command commands[] = {
        { "list", NULL, cmd_list, OPT_JSON | OPT_BYTES | OPT_LEGEND | OPT_SNAPSHOTS | OPT_FS | OPT_COLUMNS, 0, 0,
          "list", "One line per subvolume, by filesystem and id.",
          "FLAGS: S snapshot, R read-only.  FILESYSTEM: the label, or the UUID's first 8\n"
          "hex digits when there is none or two filesystems share it.\n"
          "Columns: fs, id, parent, flags, referenced, exclusive, inodes, rlimit, elimit,\n"
          "source, created, uuid, path (default: fs,id,flags,referenced,exclusive,inodes,path).\n" },
        { "df", NULL, cmd_df, OPT_JSON | OPT_BYTES | OPT_LEGEND | OPT_ALL | OPT_INODES | OPT_COLUMNS | OPT_HUMAN,
          0, -1, "df [PATH...]",
          "Size, used and available space (or inodes) of the subvolumes holding PATHs,\n"
          "or of those mounted somewhere (--all: of all), as df would show them if each\n"
          "subvolume were a filesystem: USED is what it references, AVAIL what can still\n"
          "be written into it, SIZE the two together.",
          "Columns: subvolume, fs, source, size, used, avail, pcent, itotal, iused, iavail,\n"
          "ipcent, target (default: subvolume,size,used,avail,pcent,target; with -i\n"
          "subvolume,itotal,iused,iavail,ipcent,target).\n" },
        { "filesystems", "fs", cmd_filesystems, OPT_JSON | OPT_BYTES | OPT_LEGEND, 0, 1, "filesystems [FILESYSTEM]",
          "Each btrfs filesystem: devices, size, use, quota mode (\",inconsistent\" while\n"
          "btrfs says its quota figures are estimates), how much of it subvold has\n"
          "measured, its subvolumes and where it is mounted.", NULL },
        { "show", NULL, cmd_show, OPT_JSON | OPT_BYTES | OPT_FS, 0, 1, "show PATH|OBJECT | show --fs FILESYSTEM",
          "Every property of one subvolume (or filesystem) as Name=value lines: \"-\" for\n"
          "unknown, \"infinity\" for no limit, dates, sizes in IEC units unless --bytes;\n"
          "lists one line per element.", NULL },
        { "monitor", NULL, cmd_monitor, OPT_JSON | OPT_BYTES, 0, 0, "monitor",
          "Print what changes, as subvold signals it, until interrupted: what was\n"
          "added or removed, and for a change each property that moved, old -> new.", NULL },
        { "metrics", NULL, cmd_metrics, OPT_FILE, 0, 0, "metrics",
          "Every figure in the Prometheus text format, for node_exporter's textfile\n"
          "collector; with --output=FILE, written atomically, also when subvold is not\n"
          "running (subvold_up 0).", NULL },
        { "free", NULL, cmd_free, OPT_JSON | OPT_BYTES | OPT_SNAPSHOTS_OF, 0, -1, "free SUBVOLUME...",
          "What deleting exactly these subvolumes (and snapshots) would free: the data\n"
          "that they refer to and no other subvolume does.  SUBVOLUME is the directory\n"
          "a subvolume is reached at; a pattern in quotes is expanded as the shell would.",
          "Data only, as subvold's scanner counts it (quotas off); unknown otherwise.\n" },
        { "versions", NULL, cmd_versions, OPT_JSON | OPT_BYTES | OPT_ALL, 1, 1, "versions FILE",
          "Earlier versions of FILE in its snapshots.", NULL },
        { "deleted", NULL, cmd_deleted, OPT_JSON | OPT_BYTES, 1, 1, "deleted DIR",
          "Files the snapshots hold that DIR no longer has.", NULL },
        { "restore", NULL, cmd_restore, OPT_FROM | OPT_TO | OPT_FORCE, 1, 1, "restore FILE --from=SNAPSHOT",
          "Write FILE's version in SNAPSHOT as a new file, by reflink where possible;\n"
          "FILE may be DIR/NAME of a deleted file.", NULL },
        { "identity", NULL, cmd_identity, OPT_JSON, 1, 2, "identity FILE [FILE2]",
          "FILE's identity keys; with FILE2 whether they are the same file (exit 0),\n"
          "copies of one file (10) or different (1).", NULL },
};

static const Command *find_command(const char *name) {
        for (size_t i = 0; name && i < ELEMENTSOF(commands); i++)
                if (streq(name, commands[i].name) || (commands[i].alias && streq(name, commands[i].alias)))
                        return &commands[i];
        return NULL;
}

static void help_options(unsigned options) {
        for (size_t i = 0; i < ELEMENTSOF(option_help); i++)
                if (options & option_help[i].bit)
                        fputs(option_help[i].help, stdout);
}

static void help_common(void) {
        printf("     --address=ADDRESS  Connect to this bus instead of the system bus\n"
               "     --no-pager         Do not pipe the output into a pager\n"
               "  -h --help             Show this help\n");
}

static void help_command(const Command *c) {
        printf("Usage: %s [OPTIONS] %s\n\n%s\n\nOptions:\n", program_invocation_short_name, c->synopsis,
               c->description);
        help_options(c->options);
        help_common();
        if (c->more)
                printf("\n%s", c->more);
}

static void help(void) {
        printf("Usage: %s [OPTIONS] COMMAND ...\n\n"
               "Shows what subvold knows of btrfs subvolumes.\n\nCommands:\n", program_invocation_short_name);
        for (size_t i = 0; i < ELEMENTSOF(commands); i++)
                printf("  %-34s %.*s\n", commands[i].synopsis,
                       (int) strcspn(commands[i].description, ".\n"), commands[i].description);
        printf("  %-34s %s\n\n"
               "Options (\"%s help COMMAND\" says which a command takes):\n",
               "help [COMMAND]", "This help, or a command's", program_invocation_short_name);
        help_options(~0u & ~(unsigned) OPT_FILE);
        help_common();
        printf("     --version          Show the version\n\n"
               "Exit status: 0 success, 1 failure, 2 bad usage, 3 subvold not reachable,\n"
               "4 not on btrfs, 5 no such subvolume or filesystem.\n");
}

/* The command word, found before getopt runs: "-h" means --human-readable
 * to df, as everyone types "df -h", and --help elsewhere. */
static const char *command_word(int argc, char **argv) {
        static const char *const with_argument[] = { "--address", "--fs", "--output", "--from", "--to", "-o",
                                                     "--snapshots-of" };

        for (int i = 1; i < argc; i++) {
                bool skip = false;

                if (streq(argv[i], "--"))
                        return i + 1 < argc ? argv[i + 1] : NULL;
                if (argv[i][0] != '-' || !argv[i][1])
                        return argv[i];
                for (size_t j = 0; j < ELEMENTSOF(with_argument); j++)
                        skip = skip || streq(argv[i], with_argument[j]);
                i += skip;
        }
        return NULL;
}

/* Like systemd's tools: long output on a terminal goes through a pager
 * ($SUBVOLCTL_PAGER, else $PAGER, else less; "" or "cat" for none). */
static pid_t pager_pid = 0;

static void pager_open(void) {
        const char *pager = getenv("SUBVOLCTL_PAGER");
        int fds[2];

        if (!pager)
                pager = getenv("PAGER");
        if (!pager)
                pager = "less";
        if (!arg_pager || !*pager || streq(pager, "cat") || !isatty(STDOUT_FILENO) || pipe2(fds, O_CLOEXEC) < 0)
                return;
        fflush(stdout);
        pager_pid = fork();
        if (pager_pid < 0) {
                pager_pid = 0;
                close(fds[0]);
                close(fds[1]);
                return;
        }
        if (pager_pid == 0) {
                /* less: quit if one screen, raw colours, no init, chop long lines. */
                (void) setenv("LESS", "FRSXMK", 0);
                if (dup2(fds[0], STDIN_FILENO) < 0)
                        _exit(EXIT_FAILURE);
                execl("/bin/sh", "sh", "-c", pager, (char *) NULL);
                _exit(EXIT_FAILURE);
        }
        if (dup2(fds[1], STDOUT_FILENO) < 0)
                pager_pid = 0;
        close(fds[0]);
        close(fds[1]);
}

static void pager_close(void) {
        if (pager_pid <= 0)
                return;
        fflush(stdout);
        close(STDOUT_FILENO);
        (void) waitpid(pager_pid, NULL, 0);
}

static int parse_json_mode(const char *mode) {
        if (!mode)
                arg_json = isatty(STDOUT_FILENO) ? JSON_PRETTY : JSON_SHORT;
        else if (streq(mode, "pretty"))
                arg_json = JSON_PRETTY;
        else if (streq(mode, "short"))
                arg_json = JSON_SHORT;
        else if (streq(mode, "off"))
                arg_json = JSON_OFF;
        else {
                fprintf(stderr, "--json takes pretty, short or off, not \"%s\".\n", mode);
                return -EINVAL;
        }
        return 0;
}

int main(int argc, char *argv[]) {
        enum { ARG_VERSION = 0x100, ARG_ADDRESS, ARG_JSON, ARG_BYTES, ARG_SNAPSHOTS, ARG_NO_SNAPSHOTS, ARG_FS,
               ARG_FROM, ARG_TO, ARG_FORCE, ARG_NO_LEGEND, ARG_NO_PAGER, ARG_HUMAN, ARG_SNAPSHOTS_OF };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "address", required_argument, NULL, ARG_ADDRESS },
                { "json", optional_argument, NULL, ARG_JSON },
                { "bytes", no_argument, NULL, ARG_BYTES },
                { "human-readable", no_argument, NULL, ARG_HUMAN },
                { "snapshots", no_argument, NULL, ARG_SNAPSHOTS },
                { "no-snapshots", no_argument, NULL, ARG_NO_SNAPSHOTS },
                { "fs", required_argument, NULL, ARG_FS },
                { "all", no_argument, NULL, 'a' },
                { "from", required_argument, NULL, ARG_FROM },
                { "to", required_argument, NULL, ARG_TO },
                { "force", no_argument, NULL, ARG_FORCE },
                { "inodes", no_argument, NULL, 'i' },
                { "output", required_argument, NULL, 'o' },
                { "no-legend", no_argument, NULL, ARG_NO_LEGEND },
                { "no-pager", no_argument, NULL, ARG_NO_PAGER },
                { "snapshots-of", required_argument, NULL, ARG_SNAPSHOTS_OF },
                {}
        };
        const char *word = command_word(argc, argv);
        const Command *command = find_command(word);
        bool df = command && streq(command->name, "df"), want_help = false;
        unsigned given = 0;
        int c, r;

        while ((c = getopt_long(argc, argv, "hijao:", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        if (df && !streq(argv[optind - 1], "--help"))
                                given |= OPT_HUMAN;
                        else
                                want_help = true;
                        break;
                case ARG_HUMAN:
                        given |= OPT_HUMAN;
                        break;
                case ARG_VERSION:
                        printf("subvolctl %s\n", PROJECT_VERSION);
                        return EXIT_OK;
                case ARG_ADDRESS:
                        arg_address = optarg;
                        break;
                case 'j':
                case ARG_JSON:
                        if (parse_json_mode(c == 'j' ? NULL : optarg) < 0)
                                return EXIT_USAGE;
                        given |= OPT_JSON;
                        break;
                case ARG_BYTES:
                        arg_bytes = true;
                        given |= OPT_BYTES;
                        break;
                case ARG_SNAPSHOTS:
                case ARG_NO_SNAPSHOTS:
                        if (arg_snapshots == (c == ARG_SNAPSHOTS ? 0 : 1)) {
                                fprintf(stderr, "--snapshots and --no-snapshots exclude each other.\n");
                                return EXIT_USAGE;
                        }
                        arg_snapshots = c == ARG_SNAPSHOTS;
                        given |= OPT_SNAPSHOTS;
                        break;
                case ARG_FS:
                        arg_fs = optarg;
                        given |= OPT_FS;
                        break;
                case 'a':
                        arg_all = true;
                        given |= OPT_ALL;
                        break;
                case ARG_FROM:
                        arg_from = optarg;
                        given |= OPT_FROM;
                        break;
                case ARG_TO:
                        arg_to = optarg;
                        given |= OPT_TO;
                        break;
                case ARG_FORCE:
                        arg_force = true;
                        given |= OPT_FORCE;
                        break;
                case 'i':
                        arg_inodes = true;
                        given |= OPT_INODES;
                        break;
                case 'o':
                        arg_output = optarg;
                        /* Columns, or metrics' file: which one is the command's. */
                        given |= command && (command->options & OPT_FILE) ? OPT_FILE : OPT_COLUMNS;
                        break;
                case ARG_NO_LEGEND:
                        arg_legend = false;
                        given |= OPT_LEGEND;
                        break;
                case ARG_SNAPSHOTS_OF:
                        arg_snapshots_of = optarg;
                        given |= OPT_SNAPSHOTS_OF;
                        break;
                case ARG_NO_PAGER:
                        arg_pager = false;
                        break;
                default:
                        return EXIT_USAGE;
                }
        if (word && streq(word, "help")) {
                /* "help" and "help COMMAND" */
                const char *about = optind + 1 < argc ? argv[optind + 1] : NULL;
                if (about && !(command = find_command(about))) {
                        fprintf(stderr, "Unknown command \"%s\"; see --help.\n", about);
                        return EXIT_USAGE;
                }
                about ? help_command(command) : help();
                return EXIT_OK;
        }
        if (want_help) {
                command ? help_command(command) : help();
                return EXIT_OK;
        }
        if (optind >= argc) {
                help();
                return EXIT_USAGE;
        }
        if (!command) {
                _cleanup_free_ char *e = term_escape(argv[optind], false);
                fprintf(stderr, "Unknown command \"%s\"; see --help.\n", e ? e : "?");
                return EXIT_USAGE;
        }
        for (size_t i = 0; i < ELEMENTSOF(option_help); i++)
                if (given & option_help[i].bit & ~command->options) {
                        fprintf(stderr, "%s does not apply to %s; see \"%s help %s\".\n", option_help[i].name,
                                command->name, program_invocation_short_name, command->name);
                        return EXIT_USAGE;
                }
        argc -= optind + 1;
        argv += optind + 1;
        if (argc < command->min_args || (command->max_args >= 0 && argc > command->max_args) ||
            (df && arg_all && argc > 0)) {
                fprintf(stderr, "Usage: %s %s%s; see \"%s help %s\".\n", program_invocation_short_name,
                        command->synopsis, df && arg_all ? " (--all takes no PATH)" : "",
                        program_invocation_short_name, command->name);
                return EXIT_USAGE;
        }
        {
                sd_bus *bus = NULL;

                r = connect_bus(&bus);
                if (r != 0)
                        return r;
                if (!streq(command->name, "monitor") && !(streq(command->name, "metrics") && arg_output))
                        pager_open();
                r = command->run(bus, argc, argv);
                sd_bus_flush_close_unref(bus);
        }
        pager_close();
        return r;
}
