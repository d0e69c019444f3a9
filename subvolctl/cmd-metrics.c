/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* metrics: the Prometheus text exposition format.
 *
 * Value series carry only what identifies them (uuid, and id for a
 * subvolume), so that a rename, a label change or a quota switch does not
 * start new series; names, paths and modes are on the _info series, to be
 * joined in queries, as node_exporter does. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "subvolctl.h"

/* A label value: backslash, double quote and newline escaped.  Values
 * must be UTF-8: paths and labels are given as DisplayPath and Label. */
static void prom_label(FILE *out, const char *name, const char *value, bool comma) {
        fprintf(out, "%s=\"", name);
        for (; *value; value++) {
                if (*value == '\\' || *value == '"')
                        fprintf(out, "\\%c", *value);
                else if (*value == '\n')
                        fputs("\\n", out);
                else
                        fputc(*value, out);
        }
        fprintf(out, "\"%s", comma ? "," : "");
}

static void prom_header(FILE *out, const char *metric, const char *help) {
        fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", metric, help, metric);
}

static void sv_labels(FILE *out, const Objects *o, const Object *s) {
        const Object *f = find_fs(o, obj_str(s, SV_FILESYSTEM));
        char id[21];

        snprintf(id, sizeof id, "%" PRIu64, obj_u64(s, SV_ID));
        prom_label(out, "uuid", f ? obj_str(f, FS_UUID) : "", true);
        prom_label(out, "id", id, false);
}

static void write_metrics(FILE *out, const Objects *o) {
        static const struct { const char *metric, *help; size_t index; } fs_metrics[] = {
                { "subvold_filesystem_size_bytes", "Filesystem data capacity.", FS_SIZE },
                { "subvold_filesystem_used_bytes", "Filesystem bytes in use.", FS_USED },
                { "subvold_filesystem_free_bytes", "Filesystem free bytes.", FS_FREE },
                { "subvold_filesystem_available_bytes", "Filesystem bytes available to users.", FS_AVAILABLE },
                { "subvold_filesystem_quota_consistent", "1 unless btrfs calls its quota figures inconsistent.",
                  FS_QUOTA_CONSISTENT },
                { "subvold_filesystem_scan_progress_ratio",
                  "Share of subvolumes whose usage subvold has measured (1 with quotas on).", FS_SCAN_PROGRESS },
        };
        static const struct { const char *metric, *help; size_t index; } sv_metrics[] = {
                { "subvold_subvolume_referenced_bytes", "Bytes the subvolume refers to.", SV_REFERENCED },
                { "subvold_subvolume_exclusive_bytes", "Bytes only this subvolume refers to.", SV_EXCLUSIVE },
                { "subvold_subvolume_inodes", "Inodes in the subvolume.", SV_INODES },
                { "subvold_subvolume_referenced_limit_bytes", "Quota limit on referenced bytes.", SV_REFERENCED_LIMIT },
                { "subvold_subvolume_exclusive_limit_bytes", "Quota limit on exclusive bytes.", SV_EXCLUSIVE_LIMIT },
                { "subvold_subvolume_written_bytes", "Bytes written since the subvolume's newest snapshot.",
                  SV_WRITTEN },
                { "subvold_subvolume_snapshots_exclusive_bytes",
                  "Bytes that deleting all of the subvolume's snapshots would free.", SV_SNAPSHOTS_EXCLUSIVE },
        };

        prom_header(out, "subvold_up", "1: subvold answered this read.");
        fprintf(out, "subvold_up 1\n");
        prom_header(out, "subvold_last_success_timestamp_seconds", "When subvolctl last read subvold's figures.");
        fprintf(out, "subvold_last_success_timestamp_seconds %lld\n", (long long) time(NULL));
        prom_header(out, "subvold_filesystem_info", "One series per filesystem; 1.");
        for (size_t i = 0; i < o->n_fss; i++) {
                fprintf(out, "subvold_filesystem_info{");
                prom_label(out, "uuid", obj_str(&o->fss[i], FS_UUID), true);
                prom_label(out, "label", obj_str(&o->fss[i], FS_LABEL), true);
                prom_label(out, "quota_mode", obj_str(&o->fss[i], FS_QUOTA_MODE), false);
                fprintf(out, "} 1\n");
        }
        for (size_t k = 0; k < ELEMENTSOF(fs_metrics); k++) {
                prom_header(out, fs_metrics[k].metric, fs_metrics[k].help);
                for (size_t i = 0; i < o->n_fss; i++) {
                        const Value *v = &o->fss[i].values[fs_metrics[k].index];

                        if (!v->set)
                                continue;
                        fprintf(out, "%s{", fs_metrics[k].metric);
                        prom_label(out, "uuid", obj_str(&o->fss[i], FS_UUID), false);
                        if (fs_metrics[k].index == FS_SCAN_PROGRESS)
                                fprintf(out, "} %.6g\n", v->d);
                        else
                                fprintf(out, "} %" PRIu64 "\n", v->u);
                }
        }
        prom_header(out, "subvold_subvolume_info", "One series per subvolume; 1.");
        for (size_t i = 0; i < o->n_svs; i++) {
                const Object *s = &o->svs[i];

                fprintf(out, "subvold_subvolume_info{");
                sv_labels(out, o, s);
                fputc(',', out);
                prom_label(out, "path", obj_str(s, SV_DISPLAY_PATH), true);
                prom_label(out, "snapshot", obj_u64(s, SV_IS_SNAPSHOT) ? "true" : "false", true);
                prom_label(out, "read_only", obj_u64(s, SV_READ_ONLY) ? "true" : "false", true);
                prom_label(out, "source", obj_str(s, SV_USAGE_SOURCE), false);
                fprintf(out, "} 1\n");
        }
        /* Unknown values (and absent limits) produce no sample at all. */
        for (size_t k = 0; k < ELEMENTSOF(sv_metrics); k++) {
                prom_header(out, sv_metrics[k].metric, sv_metrics[k].help);
                for (size_t i = 0; i < o->n_svs; i++) {
                        uint64_t v = obj_u64(&o->svs[i], sv_metrics[k].index);

                        if (v == UNKNOWN)
                                continue;
                        fprintf(out, "%s{", sv_metrics[k].metric);
                        sv_labels(out, o, &o->svs[i]);
                        fprintf(out, "} %" PRIu64 "\n", v);
                }
        }
}

/* Writes @out's file through a temporary file in the same directory and
 * rename(): node_exporter never reads half a file. */
static int write_atomically(const char *path, const Objects *o, bool up) {
        _cleanup_free_ char *tmp = NULL;
        FILE *f;
        int fd, r = 0;

        if (asprintf(&tmp, "%s.XXXXXX", path) < 0)
                return -ENOMEM;
        fd = mkostemp(tmp, O_CLOEXEC);
        if (fd < 0 || !(f = fdopen(fd, "w"))) {
                r = -errno;
                if (fd >= 0)
                        close(fd);
                fprintf(stderr, "Cannot write %s: %s\n", path, strerror(-r));
                return r;
        }
        (void) fchmod(fd, 0644);
        if (up)
                write_metrics(f, o);
        else
                fprintf(f, "# HELP subvold_up 1: subvold answered this read.\n# TYPE subvold_up gauge\nsubvold_up 0\n");
        if (fflush(f) != 0 || fsync(fd) < 0)
                r = -errno;
        if (fclose(f) != 0 && r == 0)
                r = -errno;
        if (r == 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlink(tmp);
                fprintf(stderr, "Cannot write %s: %s\n", path, strerror(-r));
        }
        return r;
}

int cmd_metrics(sd_bus *bus, int argc, char **argv) {
        Objects o;
        int r;

        r = load_objects(bus, &o);
        /* subvold down: the file still says so (subvold_up 0). */
        if (arg_output && write_atomically(arg_output, &o, r >= 0) < 0)
                r = r < 0 ? r : -EXIT_FAILED;
        else if (!arg_output && r >= 0)
                write_metrics(stdout, &o);
        if (r >= 0)
                objects_done(&o);
        return r < 0 ? -r : EXIT_OK;
}
