/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mapbench MNT ID SNAPSHOT_ID: what the scanner's extent map costs in
 * memory, measured on real trees.  Reads subvolume ID of the btrfs at MNT
 * with subvold's own tree reader, puts it into an extent map, then its
 * snapshot SNAPSHOT_ID (which shares every extent), and takes the heap in
 * use (mallinfo2) before and after each step:
 *   per extent     the first step less the second: the map's hash table
 *   per reference  the second step: a subvolume's packed list of extents
 * and what the map counts itself against --scan-max-memory
 * (extent_map_memory()), for the two subvolumes together.
 * Prints: extents=<n> extent_bytes=<per extent> reference_bytes=<per reference>
 *         heap_bytes=<both steps> counted_bytes=<extent_map_memory()> */
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "extent-map.h"
#include "fs-btrfs.h"
#include "util.h"

static size_t heap_in_use(void) {
        struct mallinfo2 mi = mallinfo2();
        return mi.uordblks + mi.hblkhd;  /* from the heap and mmapped */
}

static int read_tree(int fd, uint64_t id, DataExtent **ret, size_t *ret_n, uint64_t *ret_inodes) {
        int r = btrfs_scan_subvolume(fd, NULL, id, NULL, ret_inodes, ret, ret_n);
        if (r < 0)
                fprintf(stderr, "mapbench: reading subvolume %llu: %s\n", (unsigned long long) id, strerror(-r));
        return r;
}

int main(int argc, char **argv) {
        uint64_t id, snap, inodes[2];
        DataExtent *extents[2];
        size_t n[2], before, after_first, after_second;
        ExtentMap map = {};
        int fd;

        if (argc != 4 || parse_u64(argv[2], &id) < 0 || parse_u64(argv[3], &snap) < 0) {
                fprintf(stderr, "usage: %s MNT ID SNAPSHOT_ID\n", argv[0]);
                return 2;
        }
        fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                fprintf(stderr, "mapbench: open %s: %m\n", argv[1]);
                return 1;
        }
        /* Both read before anything is measured. */
        if (read_tree(fd, id, &extents[0], &n[0], &inodes[0]) < 0 ||
            read_tree(fd, snap, &extents[1], &n[1], &inodes[1]) < 0)
                return 1;
        if (n[0] == 0 || n[0] != n[1]) {
                fprintf(stderr, "mapbench: %llu has %zu extents, %llu %zu: not a snapshot of it\n",
                        (unsigned long long) id, n[0], (unsigned long long) snap, n[1]);
                return 1;
        }
        /* The scan's own arrays are freed by the map: count them out. */
        size_t scan_arrays = malloc_usable_size(extents[0]) + malloc_usable_size(extents[1]);

        before = heap_in_use() - scan_arrays;
        if (extent_map_set_user(&map, id, 1, 1, inodes[0], 0, extents[0], n[0]) < 0)
                return 1;
        after_first = heap_in_use() - malloc_usable_size(extents[1]);
        if (extent_map_set_user(&map, snap, 1, 1, inodes[1], 0, extents[1], n[1]) < 0)
                return 1;
        after_second = heap_in_use();
        if (extent_map_size(&map) != n[0]) {
                fprintf(stderr, "mapbench: the snapshot does not share every extent\n");
                return 1;
        }
        printf("extents=%zu extent_bytes=%.1f reference_bytes=%.1f heap_bytes=%zu counted_bytes=%zu\n", n[0],
               (double) (after_first - before - (after_second - after_first)) / (double) n[0],
               (double) (after_second - after_first) / (double) n[0], after_second - before,
               extent_map_memory(&map));
        extent_map_done(&map);
        close(fd);
        return 0;
}
