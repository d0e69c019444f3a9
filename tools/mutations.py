#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Breaks subvold on purpose, one promise at a time, and says which tests
notice.

usage: tools/mutations.py [--list] [NAME...]

Each mutation is the smallest change to the code that breaks one promise
the README makes.  For each (or each NAME given), a scratch clone of this
checkout's HEAD is changed, built, and the tests that hold the promise are
run; a mutation whose tests all pass is MISSED, and the run exits 1.
tests/README.md lists the same table.  Needs root, like the suite; not run
by CI (it takes a while: one build and a few tests per mutation).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (file, text to find (exactly once), replacement, tests that must
# fail[, "sanitize": run them on an ASan+UBSan build with leak checking])
MUTATIONS = {
    "exclusive-of-counts-shared-extents": (
        "daemon/extent-map.c",
        "if (s->mark == s->users)",
        "if (s->mark > 0)",
        ["test-extent-map", "test_space"]),
    "written-since-ignores-the-snapshot": (
        "daemon/extent-map.c",
        "if (!more_b || y.bytenr != x.bytenr)",
        "if (true)",
        ["test-extent-map", "test_space"]),
    "newest-snapshot-is-the-oldest": (
        "daemon/scanner.c",
        "snapshot->creation_generation > newest->creation_generation",
        "snapshot->creation_generation < newest->creation_generation",
        ["test_space"]),
    "logical-bytes-are-disk-bytes": (
        "daemon/fs-btrfs.c",
        ".ram_bytes = le64toh(fe.ram_bytes) }",
        ".ram_bytes = le64toh(fe.disk_num_bytes) }",
        ["test_space"]),
    "set-member-twice-accepted": (
        "daemon/bus-objects.c",
        "if (ids[i] == ids[i - 1])",
        "if (false)",
        ["test_space"]),
    "set-member-of-another-filesystem-accepted": (
        "daemon/bus-objects.c",
        "                if (other != fs)\n",
        "                if (false)\n",
        ["test_space"]),
    "exclusive-bytes-in-one-go": (
        "daemon/bus-space.c",
        "extent_query_step(map, &c->query, b->step_extents, &bytes)",
        "extent_query_step(map, &c->query, SIZE_MAX, &bytes)",
        ["test_space"]),
    "exclusive-bytes-unlimited-per-sender": (
        "daemon/bus-space.c",
        " || from_sender >= BUS_SPACE_MAX_PENDING_PER_SENDER",
        "",
        ["test_space"]),
    "query-survives-a-map-change": (
        "daemon/extent-map.c",
        "        query_evict(m);  /* before anything moves */\n",
        "",
        ["test-extent-map"]),
    "family-sum-without-squares": (
        "daemon/extent-map.c",
        "return f != 0 && s->family_squares == f * f * s->users ? (uint32_t) f : 0;",
        "return f != 0 ? (uint32_t) f : 0;",
        ["test-extent-map"]),
    "refamily-moves-no-bytes": (
        "daemon/extent-map.c",
        "                s->family_squares += (uint64_t) to * to - from * from;\n                family_move(m, s, before, slot_family(s));",
        "                s->family_squares += (uint64_t) to * to - from * from;\n                (void) before;",
        ["test-extent-map", "test_space"]),
    "written-kept-when-a-list-changed": (
        "daemon/scanner.c",
        "family && family->written_newest == newest->id && family->written_version == u->list_version &&\n"
        "                         family->written_newest_version == newest_user->list_version)",
        "family && family->written_newest == newest->id)",
        ["test_space"]),
    "set-limit-off-by-one": (
        "daemon/bus-objects.c",
        "if (n == GET_EXCLUSIVE_BYTES_MAX)",
        "if (n == GET_EXCLUSIVE_BYTES_MAX + 1)",
        ["test_space"]),
    "snapshot-figures-emit-no-signal": (
        "daemon/model.c",
        "f->written_bytes == sv->written_bytes &&\n               f->snapshots_exclusive_bytes == sv->snapshots_exclusive_bytes &&\n               ",
        "",
        ["test_space"]),
    "size-bound-undercounts-display-path": (
        "daemon/bus-objects.c",
        "string_bound(sv->path, 4) +",
        "string_bound(sv->path, 1) +",
        ["test_scale"]),
    "access-paths-unchanged-whatever-the-mounts": (
        "daemon/bus-objects.c",
        "bool mounts_unchanged = old && new && filesystem_access_unchanged(old, new);",
        "bool mounts_unchanged = true;",
        ["test_live"]),
    "access-unchanged-ignores-the-mount-table": (
        "daemon/model.c",
        "               mount_table_equal(a->mount_table, b->mount_table);",
        "               true;",
        ["test-model"]),
    "access-unchanged-ignores-a-mount-less": (
        "daemon/model.c",
        "return a->n_mount_indexes == b->n_mount_indexes &&",
        "return true &&",
        ["test-model"]),
    "figures-alone-signal-nothing": (
        "daemon/bus-objects.c",
        "                        if (!subvolume_figures_equal(&before->filesystems[i].subvolumes[j], &fs->subvolumes[j]))",
        "                        if (false)",
        ["test_live"]),
    "figures-alone-signal-everything": (
        "daemon/bus-objects.c",
        "                        if (!subvolume_figures_equal(&before->filesystems[i].subvolumes[j], &fs->subvolumes[j]))",
        "                        if (true)",
        ["test_live"]),
    "root-tree-skips-back-references": (
        "daemon/fs-btrfs.c",
        "} else if (h->type == BTRFS_ROOT_REF_KEY) {",
        "} else if (h->type >= BTRFS_ROOT_BACKREF_KEY) {",
        ["test_enumeration"]),
    "get-managed-objects-never-refuses": (
        "daemon/bus-objects.c",
        "        if (size > max_message_size)\n                return sd_bus_error_setf(error, SD_BUS_ERROR_LIMITS_EXCEEDED,",
        "        if (false)\n                return sd_bus_error_setf(error, SD_BUS_ERROR_LIMITS_EXCEEDED,",
        ["test_scale"]),
    "pages-never-shortened": (
        "daemon/bus-objects.c",
        "if (count == max_count || (count > 0 && size + subvolume_bound(sv) > max_message_size))",
        "if (count == max_count)",
        ["test_scale"]),
    "subvolctl-skips-the-last-page": (
        "subvolctl/objects.c",
        "        } while (next != 0);\n        return 0;",
        "        } while (next != 0 && false);\n        return 0;",
        ["test_clients", "test_scale"]),
    "scan-array-not-bounded": (
        "daemon/fs-btrfs.c",
        "if (c && c->may_grow && !c->may_grow(n * sizeof(DataExtent), c->userdata) && n > scan->allocated)",
        "if (false)",
        ["test_scan"]),
    "scanner-keeps-unmounted-filesystems": (
        "daemon/manager.c",
        "        if (mounts && m->scanner)\n                scanner_mounts_changed",
        "        if (false)\n                scanner_mounts_changed",
        ["test_scan"]),
    "statfs-is-the-filesystems": (
        "daemon/model.c",
        "st.blocks = used + st.blocks_free;",
        "st.blocks = fs->blocks;",
        ["test_df"]),
    "statfs-free-not-narrowed": (
        "daemon/model.c",
        "st.blocks_free = min_u64(fs->blocks_free, room / bs);",
        "st.blocks_free = fs->blocks_free;",
        ["test_df"]),
    "df-unknown-usage-shown": (
        "subvolctl/cmd-space.c",
        'bool known = d->source && !streq(d->source, "none");',
        "bool known = true;",
        ["test_df"]),
    "df-lists-unmounted": (
        "subvolctl/cmd-space.c",
        "calls[i].wanted = arg_all || mount_point_of(&o, &o.svs[i]);",
        "calls[i].wanted = true;",
        ["test_df"]),
    "df-mounted-on-any-path": (
        "subvolctl/cmd-space.c",
        "const char *target = mounted ?: access && access[0] ? access[0] : NULL;",
        "const char *target = access && access[0] ? access[0] : NULL;",
        ["test_df"]),
    "df-unknown-inodes-zero": (
        "subvolctl/cmd-space.c",
        ".itotal = d->files ? d->files : UNKNOWN,",
        ".itotal = d->files,",
        ["test_df"]),
    "scanner-trusts-a-reused-mount-id": (
        "daemon/scanner.c",
        "if (r >= 0 && memcmp(fsid, job->uuid, 16) != 0) {",
        "if (false) {",
        ["test_scan_mount_ids"]),
    "versions-opened-as-root": (
        "daemon/as-caller.c",
        "        if (!set_fsgid(caller->gid) || syscall(SYS_setgroups, caller->n_groups, caller->groups) < 0 ||\n"
        "            !set_fsuid(caller->uid)) {",
        "        if (false) {",
        ["test_files"]),
    "versions-not-collapsed": (
        "daemon/versions.c",
        "if (r >= 0 && !all && n > 0 && same_version(&last, &f.inode))",
        "if (r >= 0 && false && n > 0 && same_version(&last, &f.inode))",
        ["test_files"]),
    "version-mounts-writable": (
        "daemon/versions.c",
        "                .attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID",
        "                .attr_set = MOUNT_ATTR_NOSUID",
        ["test_files"]),
    "o-path-fds-accepted": (
        "daemon/bus-files.c",
        "if (flags < 0 || (flags & O_PATH) || (flags & O_ACCMODE) == O_WRONLY)",
        "if (flags < 0 || (flags & O_ACCMODE) == O_WRONLY)",
        ["test_files"]),
    "path-match-takes-any-type": (
        "daemon/versions.c",
        "        if (e.type != (dir ? BTRFS_FT_DIR : BTRFS_FT_REG_FILE))\n                return -ENOENT;",
        "",
        ["test_files"]),
    "restore-overwrites": (
        "subvolctl/cmd-files.c",
        "O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC",
        "O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC",
        ["test_files"]),
    "listmount-never-called": (
        "daemon/mounts.c",
        "        r = mount_table_read_listmount(ret);",
        "        r = -ENOSYS;",
        ["test_enumeration", "test-mounts"]),
    "mountinfo-reader-leaks-its-file": (
        "daemon/mounts.c",
        '_cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");',
        'FILE *f = fopen("/proc/self/mountinfo", "re");',
        ["test_enumeration"]),
    "refresh-does-nothing": (
        "daemon/bus-manager.c",
        "        r = manager_refresh(m);\n        if (r < 0)\n                return sd_bus_error_setf",
        "        r = 0;\n        if (r < 0)\n                return sd_bus_error_setf",
        ["test_errors"]),
    "nautilus-size-is-exclusive": (
        "nautilus/subvold-nautilus.c",
        'size = root ? usage_string(s, "ReferencedBytes")',
        'size = root ? usage_string(s, "ExclusiveBytes")',
        ["test_nautilus"]),
    "nautilus-unknown-usage-is-zero": (
        "nautilus/subvold-nautilus.c",
        'g_str_equal(source, "none"))\n                return g_strdup("");',
        'g_str_equal(source, "none"))\n                return g_format_size(0);',
        ["test_nautilus"]),
    "nautilus-lookup-per-file": (
        "nautilus/subvold-nautilus.c",
        "        g_hash_table_insert(self->by_dev, g_memdup2(&call->dev, sizeof call->dev), g_strdup(path));\n",
        "",
        ["test_nautilus"]),
    "nautilus-changes-not-followed": (
        "nautilus/subvold-nautilus.c",
        '                g_signal_connect(proxy, "g-properties-changed", G_CALLBACK(subvolume_changed), s->self);\n',
        "",
        ["test_nautilus"]),
    "nautilus-df-used-is-free": (
        "nautilus/subvold-nautilus.c",
        "used = g_format_size((blocks - MIN(bfree, blocks)) * bsize);",
        "used = g_format_size(bfree * bsize);",
        ["test_nautilus"]),
    "versions-copy-writable": (
        "nautilus/subvold-versions.c",
        "write_copy(fd, dest, 0444, &reflink, &error)",
        "write_copy(fd, dest, 0644, &reflink, &error)",
        ["test_nautilus_gui"]),
    "versions-all-marked-current": (
        "nautilus/subvold-versions.c",
        'current ? "current" : ""',
        '"current"',
        ["test_nautilus_gui"]),
    "nautilus-snapshot-column-empty": (
        "nautilus/subvold-nautilus.c",
        '        if (!prop_bool(s, "IsSnapshot"))\n                return g_strdup("");',
        '        if (TRUE)\n                return g_strdup("");',
        ["test_nautilus_gui"]),
    "a-test-method-skips": (
        "tests/integration/test_clients.py",
        "    def test_list(self):\n",
        "    def test_list(self):\n        self.skipTest(\"skipped on purpose\")\n",
        ["test_clients"]),
    "policy-statfs-closed": (
        "dbus/org.subvold.Subvold1.conf",
        '''           send_interface="org.subvold.Subvold1.Subvolume"
           send_member="GetStatfs"/>''',
        '''           send_interface="org.subvold.Subvold1.Subvolume"
           send_member="GetStatfsNot"/>''',
        ["test_access"]),
    "xml-refresh-for-everyone": (
        "dbus/org.subvold.Subvold1.xml",
        '''<method name="Refresh">
      <annotation name="org.subvold.Subvold1.CallableBy" value="root"/>''',
        '''<method name="Refresh">
      <annotation name="org.subvold.Subvold1.CallableBy" value="everyone"/>''',
        ["test_access"]),
    "noncharacters-unescaped": (
        "daemon/model.c",
        " || (c >= 0xfdd0 && c <= 0xfdef) || (c & 0xfffe) == 0xfffe)",
        ")",
        ["test_hostile"]),
    "label-unescaped": (
        "daemon/bus-objects.c",
        "s = display_escape(fs->label);",
        "s = strdup(fs->label);",
        ["test_hostile"]),
    "fd-matched-by-fold": (
        "daemon/bus-manager.c",
        "fs = model_find_filesystem(model, id.fsid);",
        "fs = NULL;\n        for (size_t k = 0; !fs && k < model->n_filesystems; k++) {\n"
        "                const uint8_t *u = model->filesystems[k]->uuid;\n"
        "                bool same = true;\n"
        "                for (size_t b = 0; b < 8; b++)\n"
        "                        same = same && (u[b] ^ u[b + 8]) == (id.fsid[b] ^ id.fsid[b + 8]);\n"
        "                if (same)\n"
        "                        fs = model->filesystems[k];\n"
        "        }",
        ["test_hostile"]),
    "one-deep-subvolume-fails-all": (
        "daemon/fs-btrfs.c",
        "                if (t.links[i].failed && skipped++ == 0)",
        "                if (t.links[i].failed)\n                        return -ENAMETOOLONG;\n                if (t.links[i].failed && skipped++ == 0)",
        ["test_hostile"]),
    "path-max-not-checked": (
        "daemon/bus-manager.c",
        "if (strlen(path) >= PATH_MAX)",
        "if (strlen(path) >= SIZE_MAX)",
        ["test_hostile"]),
    "fds-closed-in-the-loop": (
        "daemon/manager.c",
        "r = bus_fds_new(m->bus, m->event, &m->bus_fds);",
        "r = 0;",
        ["test_hostile"]),
    "cache-world-readable": (
        "daemon/cache-file.c",
        "if (fchmod(fd, 0600) < 0",
        "if (fchmod(fd, 0644) < 0",
        ["test_usage"]),
    "refresh-spacing-zero": (
        "daemon/manager.h",
        "#define REFRESH_INTERVAL_USEC (1000 * 1000ULL)",
        "#define REFRESH_INTERVAL_USEC (0ULL)",
        ["test_live"]),
    "refresh-burst-of-three": (
        "daemon/manager.h",
        "#define REFRESH_BURST 2",
        "#define REFRESH_BURST 3",
        ["test_live"]),
    "new-usage-takes-the-burst": (
        "daemon/manager.c",
        "refresh_allowed(m, burst));",
        "refresh_allowed(m, REFRESH_BURST));",
        ["test_live"]),
    "properties-changed-twice": (
        "daemon/bus-objects.c",
        "        int r = sd_bus_emit_properties_changed_strv(bus, path, interface, NULL);\n",
        "        int r = sd_bus_emit_properties_changed_strv(bus, path, interface, NULL);\n        r = sd_bus_emit_properties_changed_strv(bus, path, interface, NULL);\n",
        ["test_live"]),
    "quiet-while-the-transaction-is-open": (
        "daemon/watch.c",
        "if (p && closed) {",
        "if (p) {",
        ["test_live"]),
    "quiet-with-quotas-on": (
        "daemon/fs-btrfs.c",
        "*ret = !c.quotas && c.newest >= generation;",
        "*ret = c.newest >= generation;",
        ["test_live"]),
    "quiet-filesystem-read-all-the-same": (
        "daemon/watch.c",
        "p->quiet_fingerprint == fs->root_fingerprint)\n                        return false;",
        "p->quiet_fingerprint == fs->root_fingerprint)\n                        ;",
        ["test_live"]),
    "generation-timer-without-btrfs": (
        "daemon/watch.c",
        "bool want = *w->model && (*w->model)->n_filesystems > 0;",
        "bool want = true;",
        ["test_live"]),
    "scanner-thread-wakes-every-second": (
        "daemon/scanner.c",
        "                        pthread_cond_wait(&s->more, &s->lock);\n",
        "                        { struct timespec t; clock_gettime(CLOCK_REALTIME, &t); t.tv_sec++; pthread_cond_timedwait(&s->more, &s->lock, &t); }\n",
        ["test_live"]),
    "timer-not-armed-for-a-new-btrfs": (
        "daemon/manager.c",
        "        if (m->watch)\n                watch_update(m->watch);",
        "        if (false)\n                watch_update(m->watch);",
        ["test_live"]),
    "fd-leaked-per-refresh": (
        "daemon/manager.c",
        "        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->last_refresh);\n",
        "        (void) sd_event_now(m->event, CLOCK_MONOTONIC, &m->last_refresh);\n        (void) dup(STDERR_FILENO);\n",
        ["test_live"]),
    "signals-carry-stale-values": (
        "daemon/manager.c",
        "                bus_objects_emit_changes(m->bus, old, new);",
        "                { m->model = old; bus_objects_emit_changes(m->bus, old, new); m->model = new; }",
        ["test_clients", "test_live"]),
    "usage-cache-swaps-figures": (
        "daemon/usage-cache.c",
        "u->referenced = cache_get_u64(b);\n                        u->exclusive = cache_get_u64(b);",
        "u->exclusive = cache_get_u64(b);\n                        u->referenced = cache_get_u64(b);",
        ["test_live", "test_faults"]),
    "cache-leftovers-kept": (
        "daemon/cache-file.c",
        "        remove_leftovers(dir, name);\n",
        "",
        ["test_faults"]),
    "statmount-buffer-unbounded": (
        "daemon/mounts.c",
        "                if (*size >= STATMOUNT_SIZE_MAX)",
        "                if (false)",
        ["test_faults"]),
    "bus-disconnect-silent": (
        "daemon/manager.c",
        '                log_info("Disconnected from the bus, exiting.");',
        "",
        ["test_faults"]),
    "replaced-mount-warned": (
        "daemon/discover.c",
        "(error) == -ESTALE || failed_before",
        "failed_before",
        ["test_faults"]),
    "changed-tree-figures-consistent": (
        "daemon/scanner.c",
        ".source = USAGE_SOURCE_SCAN, .consistent = current,",
        ".source = USAGE_SOURCE_SCAN, .consistent = true,",
        ["test_scan"]),
    "scan-io-error-not-warned": (
        "daemon/scanner.c",
        "res->error == -ENOENT ? LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING",
        "LOG_LEVEL_DEBUG",
        ["test_faults"]),
    "start-fails-on-the-mount-table": (
        "daemon/manager.c",
        '                log_warning_errno(r, "Starting with no filesystems, reading the mounts again shortly: %m");',
        "                return r;",
        ["test_faults"]),
    "failed-refresh-not-retried": (
        "daemon/manager.c",
        "                manager_schedule_refresh(m, REFRESH_INTERVAL_USEC);\n                return r;",
        "                return r;",
        ["test_faults"]),
    "failed-trees-never-retried": (
        "daemon/scanner.c",
        "        scanner_arm_retry(s, now);\n",
        "",
        ["test_faults"]),
    "unreadable-filesystem-not-retried": (
        "daemon/discover.c",
        "LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING, (error), __VA_ARGS__), DISCOVER_FAILED)",
        "LOG_LEVEL_DEBUG : LOG_LEVEL_WARNING, (error), __VA_ARGS__), 0)",
        ["test_faults"]),
    "unreadable-filesystem-warned-every-second": (
        "daemon/discover.c",
        "(log_errno_internal((error) == -ESTALE || failed_before(previous, (mount)->id) ?",
        "(log_errno_internal((error) == -ESTALE ?",
        ["test_faults"]),
    "clock-set-back-means-recent": (
        "daemon/discover.c",
        "        if (prev && prev->usage_read_usec > 0 && now_usec - prev->usage_read_usec < USAGE_READ_INTERVAL_USEC) {",
        "        if (prev && prev->usage_read_usec > 0 && (now_usec < prev->usage_read_usec ||\n"
        "                                                  now_usec - prev->usage_read_usec < USAGE_READ_INTERVAL_USEC)) {",
        ["test_faults"]),
    "refresh-timer-on-the-wall-clock": (
        "daemon/manager.c",
        "&m->refresh_timer, CLOCK_MONOTONIC, when,",
        "&m->refresh_timer, CLOCK_REALTIME, when,",
        ["test_faults"]),
    "referenced-limit-is-exclusive": (
        "daemon/bus-objects.c",
        '''SD_BUS_PROPERTY("ReferencedLimitBytes", "t", NULL, offsetof(Subvolume, usage.referenced_limit)''',
        '''SD_BUS_PROPERTY("ReferencedLimitBytes", "t", NULL, offsetof(Subvolume, usage.exclusive_limit)''',
        ["test_clients"]),
    "sizes-rounded-down": (
        "subvolctl/output.c",
        "ceil(d * 10) / 10 : ceil(d)",
        "floor(d * 10) / 10 : floor(d)",
        ["test_clients"]),
    "df-rows-twice": (
        "subvolctl/cmd-space.c",
        "                if (calls[i].ok && df_add(&o, &o.svs[i], &calls[i].df, table, columns, n_columns) < 0)\n",
        "                if (calls[i].ok && (df_add(&o, &o.svs[i], &calls[i].df, table, columns, n_columns) < 0 ||\n"
        "                                    df_add(&o, &o.svs[i], &calls[i].df, table, columns, n_columns) < 0))\n",
        ["test_clients"]),
    "last-subvolume-unpublished": (
        "daemon/fs-btrfs.c",
        "                if (!fs->subvolumes[i].path) {",
        "                if (!fs->subvolumes[i].path || i + 1 == fs->n_subvolumes) {",
        ["test_daemon"]),
    "generation-check-keeps-its-fd": (
        "daemon/watch.c",
        "        _cleanup_close_ int fd = -1;\n",
        "        int fd = -1;\n",
        ["test_daemon"]),
    "terminal-escape-misses-c1": (
        "daemon/model.c",
        "bool c1 = c1_controls && len == 2 && p[0] == 0xc2 && p[1] < 0xa0;",
        "bool c1 = false;",
        ["test_subvolctl"]),
    "show-prints-paths-raw": (
        "subvolctl/schema.c",
        "                                _cleanup_free_ char *e = term_escape(*l, false);\n                                printf(\"%s=%s\\n\", p->dbus, e ? e : \"?\");",
        "                                char *e = *l;\n                                printf(\"%s=%s\\n\", p->dbus, e ? e : \"?\");",
        ["test_subvolctl"]),
    "json-paths-lossy": (
        "subvolctl/output.c",
        "        if (!*p) {\n                json_string(s);",
        "        if (true) {\n                json_string(s);",
        ["test_subvolctl"]),
    "options-not-refused": (
        "subvolctl/main.c",
        "if (given & option_help[i].bit & ~command->options) {",
        "if (given & option_help[i].bit & ~command->options & 0) {",
        ["test_subvolctl"]),
    "df-h-is-help": (
        "subvolctl/main.c",
        'if (df && !streq(argv[optind - 1], "--help"))',
        "if (false)",
        ["test_subvolctl"]),
    "monitor-prints-every-property": (
        "subvolctl/cmd-monitor.c",
        "differs[i] = changed[i] && (!known || !value_equal(",
        "differs[i] = changed[i] || (!known || !value_equal(",
        ["test_subvolctl"]),
    "metrics-path-on-values": (
        "subvolctl/cmd-metrics.c",
        '        prom_label(out, "id", id, false);\n}',
        '        prom_label(out, "id", id, true);\n        prom_label(out, "path", obj_str(s, SV_DISPLAY_PATH), false);\n}',
        ["test_subvolctl"]),
    "metrics-file-written-in-place": (
        "subvolctl/cmd-metrics.c",
        "        fd = mkostemp(tmp, O_CLOEXEC);",
        "        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), strcpy(tmp, path);",
        ["test_subvolctl"]),
    "log-prefix-on-a-terminal": (
        "daemon/util.c",
        "prefix = !isatty(STDERR_FILENO);",
        "prefix = 1;",
        ["test_subvolctl"]),
    "introspect-lists-grandchildren": (
        "daemon/bus-objects.c",
        "        if (!model)\n                return 0;\n        if (streq(prefix, SUBVOLD_FS_PREFIX)) {",
        "        if (!model || true)\n                return 0;\n        if (streq(prefix, SUBVOLD_FS_PREFIX)) {",
        ["test_subvolctl"]),
    "path-bytes-keeps-a-nul": (
        "daemon/bus-manager.c",
        "        if (memchr(p, 0, n))",
        "        if (false)",
        ["test_subvolctl"]),
    "free-counts-a-subvolume-twice": (
        "subvolctl/cmd-free.c",
        "                if (c->svs[i] == s)\n                        return 0;",
        "                if (false)\n                        return 0;",
        ["test_subvolctl"]),
    "free-takes-any-path": (
        "subvolctl/cmd-free.c",
        "st.st_ino != SUBVOLUME_ROOT_INODE",
        "false",
        ["test_subvolctl"]),
    "list-written-is-referenced": (
        "subvolctl/cmd-space.c",
        "case LIST_WRITTEN: return value_to_text(&s->values[SV_WRITTEN], KIND_SIZE);",
        "case LIST_WRITTEN: return value_to_text(&s->values[SV_REFERENCED], KIND_SIZE);",
        ["test_subvolctl"]),
    "name-copied-as-c-string": (
        "daemon/fs-btrfs.c",
        "link->name = memdup_suffix0((const char *) data + sizeof ref, len);",
        "link->name = strndup((const char *) data + sizeof ref, len);",
        ["test-fs-btrfs"], "sanitize"),
    "snapshots-of-snapshots-listed": (
        "daemon/bus-objects.c",
        "return !source || sv->snapshot_source == source;",
        "return !source || sv->snapshot_source == source ||\n"
        "               (sv->snapshot_source && sv->snapshot_source->snapshot_source == source);",
        ["test_enumeration"]),
    "snapshot-page-one-too-many": (
        "daemon/bus-objects.c",
        "if (count == max_count || (count > 0 && size + subvolume_bound(sv) > max_message_size))",
        "if (count == max_count + 1 || (count > 0 && size + subvolume_bound(sv) > max_message_size))",
        ["test_enumeration"]),
    "dir-cache-keyed-on-the-directory-alone": (
        "daemon/fs-btrfs.c",
        "DirPath *slot = &t->dir_cache[(tree * 31 + dir) % DIR_CACHE_SLOTS];\n\n"
        "        if (dir == BTRFS_FIRST_FREE_OBJECTID) {\n"
        "                *ret = \"\";\n"
        "                return 0;\n"
        "        }\n"
        "        if (!slot->path || slot->tree != tree || slot->dir != dir) {",
        "DirPath *slot = &t->dir_cache[dir % DIR_CACHE_SLOTS];\n\n"
        "        if (dir == BTRFS_FIRST_FREE_OBJECTID) {\n"
        "                *ret = \"\";\n"
        "                return 0;\n"
        "        }\n"
        "        if (!slot->path || slot->dir != dir) {",
        ["test_enumeration"]),
}


def sh(*args, **kw):
    return subprocess.run(list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


SANITIZER_ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1",
                     UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")


def try_mutation(name, scratch):
    path, old, new, tests, *variant = MUTATIONS[name]
    sanitize = variant == ["sanitize"]
    sh("git", "checkout", "-q", "--", ".", cwd=scratch)
    with open(os.path.join(scratch, path)) as f:
        text = f.read()
    if text.count(old) != 1:
        return "STALE (the text to change is not there exactly once)"
    with open(os.path.join(scratch, path), "w") as f:
        f.write(text.replace(old, new))
    build = os.path.join(scratch, "build-sanitize" if sanitize else "build")
    if not os.path.exists(build):
        sh("meson", "setup", build, scratch, "-Db_sanitize=address,undefined", "-Db_lundef=false", check=True)
    p = sh("meson", "compile", "-C", build)
    if p.returncode != 0:
        return "BUILD FAILED (make the mutation compile)"
    p = sh("meson", "test", "-C", build, "--no-rebuild", *tests, env=SANITIZER_ENV if sanitize else None)
    return "caught" if p.returncode != 0 else "MISSED"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests")
    parser.add_argument("names", nargs="*", help="mutations to try (default: all)")
    args = parser.parse_args()
    if args.list:
        for name, (path, _, _, tests, *variant) in MUTATIONS.items():
            print(f"{name:36} {path:36} {' '.join(tests)} {' '.join(variant)}")
        return 0
    names = args.names or list(MUTATIONS)
    unknown = [n for n in names if n not in MUTATIONS]
    if unknown:
        parser.error(f"unknown mutation(s): {' '.join(unknown)}")
    scratch = tempfile.mkdtemp(prefix="subvold-mutations-")
    # mkdtemp makes it 0700: the tests run subvolctl as an ordinary user,
    # who could then not execute it, and every such test failed ("caught").
    os.chmod(scratch, 0o755)
    try:
        sh("git", "clone", "-q", REPO, scratch, check=True)
        p = sh("meson", "setup", os.path.join(scratch, "build"), scratch)
        if p.returncode != 0:
            print(p.stdout.decode(errors="replace"), file=sys.stderr)
            return 2
        missed = 0
        for name in names:
            result = try_mutation(name, scratch)
            missed += result != "caught"
            print(f"{name:36} {result}", flush=True)
        return 1 if missed else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
