/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * versionsbench - ListFileVersions against what a path-based tool pays.
 *
 * usage: versionsbench FILE SNAPDIR RELPATH RUNS
 *
 * Times, RUNS times each, (a) a loop that stat()s RELPATH in every
 * snapshot under SNAPDIR (each entry of SNAPDIR a snapshot's root), which
 * is what httm and the like do, without inode matching or permission
 * checks, and (b) one ListFileVersions call for FILE over sd-bus.  Prints
 * "stat_ms=M list_ms=M versions=N snapshots=N" with the medians.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
        qsort(v, n, sizeof(double), cmp_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char *argv[]) {
        sd_bus *bus = NULL;
        int runs, n_snaps = 0, n_versions = 0, fd;
        double *stat_ms, *list_ms;
        char **snaps = NULL;
        struct dirent *de;
        DIR *d;

        if (argc != 5 || (runs = atoi(argv[4])) <= 0) {
                fprintf(stderr, "usage: %s FILE SNAPDIR RELPATH RUNS\n", argv[0]);
                return 2;
        }
        d = opendir(argv[2]);
        if (!d)
                return perror("opendir"), 1;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.') {
                        snaps = realloc(snaps, (n_snaps + 1) * sizeof(char *));
                        if (asprintf(&snaps[n_snaps++], "%s/%s/%s", argv[2], de->d_name, argv[3]) < 0)
                                return 1;
                }
        closedir(d);
        stat_ms = calloc(runs, sizeof(double));
        list_ms = calloc(runs, sizeof(double));
        fd = open(argv[1], O_RDONLY | O_CLOEXEC);
        if (fd < 0 || sd_bus_open_system(&bus) < 0)
                return perror("open"), 1;
        for (int run = 0; run < runs; run++) {
                sd_bus_message *reply = NULL;
                sd_bus_error error = SD_BUS_ERROR_NULL;
                struct stat st;
                double t = now_ms();

                for (int i = 0; i < n_snaps; i++)
                        (void) stat(snaps[i], &st);
                stat_ms[run] = now_ms() - t;

                t = now_ms();
                if (sd_bus_call_method(bus, "org.subvold.Subvold1", "/org/subvold/Subvold1",
                                       "org.subvold.Subvold1.Files", "ListFileVersions", &error, &reply, "ha{sv}", fd,
                                       0) < 0) {
                        fprintf(stderr, "ListFileVersions: %s\n", error.message);
                        return 1;
                }
                list_ms[run] = now_ms() - t;
                if (sd_bus_message_enter_container(reply, 'a', "a{sv}") >= 0)
                        for (n_versions = 0; sd_bus_message_skip(reply, "a{sv}") > 0; n_versions++)
                                ;
                sd_bus_message_unref(reply);
        }
        printf("stat_ms=%.2f list_ms=%.2f versions=%d snapshots=%d\n", median(stat_ms, runs), median(list_ms, runs),
               n_versions, n_snaps);
        return 0;
}
