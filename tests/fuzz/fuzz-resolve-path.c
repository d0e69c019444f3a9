/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* path_normalize() and model_resolve_path() (model.c, mounts.c) against a
 * fake mount table.  The input is three parts split by NUL bytes: a
 * mountinfo text (read by the daemon's parser), one filesystem's
 * subvolume paths (one a line), and the paths to resolve (one a line).
 * Every btrfs mount belongs to that one filesystem; model_finish() works
 * out mount points and access paths.  Checks: normalizing gives an
 * absolute path without empty, "." or ".." components, and normalizing
 * again changes nothing; a resolved subvolume's path lies at or above the
 * path asked, as seen inside the filesystem. */
#include "fuzz-util.h"
#include "model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        log_max_level = 0;
        return 0;
}

/* The next part of the input, up to a NUL or the end, as a string. */
static char *next_part(FuzzInput *in) {
        const uint8_t *nul = memchr(in->p, 0, in->left);
        size_t n = nul ? (size_t) (nul - in->p) : in->left;
        char *s = fuzz_string(in->p, n);

        in->p += n + !!nul, in->left -= n + !!nul;
        return s;
}

static void check_normalized(const char *path) {
        _cleanup_free_ char *norm = path_normalize(path), *again = NULL;

        if (!norm)
                return;
        if (norm[0] != '/' || strstr(norm, "//") || strstr(norm, "/./") || strstr(norm, "/../") ||
            (strlen(norm) > 1 && norm[strlen(norm) - 1] == '/'))
                abort();
        if (streq(norm, "/.") || streq(norm, "/..") || (strlen(norm) >= 2 && streq(norm + strlen(norm) - 2, "/.")) ||
            (strlen(norm) >= 3 && streq(norm + strlen(norm) - 3, "/..")))
                abort();
        again = path_normalize(norm);
        if (!again || !streq(again, norm))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const uint8_t uuid[16] = { 1 };
        _cleanup_free_ char *mountinfo = NULL, *paths = NULL, *queries = NULL;
        _cleanup_(model_freep) Model *m = model_new();
        _cleanup_(filesystem_freep) Filesystem *owned = filesystem_new(uuid);
        FuzzInput in = { data, size };
        _cleanup_fclose_ FILE *f = NULL;
        MountTable t = {};
        Filesystem *fs;
        char *save = NULL;
        uint64_t id = 256;

        if (!m || !owned)
                abort();
        mountinfo = next_part(&in);
        paths = next_part(&in);
        queries = next_part(&in);

        f = fmemopen(mountinfo, strlen(mountinfo) + 1, "r");
        if (!f)
                abort();
        if (mount_table_parse_mountinfo(f, &t) < 0)
                return 0;
        if (model_set_mounts(m, &t) < 0)
                abort();

        Subvolume top = { .id = 5, .path = strdup("/"), .usage = USAGE_NONE };
        if (!top.path || !filesystem_add_subvolume(owned, &top))
                abort();
        for (char *p = strtok_r(paths, "\n", &save); p; p = strtok_r(NULL, "\n", &save)) {
                Subvolume sv = { .id = id++, .parent_id = 5, .path = strdup(p), .usage = USAGE_NONE };

                if (!sv.path || !filesystem_add_subvolume(owned, &sv))
                        abort();
        }
        if (filesystem_index(owned) < 0)
                abort();
        fs = TAKE_PTR(owned);
        if (model_add_filesystem(m, fs) < 0)
                abort();
        for (size_t i = 0; i < m->mounts.n_mounts; i++)
                if (m->mounts.mounts[i].is_btrfs)
                        model_attach_mount(m, i, fs);
        if (model_finish(m) < 0)
                abort();

        for (char *q = strtok_r(queries, "\n", &save); q; q = strtok_r(NULL, "\n", &save)) {
                _cleanup_free_ char *norm = NULL;
                Subvolume *sv = NULL;

                check_normalized(q);
                if (model_resolve_path(m, q, &sv) != RESOLVE_OK)
                        continue;
                norm = path_normalize(q);
                if (!norm || sv->filesystem != fs)
                        abort();
                const char *rest;
                const Mount *mount = mount_table_resolve(&m->mounts, norm, &rest);
                _cleanup_free_ char *inside = *rest ? path_join(mount->root, rest) : strdup(mount->root);
                if (!inside || !path_startswith(inside, sv->path))
                        abort();
        }
        return 0;
}
