/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <string.h>

#include "bus-util.h"
#include "model.h"

int bus_append_bytestring(sd_bus_message *m, const char *s) {
        return sd_bus_message_append_array(m, 'y', s, strlen(s) + 1);
}

int bus_append_bytestring_array(sd_bus_message *m, char * const *l) {
        int r;

        r = sd_bus_message_open_container(m, 'a', "ay");
        if (r < 0)
                return r;
        for (; l && *l; l++) {
                r = bus_append_bytestring(m, *l);
                if (r < 0)
                        return r;
        }
        return sd_bus_message_close_container(m);
}

int bus_append_statfs(sd_bus_message *m, const StatfsInfo *st, const Usage *u) {
        return sd_bus_message_append(m, "a{sv}", 13,
                                     "bsize", "t", st->block_size,
                                     "frsize", "t", st->block_size,
                                     "blocks", "t", st->blocks,
                                     "bfree", "t", st->blocks_free,
                                     "bavail", "t", st->blocks_available,
                                     "files", "t", st->files,
                                     "ffree", "t", st->files_free,
                                     "namelen", "t", st->name_max,
                                     "flags", "t", st->flags,
                                     "referenced", "t", u->referenced,
                                     "exclusive", "t", u->exclusive,
                                     "source", "s", usage_source_to_string(u->source),
                                     "consistent", "b", (int) u->consistent);
}
