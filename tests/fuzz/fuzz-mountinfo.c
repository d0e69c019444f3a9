/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mount_table_parse_mountinfo() (mounts.c: mountinfo_parse_line(),
 * mountinfo_unescape(), the root, reachability and systemd's rebinds) on
 * any text, then mount_table_resolve() of every mount point: the mount it
 * ends on lies at or above that point. */
#include "fuzz-util.h"
#include "mounts.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
        log_max_level = 0;
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_fclose_ FILE *f = NULL;
        MountTable t = {};

        if (size == 0)
                return 0;
        f = fmemopen((void *) data, size, "r");
        if (!f)
                abort();
        if (mount_table_parse_mountinfo(f, &t) < 0)
                return 0;
        for (size_t i = 0; i < t.n_mounts; i++) {
                const Mount *m = &t.mounts[i];
                const char *rest = NULL;
                const Mount *at = mount_table_resolve(&t, m->point, &rest);

                if (!at || !rest || !path_startswith(m->point, at->point))
                        abort();
                (void) mount_table_is_reachable(&t, m);
        }
        mount_table_done(&t);
        return 0;
}
