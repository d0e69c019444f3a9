/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mount_from_statmount() (mounts.c) on any statmount() answer: the input
 * is one or more answers, each a little-endian u16 length and that many
 * bytes, each in a buffer of exactly its size so that ASan sees any read
 * past it. */
#include "fuzz-util.h"
#include "kernel-compat.h"
#include "mounts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        FuzzInput in = { data, size };

        while (in.left > 0) {
                size_t n = (size_t) fuzz_take(&in, 2);
                _cleanup_free_ struct statmount_compat *sm = NULL;
                Mount m;

                if (n > in.left)
                        n = in.left;
                sm = malloc(n ?: 1);
                if (!sm)
                        abort();
                memcpy(sm, in.p, n);
                in.p += n, in.left -= n;
                if (mount_from_statmount(sm, n, &m) < 0)
                        continue;
                if (!m.fstype || !m.source || !m.root || !m.point)
                        abort();
                mount_done(&m);
        }
        return 0;
}
