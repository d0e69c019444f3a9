/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <string.h>

#include "bus-util.h"

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
